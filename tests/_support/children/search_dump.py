"""Child process: open an index read-only, run one search, print JSON.

usage: python search_dump.py INDEX QUERIES.npz K P [ROOTS-JSON]
(run with the environment of _support.processes.child_env)

QUERIES.npz holds indptr, nodes, masses (CSR batch of query measures).
With SOBOLEV_TEST_SERIAL_THRESHOLD set, the serial threshold of the compiled
loops is set to it first (1: even small searches run in parallel).
Output (stdout): {"keys": [[...], ...], "distances": [[...], ...], "threads": n}
where n is the number of threads the search could use (OMP_NUM_THREADS).
Floats are written with repr, so they round-trip exactly.
"""
import json
import math
import sys

import numpy as np
from _support.processes import serial_threshold_from_env


def main():
    path, qfile, k, p = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    roots = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
    p = math.inf if p == "inf" else float(p)
    z = np.load(qfile)
    indptr, nodes, masses = z["indptr"], z["nodes"], z["masses"]
    queries = [(nodes[indptr[i]:indptr[i + 1]], masses[indptr[i]:indptr[i + 1]])
               for i in range(len(indptr) - 1)]
    from sobolev_index import SobolevIndex

    threads = serial_threshold_from_env()

    kw = {} if roots is None else {"roots": roots}
    with SobolevIndex.open(path, "r") as idx:
        res = idx.search(queries, k=k, p=p, **kw)
    out = {
        "keys": [list(map(str, row)) for row in res.keys],
        "distances": np.asarray(res.distances, dtype=float).tolist(),
        "threads": threads,
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
