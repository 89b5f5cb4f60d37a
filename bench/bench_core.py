"""Core benchmark: featurisation, S_1 / S_2 matrices and farthest-point clustering.

Runs our code and its peers side by side in one process:

1. featurisation throughput against a plain NumPy implementation (per-node
   root paths, then one ``np.bincount`` per measure);
2. the pairwise S_1 matrix of N measures on an M-node "log" graph against
   scikit-learn ``pairwise_distances(metric="manhattan", n_jobs=2)`` on the same
   w-scaled CSR features (indices sorted), with the largest relative difference;
3. the S_2 matrix against scikit-learn's "euclidean" on w^(1/2)-scaled features;
4. farthest-point clustering of n points in d dimensions into M nodes, against
   a NumPy Gonzalez loop timed on its first centres and extrapolated.

Prints a table with medians and ratios and writes bench/results/bench_core.json.
``--quick`` uses small sizes for a smoke run.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import fmt_seconds, median_time, print_table, synthetic_corpus, write_json  # noqa: E402


def numpy_features(tree, indptr, nodes, masses):
    """Plain NumPy feature map: each node's root path, then a bincount per measure."""
    paths = [None] * tree.n_nodes
    order = np.argsort(tree.depth, kind="stable")
    for v in order:
        parent = tree.parent[v]
        paths[v] = np.zeros(0, np.int64) if parent < 0 else np.append(paths[parent], v)
    rows = []
    for i in range(len(indptr) - 1):
        sl = slice(indptr[i], indptr[i + 1])
        m = masses[sl] / masses[sl].sum()
        edges = np.concatenate([paths[u] for u in nodes[sl]])
        weights = np.repeat(m, [len(paths[u]) for u in nodes[sl]])
        rows.append(np.bincount(edges, weights, minlength=tree.n_nodes))
    return np.array(rows)


def bench_features(tree, indptr, nodes, masses, n_numpy):
    path_len = int(tree.depth[nodes].sum())
    ours_s, F = median_time(lambda: tree.features(indptr, nodes, masses), repeats=5)
    sub = slice(0, n_numpy + 1)
    numpy_s, dense = median_time(
        lambda: numpy_features(tree, indptr[sub], nodes, masses), repeats=1, warmup=0
    )
    agree = np.allclose(F[:n_numpy].toarray(), dense, rtol=1e-12, atol=1e-15)
    n = len(indptr) - 1
    sub_path_len = int(tree.depth[nodes[: indptr[n_numpy]]].sum())
    return {
        "measures": n,
        "ours_seconds": ours_s,
        "ours_measures_per_s": n / ours_s,
        "ours_edge_updates_per_s": path_len / ours_s,
        "numpy_measures": n_numpy,
        "numpy_seconds": numpy_s,
        "numpy_measures_per_s": n_numpy / numpy_s,
        "numpy_edge_updates_per_s": sub_path_len / numpy_s,
        "speedup": (n / ours_s) / (n_numpy / numpy_s),
        "numpy_agrees": bool(agree),
        "nnz_per_row": F.nnz / n,
    }, F


def scaled(F, tree, p):
    import scipy.sparse as sp

    S = sp.csr_matrix((F.data * tree.length[F.indices] ** (1.0 / p), F.indices, F.indptr),
                      shape=F.shape)
    S.sort_indices()
    return S


def bench_matrix(F, tree, p, sk_metric, sk_jobs, sk_repeats):
    from sklearn.metrics import pairwise_distances

    from sobolev_index import pairwise_sobolev

    ours_s, ours = median_time(lambda: pairwise_sobolev(F, trees=tree, p=p), repeats=5)
    S = scaled(F, tree, p)
    sk_s, theirs = median_time(
        lambda: pairwise_distances(S, metric=sk_metric, n_jobs=sk_jobs),
        repeats=sk_repeats, warmup=0,
    )
    mask = theirs > 1e-6 * theirs.max()
    rel = float(np.max(np.abs(ours[mask] - theirs[mask]) / theirs[mask]))
    return {"p": p, "n": F.shape[0], "ours_seconds": ours_s, "sklearn_seconds": sk_s,
            "sklearn_metric": sk_metric, "sklearn_n_jobs": sk_jobs,
            "speedup": sk_s / ours_s, "max_relative_difference": rel}


def naive_gonzalez_seconds_per_centre(X, n_centres):
    """NumPy Gonzalez: one blocked distance pass over all points per centre."""
    dist = np.full(len(X), np.inf)
    centre = 0
    started = time.perf_counter()
    block = 1 << 16
    for _ in range(n_centres):
        c = X[centre].astype(np.float64)
        for s in range(0, len(X), block):
            diff = X[s:s + block] - c
            np.minimum(dist[s:s + block], np.sqrt(np.einsum("ij,ij->i", diff, diff)),
                       out=dist[s:s + block])
        centre = int(np.argmax(dist))
    return (time.perf_counter() - started) / n_centres


def clustered_points(n, d, n_clusters, seed):
    """Word-embedding-like points: cluster centres plus low-rank and isotropic noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, d)).astype(np.float32) * 2.0
    basis = rng.normal(size=(8, d)).astype(np.float32)
    X = np.empty((n, d), dtype=np.float32)
    step = 1 << 16
    for s in range(0, n, step):
        m = min(step, n - s)
        X[s:s + m] = (centres[rng.integers(0, n_clusters, m)]
                      + rng.normal(size=(m, 8)).astype(np.float32) @ basis * 0.3
                      + rng.normal(size=(m, d)).astype(np.float32) * 0.1)
    return X


def bench_clustering(n, d, m, seed):
    from sobolev_index import _cluster

    X = clustered_points(n, d, n_clusters=max(1, m // 4), seed=seed)
    started = time.perf_counter()
    centres, _, _, radius = _cluster.farthest_point_clustering(X, m, 0)
    ours_s = time.perf_counter() - started
    probe = min(20, m)
    naive_per_centre = naive_gonzalez_seconds_per_centre(X, probe)
    naive_estimate = naive_per_centre * m
    return {"n": n, "d": d, "requested_nodes": m, "nodes": len(centres), "dtype": "float32",
            "ours_seconds": ours_s, "numpy_seconds_estimated": naive_estimate,
            "numpy_centres_timed": probe, "speedup_estimated": naive_estimate / ours_s,
            "covering_radius": radius}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--skip-clustering", action="store_true")
    parser.add_argument("--fpc-points", type=int, default=100_000,
                        help="points for the clustering run (300-d, into 10,000 nodes); "
                             "1,000,000 is the issue's size and takes about half an hour here")
    parser.add_argument("--json", default=None, help="output path (default bench/results/bench_core.json)")
    args = parser.parse_args(argv)

    if args.quick:
        n_measures, n_nodes, n_topics, sk_repeats = 300, 1000, 10, 1
        fpc = (20_000, 64, 500)
    else:
        n_measures, n_nodes, n_topics, sk_repeats = 2000, 10_000, 20, 3
        fpc = (args.fpc_points, 300, 10_000)

    print(f"building a {n_nodes}-node 'log' graph and {n_measures} topic-clustered measures ...")
    graph, indptr, words, counts, _, graph_s = synthetic_corpus(
        n_measures, n_nodes=n_nodes, n_topics=n_topics, seed=0)
    nodes = graph.assignment[words]
    tree = graph.tree(graph.roots(1, seed=0)[0][0])

    feats, F = bench_features(tree, indptr, nodes, counts, n_numpy=min(200, n_measures))
    s1 = bench_matrix(F, tree, 1, "manhattan", 2, sk_repeats)
    s2 = bench_matrix(F, tree, 2, "euclidean", None, max(3, sk_repeats))

    rows = [
        ["featurisation", f"{feats['ours_measures_per_s']:,.0f} measures/s "
                          f"({feats['ours_edge_updates_per_s'] / 1e6:.1f} M edge updates/s)",
         f"NumPy: {feats['numpy_measures_per_s']:,.0f} measures/s", f"{feats['speedup']:.0f}x", ""],
        [f"S_1 matrix N={n_measures}", fmt_seconds(s1["ours_seconds"]),
         f"sklearn manhattan n_jobs=2: {fmt_seconds(s1['sklearn_seconds'])}",
         f"{s1['speedup']:.1f}x", f"{s1['max_relative_difference']:.1e}"],
        [f"S_2 matrix N={n_measures}", fmt_seconds(s2["ours_seconds"]),
         f"sklearn euclidean: {fmt_seconds(s2['sklearn_seconds'])}",
         f"{s2['speedup']:.1f}x", f"{s2['max_relative_difference']:.1e}"],
    ]
    clustering = None
    if not args.skip_clustering:
        n, d, m = fpc
        print(f"farthest-point clustering of {n:,} x {d} float32 points into {m:,} nodes ...")
        clustering = bench_clustering(n, d, m, seed=0)
        rows.append([f"clustering {n:,}x{d} -> {m:,}", fmt_seconds(clustering["ours_seconds"]),
                     f"NumPy Gonzalez (est. from {clustering['numpy_centres_timed']} centres): "
                     f"{fmt_seconds(clustering['numpy_seconds_estimated'])}",
                     f"{clustering['speedup_estimated']:.0f}x", ""])
    print_table(
        f"sobolev-index core (graph: {graph.n_nodes} nodes, {graph.n_edges} edges, built in "
        f"{graph_s:.1f} s; {feats['nnz_per_row']:.0f} nonzeros per row; medians)",
        ["task", "ours", "peer", "ours faster by", "max rel diff"], rows)
    write_json("bench_core", {
        "graph": {"nodes": graph.n_nodes, "edges": graph.n_edges, "seconds": graph_s},
        "featurisation": feats, "s1_matrix": s1, "s2_matrix": s2, "clustering": clustering,
    }, args.json)


if __name__ == "__main__":
    main()
