"""Index benchmark: query latency, insert throughput, open time and size on disk.

On a synthetic topic-clustered corpus (20-150 supports per measure) on an
M-node "log" graph, side by side in one run:

- k=10 query latency for p=1 and p=2, per query within a batch and for single
  queries (alternating blocks of ours and scikit-learn's; medians), against scikit-learn
  brute force (n_jobs=2, sorted CSR indices) on
  the same w^(1/p)-scaled features and against PyNNDescent (with its recall);
- insert throughput of 1,000-measure batches at N=10^4 and at N=N_max;
- open-to-first-result time at N_max;
- bytes on disk per measure.

Prints a table and writes bench/results/bench_index.json. ``--quick`` runs
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
from _common import fmt_seconds, print_table, synthetic_corpus, write_json  # noqa: E402


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def batches(indptr, nodes, counts, start, stop, size):
    for s in range(start, stop, size):
        e = min(stop, s + size)
        yield s, e, [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                     for i in range(s, e)]


def scaled_features(tree, F, p):
    S = sp.csr_matrix((F.data * tree.length[F.indices] ** (1.0 / p), F.indices, F.indptr),
                      shape=F.shape)
    S.sort_indices()
    return S


def recall(found, truth):
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int, default=None, help="corpus size (default 100000)")
    parser.add_argument("--skip-pynndescent", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from sklearn.neighbors import NearestNeighbors

    from sobolev_index import SobolevIndex

    n_total = args.n or (5_000 if args.quick else 100_000)
    n_nodes = 1_000 if args.quick else 10_000
    small = min(10_000, n_total // 2)
    batch_size = 1_000
    n_batch_queries, n_single = (50, 5) if args.quick else (200, 30)
    k = 10

    print(f"corpus: {n_total:,} measures on a {n_nodes:,}-node 'log' graph ...")
    graph, indptr, words, counts, _, graph_s = synthetic_corpus(
        n_total + n_batch_queries, n_nodes=n_nodes, n_topics=20, seed=1)
    nodes = graph.assignment[words]
    workdir = tempfile.mkdtemp(prefix="bench-index-")
    path = os.path.join(workdir, "index")
    results = {"n": n_total, "nodes": graph.n_nodes, "edges": graph.n_edges, "k": k}
    try:
        index = SobolevIndex.create(path, graph, roots=None, p=1)
        insert = {}
        added = 0
        for label, target in (("at_10k", small), ("at_max", n_total)):
            # Time the batches that bring the index from target - 10 batches to target.
            window_start = max(added, target - 10 * batch_size)
            for s, e, chunk in batches(indptr, nodes, counts, added, window_start, batch_size):
                index.add(chunk)
            started = time.perf_counter()
            for s, e, chunk in batches(indptr, nodes, counts, window_start, target, batch_size):
                index.add(chunk)
            seconds = time.perf_counter() - started
            insert[label] = {"n_after": target, "measures": target - window_start,
                             "measures_per_s": (target - window_start) / seconds}
            added = target
        insert["ratio"] = insert["at_max"]["measures_per_s"] / insert["at_10k"]["measures_per_s"]
        print(f"insert: {insert}", flush=True)
        results["insert"] = insert
        index.close()
        results["bytes_per_measure"] = dir_bytes(path) / n_total

        query_measures = [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                          for i in range(n_total, n_total + n_batch_queries)]
        started = time.perf_counter()
        reader = SobolevIndex.open(path, "r")
        reader.search(query_measures[:1], k=k)
        results["open_to_first_result_s"] = time.perf_counter() - started
        print(f"open to first result: {results['open_to_first_result_s']:.3f} s", flush=True)
        tree = reader.trees[0]

        all_measures = [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                        for i in range(n_total)]
        F = tree.features_of(all_measures)
        FQ = tree.features_of(query_measures)
        results["nnz_per_row"] = F.nnz / n_total
        rows = []
        latency = {}
        for p, metric in ((1, "manhattan"), (2, "euclidean")):
            X, Q = scaled_features(tree, F, p), scaled_features(tree, FQ, p)
            nn = NearestNeighbors(n_neighbors=k, algorithm="brute", metric=metric, n_jobs=2).fit(X)
            started = time.perf_counter()
            sk_dist, sk_idx = nn.kneighbors(Q)
            sk_batch = (time.perf_counter() - started) / n_batch_queries

            reader.search(query_measures[:2], k=k, p=p)  # warm the caches for this p
            started = time.perf_counter()
            ours = reader.search(query_measures, k=k, p=p)
            our_batch = (time.perf_counter() - started) / n_batch_queries
            # Single queries, in alternating blocks: each side runs warm, as a
            # service answering one query after another would, and both meet
            # the same moments of a shared machine. Medians of each.
            sk_times, single_times = [], []
            block = max(1, n_single // 3)
            for start in range(0, n_single, block):
                nn.kneighbors(Q[n_single])  # untimed warm-up
                for i in range(start, min(n_single, start + block)):
                    started = time.perf_counter()
                    nn.kneighbors(Q[i])
                    sk_times.append(time.perf_counter() - started)
                reader.search(query_measures[n_single:n_single + 1], k=k, p=p)  # untimed warm-up
                for i in range(start, min(n_single, start + block)):
                    started = time.perf_counter()
                    reader.search(query_measures[i:i + 1], k=k, p=p)
                    single_times.append(time.perf_counter() - started)
            sk_single = float(np.median(sk_times))
            our_single = float(np.median(single_times))
            truth = [[f"doc-{j + 1}" for j in row] for row in sk_idx]
            our_recall = recall(ours.keys, truth)
            dist_rel = float(np.max(np.abs(ours.distances - sk_dist) / np.maximum(sk_dist, 1e-300)))

            entry = {"ours_batch_ms": our_batch * 1e3, "ours_single_ms": our_single * 1e3,
                     "sklearn_batch_ms": sk_batch * 1e3, "sklearn_single_ms": sk_single * 1e3,
                     "speedup_batch": sk_batch / our_batch, "speedup_single": sk_single / our_single,
                     "recall": our_recall, "max_relative_distance_difference": dist_rel}
            if not args.skip_pynndescent:
                from pynndescent import NNDescent

                print(f"p={p}: building PyNNDescent (slow on sparse input) ...", flush=True)
                started = time.perf_counter()
                nnd = NNDescent(X, metric=metric, n_neighbors=30, random_state=0, n_jobs=2)
                nnd.prepare()
                entry["pynndescent_build_s"] = time.perf_counter() - started
                started = time.perf_counter()
                nnd_idx, _ = nnd.query(Q, k=k)
                entry["pynndescent_batch_ms"] = (time.perf_counter() - started) / n_batch_queries * 1e3
                entry["pynndescent_recall"] = recall(
                    [[f"doc-{j + 1}" for j in row] for row in nnd_idx], truth)
            latency[f"p{p}"] = entry
            print(f"p={p}: ours {our_batch * 1e3:.2f} ms/query batched, {our_single * 1e3:.2f} ms single; "
                  f"sklearn {sk_batch * 1e3:.2f} / {sk_single * 1e3:.2f} ms; recall {our_recall:.3f}",
                  flush=True)
            rows.append([f"p={p} batched (per query)", f"{entry['ours_batch_ms']:.2f} ms",
                         f"{entry['sklearn_batch_ms']:.2f} ms", f"{entry['speedup_batch']:.1f}x",
                         f"{our_recall:.3f}",
                         "" if "pynndescent_batch_ms" not in entry else
                         f"{entry['pynndescent_batch_ms']:.2f} ms (recall {entry['pynndescent_recall']:.3f})"])
            rows.append([f"p={p} single query", f"{entry['ours_single_ms']:.2f} ms",
                         f"{entry['sklearn_single_ms']:.2f} ms", f"{entry['speedup_single']:.1f}x",
                         "", ""])
        results["latency"] = latency
        reader.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print_table(
        f"sobolev-index search, N={n_total:,}, {results['nnz_per_row']:.0f} nonzeros per row, k={k}",
        ["query", "ours", "sklearn brute", "ours faster by", "our recall", "PyNNDescent"], rows)
    print_table("storage", ["measure", "value"], [
        ["insert at N=10k (1,000-measure batches)", f"{insert['at_10k']['measures_per_s']:,.0f} measures/s"],
        [f"insert at N={n_total:,}", f"{insert['at_max']['measures_per_s']:,.0f} measures/s"],
        ["ratio (target >= 0.8)", f"{insert['ratio']:.2f}"],
        [f"open to first result at N={n_total:,}", fmt_seconds(results["open_to_first_result_s"])],
        ["bytes on disk per measure", f"{results['bytes_per_measure']:,.0f}"],
    ])
    write_json("bench_index", results, args.json)


if __name__ == "__main__":
    main()
