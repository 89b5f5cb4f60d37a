"""Reader for the concurrency test: search repeatedly while a writer works.

usage: python concurrent_reader.py INDEX DURATION OUT.json SEED
(run with the environment of _support.processes.child_env)

Each iteration refreshes the snapshot (idx.refresh(), or a close + open every
other time) and then checks, within that one snapshot:
  * len(idx) == number of keys listed;
  * every batch is all-or-nothing;
  * a search with k > len returns exactly the listed keys;
  * a search by stored key returns that key first at distance 0;
  * the features of one random visible batch are bit-identical to fresh ones.
Violations are collected in OUT.json ("errors"); exceptions propagate (exit 1).
"""

import json
import random
import sys
import time

import numpy as np
from _support.index import batch_keys, batch_measures
from _support.measures import csr_identical


def main():
    path, duration, out_file, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    from sobolev_index import SobolevIndex

    counts, errors = [], []
    iterations = 0
    idx = SobolevIndex.open(path, "r")
    trees = idx.trees
    n_nodes = idx.graph.n_nodes
    query = batch_measures(10_000_000 + seed, n_nodes)[0]
    deadline = time.monotonic() + duration
    try:
        while time.monotonic() < deadline:
            if iterations % 2:
                idx.refresh()
            else:
                idx.close()
                idx = SobolevIndex.open(path, "r")
            iterations += 1
            n = len(idx)
            keys = list(idx)
            counts.append(n)
            if n != len(keys) or len(set(keys)) != n:
                errors.append(f"len {n} but {len(keys)} keys listed ({len(set(keys))} distinct)")
            batches = {}
            for key in keys:
                batches.setdefault(int(key[1:7]), set()).add(key)
            for b, ks in batches.items():
                if ks != set(batch_keys(b)):
                    errors.append(f"batch {b} partly visible: {len(ks)} of {len(batch_keys(b))}")
            res = idx.search([query], k=n + 5, p=rng.choice([1, 2]))
            if set(res.keys[0]) != set(keys) or len(res.keys[0]) != n:
                errors.append(f"search saw {len(res.keys[0])} docs, snapshot lists {n}")
            if keys:
                probe = rng.choice(keys)
                res = idx.search(probe, k=3)
                d = np.asarray(res.distances)[0]
                # the probe itself is at distance 0; an identical earlier document may
                # come first (ties go by insertion order), but then it is at 0 too
                if abs(d[0]) > 1e-12 or (probe not in res.keys[0] and np.any(np.abs(d) > 1e-12)):
                    errors.append(f"search({probe!r}) returned {res.keys[0]} at {d.tolist()}")
                b = rng.choice(sorted(batches))
                ms = batch_measures(b, n_nodes)
                for r, tree in enumerate(trees):
                    if not csr_identical(idx.features(batch_keys(b), root=r), tree.features_of(ms)):
                        errors.append(f"features of batch {b} root {r} differ")
            if len(errors) > 20:
                break
    finally:
        idx.close()
    with open(out_file, "w") as fh:
        json.dump({"iterations": iterations, "counts": counts, "errors": errors}, fh)


if __name__ == "__main__":
    main()
