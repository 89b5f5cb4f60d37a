"""k-NN graph benchmark: the exact k-NN graph of a whole index.

On the topic corpus of ``bench_scale.py`` (20 topics, a 10,000-node graph,
one central root), N = ``--n`` documents (default 10^5):

- ours: ``SobolevIndex.knn_graph(k)`` (k = 15 by default) over every live
  document, timed once after a warm-up search (it is minutes of work, so a
  run is one measurement, not a median);
- scikit-learn: ``NearestNeighbors(algorithm="brute")`` on the same
  features scaled by w^(1/p), ``kneighbors`` of ``--sample`` rows (the
  whole graph would take hours), timed the same way; the table gives both
  per row and the ratio.
- exactness: the sampled rows of our graph must hold scikit-learn's k
  nearest other documents (the same k-th distance, every distance within
  1e-9 relative; among equally far documents either may be taken), or the
  run exits with status 1 after the table. The peer's features come from
  the index's own tree (``features_of``), so this checks the search, not
  the featurisation (tests/reference.py checks that).

``--threads`` goes to both sides and caps BLAS and OpenMP. Writes
bench/results/bench_knn_graph.json.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    Checks,
    add_threads_option,
    limit_threads,
    positive_int,
    print_table,
    synthetic_corpus,
    threadpools,
    write_json,
)
from bench_scale import METRIC, TOPIC_NODES, TOPIC_PARAMS, scaled  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=positive_int, default=100_000)
    parser.add_argument("-k", type=positive_int, default=15)
    parser.add_argument("-p", type=int, choices=(1, 2), default=1)
    parser.add_argument("--sample", type=positive_int, default=500,
                        help="rows timed and checked against scikit-learn")
    parser.add_argument("--quick", action="store_true", help="N = 5,000, 100 sampled rows")
    parser.add_argument("--json", default=None)
    add_threads_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.n, args.sample = 5_000, 100
    from sklearn.metrics import pairwise_distances
    from sklearn.neighbors import NearestNeighbors

    from sobolev_index import SobolevIndex

    checks = Checks()
    graph, indptr, words, counts, _, _ = synthetic_corpus(
        args.n, n_nodes=TOPIC_NODES, n_threads=args.threads, **TOPIC_PARAMS)
    nodes = graph.assignment[words]
    measures = [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                for i in range(args.n)]
    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(args.n, size=min(args.sample, args.n), replace=False))
    with tempfile.TemporaryDirectory() as tmp, limit_threads(args.threads):
        path = os.path.join(tmp, "ix")
        with SobolevIndex.create(path, graph, p=args.p) as index:
            for start in range(0, args.n, 10_000):
                index.add(measures[start:start + 10_000])
        with SobolevIndex.open(path) as reader:
            keys = reader.keys_in_order()
            reader.search(keys[:64], k=args.k + 1, n_threads=args.threads)  # warm-up
            started = time.perf_counter()
            ours = reader.knn_graph(args.k, n_threads=args.threads)
            ours_seconds = time.perf_counter() - started
            tree = reader.trees[0]
            F = tree.features_of(measures, n_threads=args.threads)
            pools = threadpools()
        X = scaled(F, tree.length, args.p)
        nn = NearestNeighbors(n_neighbors=args.k + 1, algorithm="brute", metric=METRIC[args.p],
                              n_jobs=args.threads).fit(X)
        nn.kneighbors(X[sample[:8]])  # warm-up
        started = time.perf_counter()
        peer_d, peer_i = nn.kneighbors(X[sample])
        peer_seconds = time.perf_counter() - started
    checks.require("every row holds k entries", ours.nnz == args.n * args.k,
                   f"{ours.nnz} entries for {args.n} rows")

    mismatched = 0
    for row, i in enumerate(sample):
        cols = ours.indices[ours.indptr[i]:ours.indptr[i + 1]]
        vals = ours.data[ours.indptr[i]:ours.indptr[i + 1]]
        keep = peer_i[row] != i
        truth = peer_d[row][keep][:args.k]
        same = np.allclose(np.sort(vals), truth, rtol=1e-9, atol=1e-12) and i not in cols
        # Our distances at our columns, recomputed by the peer's metric.
        recomputed = pairwise_distances(X[cols], X[i], metric=METRIC[args.p])[:, 0]
        same &= np.allclose(vals, recomputed, rtol=1e-9, atol=1e-12)
        mismatched += not same
    checks.require(f"{len(sample)} sampled rows equal to scikit-learn's neighbours",
                   mismatched == 0, f"{mismatched} rows differ")

    ours_row = ours_seconds / args.n
    peer_row = peer_seconds / len(sample)
    rows = [["ours: knn_graph, every row", f"{ours_seconds:.1f} s", f"{1e3 * ours_row:.3f} ms",
             "1.0x"],
            [f"scikit-learn brute force, {len(sample)} rows", f"{peer_seconds:.1f} s",
             f"{1e3 * peer_row:.3f} ms", f"{peer_row / ours_row:.1f}x slower"]]
    print_table(f"k-NN graph, N = {args.n:,}, k = {args.k}, p = {args.p}",
                ["", "time", "per row", "ratio"], rows, args.threads)
    write_json("bench_knn_graph", {
        "n": args.n, "k": args.k, "p": args.p, "sample": len(sample),
        "ours_seconds": ours_seconds, "peer_sample_seconds": peer_seconds,
        "ours_ms_per_row": 1e3 * ours_row, "peer_ms_per_row": 1e3 * peer_row,
        "rows_mismatched": mismatched}, args.json, args.threads, checks, pools)
    checks.exit_if_failed()


if __name__ == "__main__":
    main()
