"""How much could a metric index prune on the benchmark corpora?

An exact index skips a group of rows only if a lower bound on their distance
to the query exceeds the k-th nearest distance. This script measures, on the
corpora of ``bench_scale.py``, what the two bounds that need no per-row work
in the query's columns would leave:

- cluster balls: rows clustered by k-means on their S_p features (scaled by
  w^(1/p)); a cluster of centre c and radius r is skipped when
  d(q, c) - r exceeds the k-th distance;
- shells: a row x of cluster c is skipped when |d(q, c) - d(x, c)| exceeds
  it (the triangle inequality; the rows of a cluster sorted by d(x, c) make
  the survivors one contiguous run).

It prints, per corpus and p, the median share of rows each bound keeps over
``--queries`` queries and the median ratio of the k-th distance to the
median distance (the contrast: near 1, no bound of this kind can skip
much). Distances are computed by brute force (scikit-learn), so it needs
about 3 GB at the default N = 10^5. No timing, no index.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    add_threads_option,
    limit_threads,
    positive_int,
    synthetic_corpus,
    uniform_corpus,
)

K = 10
METRIC = {1: "manhattan", 2: "euclidean"}


def corpus(name, n, threads):
    """(tree, features of n + queries measures); parameters as in bench_scale.py."""
    if name == "topics":
        graph, indptr, words, masses, _, _ = synthetic_corpus(
            n, n_nodes=10_000, n_topics=20, seed=1, n_threads=threads)
    else:
        graph, indptr, words, masses, _, _ = uniform_corpus(
            n, n_nodes=1_000, seed=2, n_threads=threads)
    roots, _ = graph.roots(1, strategy="center")
    tree = graph.tree(int(roots[0]))
    return tree, tree.features(indptr, graph.assignment[words], masses, n_threads=threads)


def kept_shares(X, Q, p, clusters, threads):
    """(cluster-ball share, shell share, contrast) per query."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics import pairwise_distances

    metric = METRIC[p]
    km = MiniBatchKMeans(clusters, random_state=0, n_init=1, batch_size=4096).fit(X)
    labels, centres = km.labels_, km.cluster_centers_
    to_centre = np.zeros(X.shape[0])
    for c in range(clusters):
        rows = np.flatnonzero(labels == c)
        if len(rows):
            to_centre[rows] = pairwise_distances(X[rows], centres[c:c + 1], metric=metric)[:, 0]
    radius = np.zeros(clusters)
    np.maximum.at(radius, labels, to_centre)
    D = pairwise_distances(Q, X, metric=metric, n_jobs=threads)
    kth = np.partition(D, K - 1, axis=1)[:, K - 1]
    query_centre = pairwise_distances(Q, centres, metric=metric)
    balls, shells = [], []
    for i in range(Q.shape[0]):
        kept_clusters = query_centre[i] - radius <= kth[i]
        balls.append(kept_clusters[labels].mean())
        shells.append((np.abs(query_centre[i, labels] - to_centre) <= kth[i]).mean())
    return np.array(balls), np.array(shells), kth / np.median(D, axis=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=positive_int, default=100_000)
    parser.add_argument("--queries", type=positive_int, default=50)
    parser.add_argument("--clusters", type=positive_int, nargs="+", default=[64, 1024])
    parser.add_argument("--corpus", default="topics,uniform")
    add_threads_option(parser)
    args = parser.parse_args()
    import scipy.sparse as sp

    with limit_threads(args.threads):
        for name in args.corpus.split(","):
            tree, F = corpus(name, args.n + args.queries, args.threads)
            for p in (1, 2):
                S = sp.csr_matrix((F.data * tree.length[F.indices] ** (1.0 / p), F.indices,
                                   F.indptr), shape=F.shape)
                X, Q = S[:args.n], S[args.n:]
                for clusters in args.clusters:
                    balls, shells, contrast = kept_shares(X, Q, p, clusters, args.threads)
                    print(f"{name}, N = {args.n}, p = {p}, {clusters} clusters: "
                          f"balls keep {np.median(balls):.1%} of the rows, shells "
                          f"{np.median(shells):.1%}; k-th / median distance "
                          f"{np.median(contrast):.3f}", flush=True)


if __name__ == "__main__":
    main()
