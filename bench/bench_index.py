"""Index benchmark: query latency, insert throughput, open time and size on disk.

On a synthetic topic-clustered corpus (20-150 supports per measure) on an
M-node "log" graph, side by side in one run:

- k=10 query latency for p=1 and p=2, per query within a batch and for single
  queries, against scikit-learn brute force on the same w^(1/p)-scaled
  features (sorted CSR indices) and, for batches, PyNNDescent (approximate;
  its recall is reported). Every side is timed by ``alternating_medians``:
  alternating blocks, one untimed warm-up call before each block, medians.
- insert throughput of 1,000-measure batches at N=10^4 and at N=N_max;
- open-to-first-result time at N_max;
- bytes on disk per measure;
- how much of the index a search reads (``search(..., stats=True)``): the
  share of the rows whose cheapest bound was computed, whose group bound
  was, whose stored values were read, and which were scored exactly, the
  share of the 8,192-row blocks in which a row was read, each phase's time
  per query, and what asking for the statistics costs (the batch timed
  with ``stats=True`` beside the same batch without);
- a radius search of the same batch (``search(queries, radius=r)``) at r =
  the median of its 10th-neighbour distances: its time, results per query,
  and the same shares, checked against scikit-learn's ``radius_neighbors``.

``--threads N`` (default: all cores) goes to our searches (``n_threads``), to
scikit-learn and PyNNDescent (``n_jobs``), and caps every BLAS and OpenMP
library while the benchmark runs.

Correctness: every batched and single search of ours must find exactly
scikit-learn's neighbours (recall 1.0) at distances within 1e-9 relative of
scikit-learn's; otherwise the run exits with status 1 after the tables.

Prints tables and writes bench/results/bench_index.json. ``--quick`` runs
small sizes.
"""
import argparse
import os
import shutil
import sys
import tempfile
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
    recall,
    synthetic_corpus,
    write_json,
)


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def batches(indptr, nodes, counts, start, stop, size):
    for s in range(start, stop, size):
        e = min(stop, s + size)
        yield s, e, [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                     for i in range(s, e)]


def scaled_features(tree, F, p):
    """Features scaled by w^(1/p): S_p is then the plain l_p distance the peers compute."""
    S = sp.csr_matrix((F.data * tree.length[F.indices] ** (1.0 / p), F.indices, F.indptr),
                      shape=F.shape)
    S.sort_indices()
    return S


def measure_insert(index, indptr, nodes, counts, small, n_total, batch_size):
    """Measures per second of the last ten batches before N=small and before N=n_total."""
    insert = {}
    added = 0
    for label, target in (("at_10k", small), ("at_max", n_total)):
        window_start = max(added, target - 10 * batch_size)
        for _, _, chunk in batches(indptr, nodes, counts, added, window_start, batch_size):
            index.add(chunk)
        started = time.perf_counter()
        for _, _, chunk in batches(indptr, nodes, counts, window_start, target, batch_size):
            index.add(chunk)
        seconds = time.perf_counter() - started
        insert[label] = {"n_after": target, "measures": target - window_start,
                         "measures_per_s": (target - window_start) / seconds}
        added = target
    insert["ratio"] = insert["at_max"]["measures_per_s"] / insert["at_10k"]["measures_per_s"]
    return insert


def measure_latency(reader, nn, nnd, query_measures, Q, p, k, n_single, blocks, threads, checks):
    """Batched and single-query latency of ours, scikit-learn and PyNNDescent, and their checks."""
    n_batch = len(query_measures)
    per_single = n_single // blocks

    # Batches: one 200-query call per block and side; the warm-up is a
    # 2-query call, which loads the same code and data as a full batch.
    batch_fns = {
        "ours": lambda i: reader.search(query_measures, k=k, p=p, n_threads=threads),
        "ours_stats": lambda i: reader.search(query_measures, k=k, p=p, n_threads=threads,
                                              stats=True),
        "sklearn": lambda i: nn.kneighbors(Q),
    }
    batch_warmups = {
        "ours": lambda: reader.search(query_measures[:2], k=k, p=p, n_threads=threads),
        "ours_stats": lambda: reader.search(query_measures[:2], k=k, p=p, n_threads=threads,
                                            stats=True),
        "sklearn": lambda: nn.kneighbors(Q[:2]),
    }
    if nnd is not None:
        batch_fns["pynndescent"] = lambda i: nnd.query(Q, k=k)
        batch_warmups["pynndescent"] = lambda: nnd.query(Q[:2], k=k)
    batched = alternating_medians(batch_fns, blocks, 1, batch_warmups)
    sk_dist, sk_idx = batched["sklearn"].result
    truth = [[f"doc-{j + 1}" for j in row] for row in sk_idx]
    ours = batched["ours"].result

    # Single queries, as a service answers one after another: each side runs a
    # block of different queries warm, the blocks alternate so that both meet
    # the same moments of the machine. The warm-up query is one not timed.
    singles = {}

    def ours_single(i):
        singles[i] = reader.search(query_measures[i:i + 1], k=k, p=p, n_threads=threads)
        return singles[i]

    single = alternating_medians(
        {"ours": ours_single, "sklearn": lambda i: nn.kneighbors(Q[i])},
        blocks, per_single,
        {"ours": lambda: reader.search(query_measures[n_single:n_single + 1], k=k, p=p,
                                       n_threads=threads),
         "sklearn": lambda: nn.kneighbors(Q[n_single])})

    batch_recall = recall(ours.keys, truth)
    batch_rel = max_relative_difference(ours.distances, sk_dist)
    timed = sorted(singles)
    single_recall = recall([singles[i].keys[0] for i in timed], [truth[i] for i in timed])
    single_rel = max(max_relative_difference(singles[i].distances[0], sk_dist[i]) for i in timed)
    checks.recall(f"p={p} batched search vs scikit-learn", batch_recall)
    checks.close(f"p={p} batched search distances", batch_rel)
    checks.recall(f"p={p} single-query search vs scikit-learn", single_recall)
    checks.close(f"p={p} single-query search distances", single_rel)

    per_query = {name: t.median / n_batch for name, t in batched.items()}
    counted = batched["ours_stats"].result
    checks.recall(f"p={p} batched search with stats vs scikit-learn",
                  recall(counted.keys, truth))
    within = measure_radius(reader, nn, query_measures, Q, p, threads,
                            float(np.median(sk_dist[:, k - 1])), checks)
    entry = {
        "radius": within,
        "pruning": pruning(counted.stats),
        "stats_overhead": per_query["ours_stats"] / per_query["ours"] - 1.0,
        "ours_batch_ms": per_query["ours"] * 1e3, "ours_single_ms": single["ours"].median * 1e3,
        "sklearn_batch_ms": per_query["sklearn"] * 1e3,
        "sklearn_single_ms": single["sklearn"].median * 1e3,
        "speedup_batch": per_query["sklearn"] / per_query["ours"],
        "speedup_single": single["sklearn"].median / single["ours"].median,
        "recall": batch_recall, "single_recall": single_recall,
        "max_relative_distance_difference": batch_rel,
        "single_max_relative_distance_difference": single_rel,
        "batch_queries": n_batch, "batch_blocks": blocks,
        "single_queries_timed": len(timed), "single_blocks": blocks,
        "batch_seconds": {name: t.times for name, t in batched.items()},
        "single_seconds": {name: t.times for name, t in single.items()},
    }
    if nnd is not None:
        nnd_idx, _ = batched["pynndescent"].result
        entry["pynndescent_batch_ms"] = per_query["pynndescent"] * 1e3
        entry["pynndescent_recall"] = recall([[f"doc-{j + 1}" for j in row] for row in nnd_idx], truth)
    return entry


def measure_radius(reader, nn, query_measures, Q, p, threads, radius, checks):
    """One radius search of the batch: its time per query, results per
    query and pruning, and a check against scikit-learn's radius_neighbors
    (the same documents, up to those within 1e-9 of the radius). It is
    timed warm, after one untimed call."""
    reader.search(query_measures, radius=radius, p=p, n_threads=threads, stats=True)
    started = time.perf_counter()
    found = reader.search(query_measures, radius=radius, p=p, n_threads=threads, stats=True)
    seconds = time.perf_counter() - started
    sk_dist, sk_idx = nn.radius_neighbors(Q, radius=radius * (1 + 1e-9))
    same = True
    for keys, dist, idx in zip(found.keys, sk_dist, sk_idx):
        sure = {f"doc-{j + 1}" for j, d in zip(idx, dist) if d <= radius * (1 - 1e-9)}
        maybe = {f"doc-{j + 1}" for j in idx}
        same = same and sure <= set(keys) <= maybe
    checks.require(f"p={p} radius search vs scikit-learn radius_neighbors", same)
    return {"radius": radius, "ms_per_query": 1e3 * seconds / len(query_measures),
            "results_per_query": float(np.mean([len(keys) for keys in found.keys])),
            "pruning": pruning(found.stats)}


def pruning(stats):
    """Shares of the rows (and blocks) a batch's search bounded, refined,
    read and scored exactly, and its phases' milliseconds per query, from
    ``SearchResult.stats`` of ``search(..., stats=True)``."""
    queries = stats["queries"]
    rows = stats["rows"]
    out = {f"fraction_{name}": stats[name] / rows
           for name in ("bounded", "refined", "rows_read", "exact")}
    out["fraction_blocks_scored"] = stats["blocks_scored"] / max(stats["blocks"], 1)
    for phase in queries[0]["seconds"]:
        out[f"{phase}_ms"] = 1e3 * sum(q["seconds"][phase] for q in queries) / len(queries)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--n", type=int, default=None, help="corpus size (default 100000)")
    parser.add_argument("--skip-pynndescent", action="store_true")
    add_threads_option(parser)
    parser.add_argument("--json", default=None, help="output path (default bench/results/bench_index.json)")
    args = parser.parse_args(argv)
    threads = args.threads

    # Import every library before the thread cap: the cap only reaches
    # libraries already loaded.
    from sklearn.neighbors import NearestNeighbors

    from sobolev_index import SobolevIndex

    NNDescent = None
    if not args.skip_pynndescent:
        try:
            from pynndescent import NNDescent
        except ImportError:
            parser.error("pynndescent is not installed; install it or pass --skip-pynndescent")

    n_total = args.n or (5_000 if args.quick else 100_000)
    n_nodes = 1_000 if args.quick else 10_000
    small = min(10_000, n_total // 2)
    batch_size = 1_000
    # Timed single queries come from the batch's queries; the one after them is the warm-up.
    n_batch_queries, n_single, blocks = (50, 6, 3) if args.quick else (200, 30, 3)
    k = 10
    checks = Checks()

    with limit_threads(threads) as pools:
        print(f"corpus: {n_total:,} measures on a {n_nodes:,}-node 'log' graph ({threads} threads) ...")
        graph, indptr, words, counts, _, graph_s = synthetic_corpus(
            n_total + n_batch_queries, n_nodes=n_nodes, n_topics=20, seed=1, n_threads=threads)
        nodes = graph.assignment[words]
        workdir = tempfile.mkdtemp(prefix="bench-index-")
        path = os.path.join(workdir, "index")
        results = {"n": n_total, "nodes": graph.n_nodes, "edges": graph.n_edges, "k": k}
        try:
            index = SobolevIndex.create(path, graph, roots=None, p=1)
            insert = measure_insert(index, indptr, nodes, counts, small, n_total, batch_size)
            print(f"insert: {insert}", flush=True)
            results["insert"] = insert
            index.close()
            results["bytes_per_measure"] = dir_bytes(path) / n_total

            query_measures = [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                              for i in range(n_total, n_total + n_batch_queries)]
            started = time.perf_counter()
            reader = SobolevIndex.open(path, "r")
            reader.search(query_measures[:1], k=k, n_threads=threads)
            results["open_to_first_result_s"] = time.perf_counter() - started
            print(f"open to first result: {results['open_to_first_result_s']:.3f} s", flush=True)
            tree = reader.trees[0]

            all_measures = [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                            for i in range(n_total)]
            F = tree.features_of(all_measures, n_threads=threads)
            FQ = tree.features_of(query_measures, n_threads=threads)
            results["nnz_per_row"] = F.nnz / n_total
            rows = []
            latency = {}
            for p, metric in ((1, "manhattan"), (2, "euclidean")):
                X, Q = scaled_features(tree, F, p), scaled_features(tree, FQ, p)
                nn = NearestNeighbors(n_neighbors=k, algorithm="brute", metric=metric,
                                      n_jobs=threads).fit(X)
                nnd = None
                build_s = None
                if NNDescent is not None:
                    print(f"p={p}: building PyNNDescent (slow on sparse input) ...", flush=True)
                    started = time.perf_counter()
                    nnd = NNDescent(X, metric=metric, n_neighbors=30, random_state=0, n_jobs=threads)
                    nnd.prepare()
                    build_s = time.perf_counter() - started
                entry = measure_latency(reader, nn, nnd, query_measures, Q, p, k, n_single, blocks,
                                        threads, checks)
                if build_s is not None:
                    entry["pynndescent_build_s"] = build_s
                latency[f"p{p}"] = entry
                print(f"p={p}: ours {entry['ours_batch_ms']:.2f} ms/query batched, "
                      f"{entry['ours_single_ms']:.2f} ms single; sklearn {entry['sklearn_batch_ms']:.2f} / "
                      f"{entry['sklearn_single_ms']:.2f} ms; recall {entry['recall']:.3f}", flush=True)
                rows.append([f"p={p} batched (per query)", f"{entry['ours_batch_ms']:.2f} ms",
                             f"{entry['sklearn_batch_ms']:.2f} ms", f"{entry['speedup_batch']:.1f}x",
                             f"{entry['recall']:.3f}", f"{entry['max_relative_distance_difference']:.1e}",
                             "" if "pynndescent_batch_ms" not in entry else
                             f"{entry['pynndescent_batch_ms']:.2f} ms (recall "
                             f"{entry['pynndescent_recall']:.3f})"])
                rows.append([f"p={p} single query", f"{entry['ours_single_ms']:.2f} ms",
                             f"{entry['sklearn_single_ms']:.2f} ms", f"{entry['speedup_single']:.1f}x",
                             f"{entry['single_recall']:.3f}",
                             f"{entry['single_max_relative_distance_difference']:.1e}", ""])
            results["latency"] = latency
            reader.close()
            pruning_rows = []
            for p in (1, 2):
                entry = latency[f"p{p}"]
                rate = entry["pruning"]
                pruning_rows.append(
                    [f"p={p}"] + [f"{100 * rate[f'fraction_{name}']:.2f}%" for name in
                                  ("bounded", "refined", "rows_read", "exact", "blocks_scored")]
                    + [f"{rate[f'{phase}_ms']:.3f}" for phase in
                       ("postings", "bounds", "scoring", "exact")]
                    + [f"{100 * entry['stats_overhead']:+.1f}%"])
                within = entry["radius"]
                rate = within["pruning"]
                pruning_rows.append(
                    [f"p={p}, radius {within['radius']:.4g} ({within['results_per_query']:.1f} "
                     f"found, {within['ms_per_query']:.2f} ms/query)"]
                    + [f"{100 * rate[f'fraction_{name}']:.2f}%" for name in
                       ("bounded", "refined", "rows_read", "exact", "blocks_scored")]
                    + [f"{rate[f'{phase}_ms']:.3f}" for phase in
                       ("postings", "bounds", "scoring", "exact")] + [""])
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    print_table(
        f"sobolev-index search, N={n_total:,}, {results['nnz_per_row']:.0f} nonzeros per row, k={k}; "
        f"medians of {blocks} alternating blocks ({n_batch_queries}-query batches; "
        f"{n_single} single queries)",
        ["query", "ours", "sklearn brute", "ours faster by", "our recall", "max rel diff",
         "PyNNDescent"], rows, threads)
    print_table(
        f"what a k={k} search and a radius search read, share of the rows (search(..., "
        "stats=True); thread-ms per query in each phase; time of the batch with stats "
        "against without)",
        ["search", "bounded", "group bound", "read", "exact", "blocks read", "ms postings",
         "ms bounds", "ms scoring", "ms exact", "stats cost"], pruning_rows, threads)
    print_table("storage", ["measure", "value"], [
        ["insert at N=10k (1,000-measure batches)", f"{insert['at_10k']['measures_per_s']:,.0f} measures/s"],
        [f"insert at N={n_total:,}", f"{insert['at_max']['measures_per_s']:,.0f} measures/s"],
        ["ratio (target >= 0.8)", f"{insert['ratio']:.2f}"],
        [f"open to first result at N={n_total:,}", fmt_seconds(results["open_to_first_result_s"])],
        ["bytes on disk per measure", f"{results['bytes_per_measure']:,.0f}"],
    ], threads)
    write_json("bench_index", results, args.json, threads, checks, pools)
    checks.exit_if_failed()


if __name__ == "__main__":
    main()
