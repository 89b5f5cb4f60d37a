"""Reader for the concurrency test: search repeatedly while a writer works.

usage: python concurrent_reader.py INDEX DURATION OUT.json SEED [VERIFY_EVERY]
(run with the environment of _support.processes.child_env)

Each iteration refreshes the snapshot (idx.refresh(), or a close + open every
other time) and then checks, within that one snapshot:
  * len(idx) == number of keys listed, all distinct;
  * every batch is all-or-nothing;
  * a search with k > len returns exactly the listed keys;
  * a search by stored key returns that key first at distance 0;
  * the features of one random visible batch are bit-identical to fresh ones;
  * every VERIFY_EVERY-th iteration (never by default), verify() is ok.
An exception (a false CorruptIndexError above all) is a violation too, and the
loop goes on. OUT.json: "iterations", "counts" (live counts seen), "errors"
(the first 20 violations, "class: detail") and "outcomes" ({class: count},
"consistent" for an iteration without a violation; the reliability bench
counts these).
"""

import json
import random
import sys
import time
import traceback
from collections import Counter

import numpy as np
from _support.index import batch_keys, batch_measures
from _support.measures import csr_identical


def check(idx, rng, query, trees, counts):
    """The first violation in the current snapshot, as (class, detail), or None."""
    n = len(idx)
    keys = list(idx)
    counts.append(n)
    if n != len(keys) or len(set(keys)) != n:
        return ("inconsistent snapshot",
                f"len {n} but {len(keys)} keys listed ({len(set(keys))} distinct)")
    batches = {}
    for key in keys:
        batches.setdefault(int(key[1:7]), set()).add(key)
    for b, ks in batches.items():
        if ks != set(batch_keys(b)):
            return "partial batch visible", f"batch {b}: {len(ks)} of {len(batch_keys(b))}"
    res = idx.search([query], k=n + 5, p=rng.choice([1, 2]))
    if set(res.keys[0]) != set(keys) or len(res.keys[0]) != n:
        return ("search disagrees with the snapshot",
                f"search saw {len(res.keys[0])} docs, snapshot lists {n}")
    if keys:
        probe = rng.choice(keys)
        res = idx.search(probe, k=3)
        d = np.asarray(res.distances)[0]
        # the probe itself is at distance 0; an identical earlier document may
        # come first (ties go by insertion order), but then it is at 0 too
        if abs(d[0]) > 1e-12 or (probe not in res.keys[0] and np.any(np.abs(d) > 1e-12)):
            return ("search by key not at distance 0",
                    f"search({probe!r}) returned {res.keys[0]} at {d.tolist()}")
        b = rng.choice(sorted(batches))
        ms = batch_measures(b, idx.graph.n_nodes)
        for r, tree in enumerate(trees):
            if not csr_identical(idx.features(batch_keys(b), root=r), tree.features_of(ms)):
                return "features differ", f"batch {b} root {r}"
    return None


def main():
    path, duration, out_file, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    verify_every = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    rng = random.Random(seed)
    from sobolev_index import CorruptIndexError, SobolevIndex

    counts, errors, outcomes = [], [], Counter()
    iterations = 0
    idx = SobolevIndex.open(path, "r")
    trees = idx.trees
    query = batch_measures(10_000_000 + seed, idx.graph.n_nodes)[0]
    deadline = time.monotonic() + duration
    try:
        while time.monotonic() < deadline:
            iterations += 1
            try:
                if iterations % 2:
                    idx.close()
                    idx = SobolevIndex.open(path, "r")
                else:
                    idx.refresh()
                problem = check(idx, rng, query, trees, counts)
                if problem is None and verify_every and iterations % verify_every == 0:
                    report = idx.verify()
                    if not report["ok"]:
                        problem = ("false corruption report (verify)",
                                   "; ".join(report["problems"])[:300])
            except Exception as exc:  # a violation too, counted by its class
                where = traceback.extract_tb(exc.__traceback__)[-1]
                name = ("false corruption report (CorruptIndexError)"
                        if isinstance(exc, CorruptIndexError) else f"error: {type(exc).__name__}")
                problem = name, f"{exc} at {where.filename}:{where.lineno}"
            outcomes[problem[0] if problem else "consistent"] += 1
            if problem and len(errors) < 20:
                errors.append(f"{problem[0]}: {problem[1]}")
    finally:
        idx.close()
    with open(out_file, "w") as fh:
        json.dump({"iterations": iterations, "counts": counts, "errors": errors,
                   "outcomes": outcomes}, fh)


if __name__ == "__main__":
    main()
