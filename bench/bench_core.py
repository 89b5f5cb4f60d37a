"""Core benchmark: featurisation, S_1 / S_2 matrices and farthest-point clustering.

Runs our code and its peers side by side in one process:

1. featurisation of N measures, against two peers that compute the same
   feature matrix: a SciPy sparse product (the measures as a CSR matrix times
   the tree's node-to-root-path matrix) and a NumPy loop (one ``np.bincount``
   over the root paths per measure). Both peers get their path tables built
   once, untimed, as our tree is;
2. the pairwise S_1 matrix of N measures on an M-node "log" graph against
   scikit-learn ``pairwise_distances(metric="manhattan")`` on the same
   w-scaled CSR features (indices sorted);
3. the S_2 matrix against scikit-learn's "euclidean" on w^(1/2)-scaled features;
4. farthest-point clustering of n float32 points in d dimensions into M
   nodes, against a NumPy Gonzalez loop timed on its first centres and
   extrapolated to M.

``--threads N`` (default: all cores) goes to ours (``n_threads``) and to
scikit-learn (``n_jobs``), and caps every BLAS and OpenMP library while the
benchmark runs; the NumPy and SciPy peers run on one thread whatever N is
(the table says so).

Tasks 1-3 are timed by ``alternating_medians``: alternating blocks of ours
and the peers', one untimed warm-up call before each block, medians.
Clustering is one long run per side (the NumPy loop's 20 centres of a
million points take about half a minute), so each side runs once, after a
warm-up on a twentieth of the points.

Correctness: our features must match both peers' and our matrices
scikit-learn's within 1e-9 relative, and our first clustering centres must be
the NumPy loop's (ours is exact Gonzalez, ties to the first row, as the loop's
argmax); otherwise the run exits with status 1 after the table.

Prints a table with medians and ratios and writes bench/results/bench_core.json.
``--quick`` uses small sizes for a smoke run.
"""
import argparse
import os
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    Checks,
    add_threads_option,
    alternating_medians,
    fmt_seconds,
    limit_threads,
    max_relative_difference,
    print_table,
    synthetic_corpus,
    write_json,
)


# ------------------------------------------------------------ featurisation
def root_paths(tree):
    """Each node's path to the root (the edges below its ancestors and itself), as a list."""
    paths = [None] * tree.n_nodes
    for v in np.argsort(tree.depth, kind="stable"):
        parent = tree.parent[v]
        paths[v] = np.zeros(0, np.int64) if parent < 0 else np.append(paths[parent], v)
    return paths


def path_matrix(paths):
    """P[u, v] = 1 when edge v lies on node u's root path; features = measures @ P."""
    lengths = np.array([len(p) for p in paths], dtype=np.int64)
    indptr = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return sp.csr_matrix((np.ones(indptr[-1]), np.concatenate(paths), indptr),
                         shape=(len(paths), len(paths)))


def scipy_features(P, indptr, nodes, masses):
    """SciPy peer: normalised measures as a CSR matrix, times the path matrix."""
    M = sp.csr_matrix((masses.copy(), nodes.copy(), indptr.copy()), shape=(len(indptr) - 1, P.shape[0]))
    M.sum_duplicates()
    M = sp.diags(1.0 / np.asarray(M.sum(axis=1)).ravel()) @ M
    return (M @ P).tocsr()


def numpy_features(paths, n_nodes, indptr, nodes, masses):
    """NumPy peer: per measure, the root paths of its nodes weighted by their masses, one bincount."""
    out_indptr = [0]
    out_indices, out_data = [], []
    for i in range(len(indptr) - 1):
        sl = slice(indptr[i], indptr[i + 1])
        m = masses[sl] / masses[sl].sum()
        edges = np.concatenate([paths[u] for u in nodes[sl]])
        weights = np.repeat(m, [len(paths[u]) for u in nodes[sl]])
        row = np.bincount(edges, weights, minlength=n_nodes)
        cols = np.flatnonzero(row)
        out_indices.append(cols)
        out_data.append(row[cols])
        out_indptr.append(out_indptr[-1] + len(cols))
    return sp.csr_matrix((np.concatenate(out_data), np.concatenate(out_indices), out_indptr),
                         shape=(len(indptr) - 1, n_nodes))


def bench_features(tree, indptr, nodes, masses, threads, blocks, per_block, checks):
    started = time.perf_counter()
    paths = root_paths(tree)
    P = path_matrix(paths)
    paths_s = time.perf_counter() - started
    timing = alternating_medians({
        "ours": lambda i: tree.features(indptr, nodes, masses, n_threads=threads),
        "scipy": lambda i: scipy_features(P, indptr, nodes, masses),
        "numpy": lambda i: numpy_features(paths, tree.n_nodes, indptr, nodes, masses),
    }, blocks, per_block)
    F = timing["ours"].result
    n = len(indptr) - 1
    path_len = int(tree.depth[nodes].sum())
    out = {"measures": n, "edge_updates": path_len, "blocks": blocks, "per_block": per_block,
           "peer_path_tables_seconds_untimed": paths_s, "nnz_per_row": F.nnz / n}
    for name, t in timing.items():
        out[f"{name}_seconds"] = t.median
        out[f"{name}_seconds_all"] = t.times
        out[f"{name}_measures_per_s"] = n / t.median
        out[f"{name}_edge_updates_per_s"] = path_len / t.median
        if name != "ours":
            rel = max_relative_difference(F, t.result)
            out[f"{name}_max_relative_difference"] = rel
            out[f"speedup_vs_{name}"] = t.median / timing["ours"].median
            checks.close(f"features vs {name}", rel)
    return out, F


# ----------------------------------------------------------------- matrices
def scaled(F, tree, p):
    S = sp.csr_matrix((F.data * tree.length[F.indices] ** (1.0 / p), F.indices, F.indptr),
                      shape=F.shape)
    S.sort_indices()
    return S


def bench_matrix(F, tree, p, sk_metric, threads, blocks, per_block, checks):
    from sklearn.metrics import pairwise_distances

    from sobolev_index import pairwise_sobolev

    S = scaled(F, tree, p)
    timing = alternating_medians({
        "ours": lambda i: pairwise_sobolev(F, trees=tree, p=p, n_threads=threads),
        "sklearn": lambda i: pairwise_distances(S, metric=sk_metric, n_jobs=threads),
    }, blocks, per_block)
    rel = max_relative_difference(timing["ours"].result, timing["sklearn"].result)
    checks.close(f"S_{p} matrix vs scikit-learn {sk_metric}", rel)
    return {"p": p, "n": F.shape[0], "blocks": blocks, "per_block": per_block,
            "ours_seconds": timing["ours"].median, "sklearn_seconds": timing["sklearn"].median,
            "ours_seconds_all": timing["ours"].times, "sklearn_seconds_all": timing["sklearn"].times,
            "sklearn_metric": sk_metric, "sklearn_n_jobs": threads,
            "speedup": timing["sklearn"].median / timing["ours"].median,
            "max_relative_difference": rel}


# --------------------------------------------------------------- clustering
def numpy_gonzalez(X, n_centres):
    """NumPy Gonzalez from row 0: one blocked distance pass over all points per centre.

    Returns the centres in the order chosen.
    """
    dist = np.full(len(X), np.inf)
    centre = 0
    centres = []
    block = 1 << 16
    for _ in range(n_centres):
        centres.append(centre)
        c = X[centre].astype(np.float64)
        for s in range(0, len(X), block):
            diff = X[s:s + block] - c
            np.minimum(dist[s:s + block], np.sqrt(np.einsum("ij,ij->i", diff, diff)),
                       out=dist[s:s + block])
        centre = int(np.argmax(dist))
    return np.array(centres)


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


def bench_clustering(n, d, m, seed, threads, checks):
    from sobolev_index import _cluster

    X = clustered_points(n, d, n_clusters=max(1, m // 4), seed=seed)
    probe = min(20, m)
    small = X[: max(1, n // 20)]
    timing = alternating_medians(
        {"ours": lambda i: _cluster.farthest_point_clustering(X, m, 0, n_threads=threads),
         "numpy": lambda i: numpy_gonzalez(X, probe)},
        1, 1,
        {"ours": lambda: _cluster.farthest_point_clustering(small, max(1, m // 20), 0, n_threads=threads),
         "numpy": lambda: numpy_gonzalez(small, max(1, probe // 20))})
    centres, _, _, radius = timing["ours"].result
    numpy_centres = timing["numpy"].result
    same = len(centres) >= probe and np.array_equal(centres[:probe], numpy_centres)
    checks.require(f"clustering: our first {probe} centres are the NumPy Gonzalez loop's", same,
                   f"ours {list(centres[:probe])}, NumPy {list(numpy_centres)}")
    ours_s = timing["ours"].median
    naive_estimate = timing["numpy"].median / probe * m
    return {"n": n, "d": d, "requested_nodes": m, "nodes": len(centres), "dtype": "float32",
            "kernel": ("generic", "AVX2", "AVX-512")[_cluster.simd_level()],
            "ours_seconds": ours_s, "numpy_seconds_estimated": naive_estimate,
            "numpy_centres_timed": probe, "speedup_estimated": naive_estimate / ours_s,
            "first_centres_agree": bool(same), "covering_radius": radius}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--skip-clustering", action="store_true")
    parser.add_argument("--fpc-points", type=int, default=100_000,
                        help="points for the clustering run (300-d, into 10,000 nodes); "
                             "1,000,000 takes a few minutes on 2 cores, most of it the data "
                             "and the NumPy loop")
    add_threads_option(parser)
    parser.add_argument("--json", default=None, help="output path (default bench/results/bench_core.json)")
    args = parser.parse_args(argv)
    threads = args.threads

    # Import every library before the thread cap: the cap only reaches
    # libraries already loaded.
    import sklearn.metrics  # noqa: F401

    import sobolev_index  # noqa: F401

    if args.quick:
        n_measures, n_nodes, n_topics = 300, 1000, 10
        fpc = (20_000, 64, 500)
    else:
        n_measures, n_nodes, n_topics = 2000, 10_000, 20
        fpc = (args.fpc_points, 300, 10_000)
    # (blocks, timed calls per block): medians over 6 calls per side.
    feature_blocks, matrix_blocks = (3, 2), (3, 2)
    checks = Checks()

    with limit_threads(threads) as pools:
        print(f"building a {n_nodes}-node 'log' graph and {n_measures} topic-clustered measures "
              f"({threads} threads) ...")
        graph, indptr, words, counts, _, graph_s = synthetic_corpus(
            n_measures, n_nodes=n_nodes, n_topics=n_topics, seed=0, n_threads=threads)
        nodes = graph.assignment[words]
        tree = graph.tree(graph.roots(1, seed=0)[0][0])

        feats, F = bench_features(tree, indptr, nodes, counts, threads, *feature_blocks, checks)
        s1 = bench_matrix(F, tree, 1, "manhattan", threads, *matrix_blocks, checks)
        s2 = bench_matrix(F, tree, 2, "euclidean", threads, *matrix_blocks, checks)
        clustering = None
        if not args.skip_clustering:
            n, d, m = fpc
            print(f"farthest-point clustering of {n:,} x {d} float32 points into {m:,} nodes ...")
            clustering = bench_clustering(n, d, m, 0, threads, checks)

    rows = [
        ["featurisation", f"{feats['ours_measures_per_s']:,.0f} measures/s "
                          f"({feats['ours_edge_updates_per_s'] / 1e6:.1f} M edge updates/s)",
         f"SciPy CSR product (1 thread): {feats['scipy_measures_per_s']:,.0f} measures/s",
         f"{feats['speedup_vs_scipy']:.1f}x", f"{feats['scipy_max_relative_difference']:.1e}"],
        ["", "", f"NumPy bincount loop (1 thread): {feats['numpy_measures_per_s']:,.0f} measures/s",
         f"{feats['speedup_vs_numpy']:.1f}x", f"{feats['numpy_max_relative_difference']:.1e}"],
        [f"S_1 matrix N={n_measures}", fmt_seconds(s1["ours_seconds"]),
         f"sklearn manhattan n_jobs={threads}: {fmt_seconds(s1['sklearn_seconds'])}",
         f"{s1['speedup']:.1f}x", f"{s1['max_relative_difference']:.1e}"],
        [f"S_2 matrix N={n_measures}", fmt_seconds(s2["ours_seconds"]),
         f"sklearn euclidean n_jobs={threads}: {fmt_seconds(s2['sklearn_seconds'])}",
         f"{s2['speedup']:.1f}x", f"{s2['max_relative_difference']:.1e}"],
    ]
    if clustering is not None:
        rows.append([f"clustering {clustering['n']:,}x{clustering['d']} -> {clustering['requested_nodes']:,}",
                     fmt_seconds(clustering["ours_seconds"]),
                     f"NumPy Gonzalez, 1 thread (est. from {clustering['numpy_centres_timed']} centres): "
                     f"{fmt_seconds(clustering['numpy_seconds_estimated'])}",
                     f"{clustering['speedup_estimated']:.0f}x",
                     "same centres" if clustering["first_centres_agree"] else "CENTRES DIFFER"])
    print_table(
        f"sobolev-index core (graph: {graph.n_nodes} nodes, {graph.n_edges} edges, built in "
        f"{graph_s:.1f} s; {feats['nnz_per_row']:.0f} nonzeros per row; medians of "
        f"{feature_blocks[0]} alternating blocks x {feature_blocks[1]} calls)",
        ["task", "ours", "peer", "ours faster by", "max rel diff"], rows, threads)
    write_json("bench_core", {
        "graph": {"nodes": graph.n_nodes, "edges": graph.n_edges, "seconds": graph_s},
        "featurisation": feats, "s1_matrix": s1, "s2_matrix": s2, "clustering": clustering,
    }, args.json, threads, checks, pools)
    checks.exit_if_failed()


if __name__ == "__main__":
    main()
