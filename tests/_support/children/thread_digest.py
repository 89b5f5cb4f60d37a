"""Child process: build a graph, features, distance and kernel matrices, and
print sha256 digests of every result, to compare runs with different
OMP_NUM_THREADS bit for bit.

usage: python thread_digest.py
(run with the environment of _support.processes.child_env; with
SOBOLEV_TEST_SERIAL_THRESHOLD=1 even the small inputs take the parallel loops)
Output (stdout): JSON {name: sha256 hex digest, ..., "threads": n}.
"""
import hashlib
import json
import sys

import numpy as np
from _support.processes import serial_threshold_from_env


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def main():
    from sobolev_index import Graph, pairwise_sobolev, sobolev_kernel

    threads = serial_threshold_from_env()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 3))
    g = Graph.from_points(X, n_nodes=80, edges="log", seed=0)
    roots, eta = g.roots(3, strategy="random", seed=0)
    trees = g.trees(roots)
    ms = []
    for _ in range(400):
        k = int(rng.integers(1, 12))
        ms.append((rng.integers(g.n_nodes, size=k), rng.uniform(0.1, 1.0, size=k)))
    Fs = [t.features_of(ms) for t in trees]
    out = {"threads": threads,
           "graph": digest(g.edges, g.lengths, g.coords, g.assignment),
           "features": digest(*[a for F in Fs for a in (F.indptr, F.indices, F.data)])}
    for p in (1, 2, 1.5, float("inf")):
        out[f"single {p}"] = digest(pairwise_sobolev(Fs[0], trees=trees[0], p=p))
        out[f"sliced {p}"] = digest(
            pairwise_sobolev(Fs, [F[:50] for F in Fs], trees=trees, p=p, eta=eta))
    out["kernel"] = digest(sobolev_kernel(Fs[0], trees=trees[0], p=2, power=True))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
