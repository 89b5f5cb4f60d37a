"""Scale benchmark: build, storage, memory, open time and exact k-NN search as N grows.

For every corpus and every N (default 10^5 and 10^6; 10^7 with ``--n``):

- build: ``SobolevIndex.add`` in batches of 10,000 measures (as a user
  adds them), the insert rate (measures/s) over the first and the last 10%
  of the measures and their ratio, and the slowest batch (one that merges
  segments takes longer than the rest); the graph build (clustering) and
  ``SobolevIndex.create`` are timed separately;
- bytes on disk per measure (the index directory's size / N);
- RSS per measure held by a reader: in a fresh child process, psutil RSS
  after ``open`` and warm-up searches (p = 1 and 2) minus RSS before
  ``open``, divided by N; the builder's memory does not count;
- open time and open-to-first-result time (the first one-query search), in a
  fresh child process, once right after the build ("cold-ish": the files
  are likely still in the page cache, which this script cannot drop) and
  once more ("warm");
- for p = 1 and p = 2, k = 10: single-query latency (median and p95 over
  ``--queries`` distinct queries) and batched latency (one 200-query call,
  time per query), ours against scikit-learn ``NearestNeighbors(
  algorithm="brute")`` on the same features scaled by w^(1/p), both timed by
  ``alternating_medians`` (alternating blocks, one untimed warm-up call
  before each block). Queries come from the same distribution as the
  corpus and are not in the index.
- exactness: every timed single query and every query of the batch (at
  least 50 per corpus, N and p) must return scikit-learn's keys (recall 1.0)
  at distances within 1e-9 relative; any mismatch makes the run exit with
  status 1 after its tables.
- what the batch read (``SearchResult.stats``): the share of the rows whose
  stored values were read in full (their bounds could not rule them out)
  and of those whose distance was computed exactly. The index has no
  blocks of rows to skip, so this stands for the "fraction of blocks
  scored".

Corpora (``--corpus``): "topics" is ``_common.synthetic_corpus`` as
bench_index.py uses it (20 topics, a 10,000-node graph, 20-150 supports,
geometric counts); "uniform" is ``_common.uniform_corpus``: no topics,
uniformly chosen words, 95% short measures (5-30 supports) and 5% long ones
(300-1,000), Zipf masses, on each graph size of ``--nodes`` (default 1,000
and 50,000 nodes).

``--threads N`` (default 2) goes to our searches and builds (``n_threads``),
to scikit-learn (``n_jobs``), and caps every BLAS and OpenMP library in this
process and in the reader child processes. Progress goes to stderr; tables
to stdout; the JSON to ``--out`` (default bench/results/bench_scale.json).
Indexes are built in a temporary directory (removed at the end) unless
``--keep DIR`` is given.

Memory: the corpus and the peer's feature matrix are held in this process,
about 12 bytes per nonzero feature for the matrix plus as much again for its
scaled copy (the topic corpus has about 190 nonzeros per measure: some 4.5
GB at N = 10^6, ten times that at 10^7, which needs a machine to match).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    Checks,
    alternating_medians,
    fmt_seconds,
    limit_threads,
    max_relative_difference,
    positive_int,
    print_table,
    recall,
    synthetic_corpus,
    uniform_corpus,
    write_json,
)

K = 10
BATCH_QUERIES = 200
TOPIC_NODES = 10_000


def log(message):
    print(message, file=sys.stderr, flush=True)


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def measures_of(indptr, nodes, masses, start, stop):
    """(nodes, masses) pairs of measures start..stop-1, views into the CSR arrays."""
    return [(nodes[indptr[i]:indptr[i + 1]], masses[indptr[i]:indptr[i + 1]])
            for i in range(start, stop)]


def int_list(text):
    try:
        values = [int(float(v)) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers")
    return values


# ---------------------------------------------------------------- reader child
def reader_child(path, query_file, threads):
    """Runs in a fresh process: open the index, answer one query, warm up, report.

    Prints one JSON line: open time, open-to-first-result time and the RSS
    the reader added (after warm-up searches at p = 1 and 2).
    """
    import psutil

    from sobolev_index import SobolevIndex

    data = np.load(query_file)
    queries = measures_of(data["indptr"], data["nodes"], data["masses"], 0,
                          len(data["indptr"]) - 1)
    process = psutil.Process()
    with limit_threads(threads):
        rss_before = process.memory_info().rss
        anon_before = anon_rss()
        started = time.perf_counter()
        reader = SobolevIndex.open(path, "r")
        opened = time.perf_counter()
        reader.search(queries[:1], k=K, n_threads=threads)
        first = time.perf_counter()
        # Warm-up as a serving process would: a batch and a few single
        # queries at each p, so that every segment's in-memory postings exist.
        for p in (1, 2):
            reader.search(queries, k=K, p=p, n_threads=threads)
            for i in range(min(10, len(queries))):
                reader.search(queries[i:i + 1], k=K, p=p, n_threads=threads)
        rss_after = process.memory_info().rss
        anon_after = anon_rss()
        reader.close()
    print(json.dumps({"open_s": opened - started, "open_to_first_result_s": first - started,
                      "rss_before": rss_before, "rss_after": rss_after,
                      "anon_rss_before": anon_before, "anon_rss_after": anon_after}))


def anon_rss():
    """Bytes of anonymous resident memory (RssAnon of /proc/self/status):
    what the process itself holds, without the file pages it maps (those
    are the page cache's, shared between processes and reclaimable).
    None where /proc is missing."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def run_reader_child(path, query_file, threads):
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--reader-child", path, query_file,
         "--threads", str(threads)],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------- one corpus
def make_corpus(name, n, n_extra, nodes, threads, graphs):
    """(graph, indptr, node ids, masses, graph_seconds) of n + n_extra measures."""
    if name == "topics":
        graph, indptr, words, counts, _, graph_s = synthetic_corpus(
            n + n_extra, n_nodes=TOPIC_NODES, n_topics=20, seed=1, n_threads=threads)
        return graph, indptr, graph.assignment[words], counts, graph_s
    graph, indptr, words, masses, _, graph_s = uniform_corpus(
        n + n_extra, n_nodes=nodes, seed=2, n_threads=threads, graph=graphs.get(nodes))
    if nodes in graphs:
        # The clustering was done for a smaller N; report its time again.
        graph_s = graphs[f"{nodes}-seconds"]
    else:
        graphs[nodes], graphs[f"{nodes}-seconds"] = graph, graph_s
    return graph, indptr, graph.assignment[words], masses, graph_s


def build(path, graph, indptr, nodes, masses, n, batch_size):
    """Create the index and add n measures in batches; returns build figures."""
    from sobolev_index import SobolevIndex

    started = time.perf_counter()
    index = SobolevIndex.create(path, graph, roots=None, p=1)
    create_s = time.perf_counter() - started
    done, seconds = [], []
    for start in range(0, n, batch_size):
        stop = min(n, start + batch_size)
        chunk = measures_of(indptr, nodes, masses, start, stop)
        keys = [f"m{i}" for i in range(start, stop)]
        started = time.perf_counter()
        index.add(chunk, keys=keys)
        seconds.append(time.perf_counter() - started)
        done.append(stop)
        if len(done) % max(1, len(range(0, n, batch_size)) // 10) == 0:
            log(f"    added {stop:,} / {n:,} ({stop / sum(seconds):,.0f} measures/s so far)")
    index.close()
    # The first and last 10% of the measures, rounded to whole batches (at
    # least one batch each).
    n_batches = len(seconds)
    window = max(1, round(n_batches / 10))
    first_n = done[window - 1]
    last_n = n - done[n_batches - window - 1] if n_batches > window else n
    first_rate = first_n / sum(seconds[:window])
    last_rate = last_n / sum(seconds[-window:])
    return {"create_s": create_s, "add_s": sum(seconds), "batch_size": batch_size,
            "batch_seconds": seconds, "window_batches": window,
            "insert_first_10pct_per_s": first_rate, "insert_last_10pct_per_s": last_rate,
            "insert_ratio_last_to_first": last_rate / first_rate,
            # A batch that triggers a merge of segments takes much longer
            # than the others; the rates above can miss it.
            "slowest_batch_s": max(seconds)}


def scaled(F, lengths, p):
    """Features scaled by w^(1/p): S_p is then the plain l_p distance scikit-learn computes."""
    import scipy.sparse as sp

    S = sp.csr_matrix((F.data * lengths[F.indices] ** (1.0 / p), F.indices, F.indptr),
                      shape=F.shape)
    S.sort_indices()
    return S


def search_timings(reader, X, FQ, lengths, queries, p, n_single, blocks, threads, label, checks):
    """Single and batched latency of ours and scikit-learn at one p, with the exactness checks."""
    from sklearn.neighbors import NearestNeighbors

    metric = {1: "manhattan", 2: "euclidean"}[p]
    Q = scaled(FQ, lengths, p)
    nn = NearestNeighbors(n_neighbors=K, algorithm="brute", metric=metric, n_jobs=threads).fit(X)
    batch = queries[:BATCH_QUERIES]
    n_batch = len(batch)

    # Batched: one call per block and side, each after a 2-query warm-up.
    batched = alternating_medians(
        {"ours": lambda i: reader.search(batch, k=K, p=p, n_threads=threads),
         "sklearn": lambda i: nn.kneighbors(Q[:n_batch])},
        3, 1,
        {"ours": lambda: reader.search(batch[:2], k=K, p=p, n_threads=threads),
         "sklearn": lambda: nn.kneighbors(Q[:2])})

    # Single queries: distinct queries 0 .. n_single-1, in alternating blocks;
    # the warm-up before each block is query n_single, never timed.
    singles_ours, singles_sk = {}, {}

    def ours_single(i):
        singles_ours[i] = reader.search(queries[i:i + 1], k=K, p=p, n_threads=threads)
        return singles_ours[i]

    def sklearn_single(i):
        singles_sk[i] = nn.kneighbors(Q[i])
        return singles_sk[i]

    single = alternating_medians(
        {"ours": ours_single, "sklearn": sklearn_single}, blocks, n_single // blocks,
        {"ours": lambda: reader.search(queries[n_single:n_single + 1], k=K, p=p,
                                       n_threads=threads),
         "sklearn": lambda: nn.kneighbors(Q[n_single])})

    # Exactness: scikit-learn's neighbours are row numbers, our keys are "m<row>".
    def keys_of(idx):
        return [[f"m{j}" for j in row] for row in idx]

    sk_dist, sk_idx = batched["sklearn"].result
    ours = batched["ours"].result
    batch_recall = recall(ours.keys, keys_of(sk_idx))
    batch_rel = max_relative_difference(ours.distances, sk_dist)
    timed = sorted(singles_ours)
    single_recall = recall([singles_ours[i].keys[0] for i in timed],
                           [keys_of(singles_sk[i][1])[0] for i in timed])
    single_rel = max(max_relative_difference(singles_ours[i].distances[0], singles_sk[i][0][0])
                     for i in timed)
    mismatched = sum(set(o) != set(t) for o, t in zip(ours.keys, keys_of(sk_idx)))
    mismatched += sum(set(singles_ours[i].keys[0]) != set(keys_of(singles_sk[i][1])[0])
                      for i in timed)
    checks.recall(f"{label} p={p} batched ({n_batch} queries) vs scikit-learn", batch_recall)
    checks.close(f"{label} p={p} batched distances", batch_rel)
    checks.recall(f"{label} p={p} single queries ({len(timed)}) vs scikit-learn", single_recall)
    checks.close(f"{label} p={p} single-query distances", single_rel)

    def p95(times):
        return float(np.percentile(times, 95))

    return {
        "ours_single_median_ms": single["ours"].median * 1e3,
        "ours_single_p95_ms": p95(single["ours"].times) * 1e3,
        "sklearn_single_median_ms": single["sklearn"].median * 1e3,
        "sklearn_single_p95_ms": p95(single["sklearn"].times) * 1e3,
        "ours_batch_ms_per_query": batched["ours"].median / n_batch * 1e3,
        "sklearn_batch_ms_per_query": batched["sklearn"].median / n_batch * 1e3,
        # What the batch read (SearchResult.stats): the index has no blocks;
        # the share of rows whose values were read in full, and of exact values.
        "fraction_of_rows_read": ours.stats["rows_read"] / ours.stats["rows"],
        "fraction_of_rows_exact": ours.stats["exact"] / ours.stats["rows"],
        "queries_checked": n_batch + len(timed), "queries_mismatched": int(mismatched),
        "batch_recall": batch_recall, "single_recall": single_recall,
        "max_relative_distance_difference": max(batch_rel, single_rel),
        "batch_queries": n_batch, "batch_blocks": 3,
        "single_queries_timed": len(timed), "single_blocks": blocks,
        "batch_seconds": {name: t.times for name, t in batched.items()},
        "single_seconds": {name: t.times for name, t in single.items()},
    }


def run_one(corpus, n, nodes, args, workdir, graphs, checks):
    """Everything for one (corpus, N); returns its JSON entry."""
    from sobolev_index import SobolevIndex

    threads = args.threads
    n_single = args.queries
    n_queries = max(BATCH_QUERIES if not args.quick else 50, n_single + 1)
    label = f"{corpus}" + (f"-{nodes}" if corpus == "uniform" else "") + f" N={n:,}"
    log(f"[{label}] corpus: {n:,} measures + {n_queries} queries ...")
    graph, indptr, node_ids, masses, graph_s = make_corpus(corpus, n, n_queries, nodes, threads,
                                                           graphs)
    supports = np.diff(indptr[:n + 1])
    entry = {"corpus": corpus, "n": n, "nodes": graph.n_nodes, "edges": graph.n_edges,
             "graph_build_s": graph_s, "supports_mean": float(supports.mean()),
             "supports_max": int(supports.max())}
    path = os.path.join(workdir, label.replace(" ", "_").replace(",", "").replace("=", ""))
    try:
        log(f"[{label}] build: graph {graph.n_nodes:,} nodes ({fmt_seconds(graph_s)}); adding ...")
        entry.update(build(path, graph, indptr, node_ids, masses, n,
                           1_000 if args.quick else 10_000))
        entry["bytes_on_disk"] = dir_bytes(path)
        entry["bytes_per_measure"] = entry["bytes_on_disk"] / n
        log(f"[{label}] built in {entry['add_s']:.1f} s; {entry['bytes_per_measure']:,.0f} B/measure")

        query_file = os.path.join(workdir, "queries.npz")
        q0, q1 = indptr[n], indptr[n + n_queries]
        np.savez(query_file, indptr=indptr[n:n + n_queries + 1] - q0, nodes=node_ids[q0:q1],
                 masses=masses[q0:q1])
        runs = {}
        for state in ("cold-ish", "warm"):
            runs[state] = run_reader_child(path, query_file, threads)
            log(f"[{label}] reader ({state}): open {fmt_seconds(runs[state]['open_s'])}, first result "
                f"{fmt_seconds(runs[state]['open_to_first_result_s'])}")
        entry["reader"] = runs
        entry["rss_per_measure"] = (runs["warm"]["rss_after"] - runs["warm"]["rss_before"]) / n
        warm = runs["warm"]
        entry["anon_rss_per_measure"] = (
            None if warm["anon_rss_after"] is None
            else (warm["anon_rss_after"] - warm["anon_rss_before"]) / n)

        # The peer's features: the same tree, the same normalised measures.
        reader = SobolevIndex.open(path, "r")
        try:
            tree = reader.trees[0]
            F = tree.features(indptr[:n + 1], node_ids[:indptr[n]], masses[:indptr[n]],
                              n_threads=threads)
            FQ = tree.features(indptr[n:] - q0, node_ids[q0:], masses[q0:], n_threads=threads)
            entry["nnz_per_row"] = F.nnz / n
            queries = measures_of(indptr, node_ids, masses, n, n + n_queries)
            entry["search"] = {}
            for p in (1, 2):
                X = scaled(F, tree.length, p)
                blocks = 2 if args.quick else 5
                result = search_timings(reader, X, FQ, tree.length, queries, p,
                                        n_single - n_single % blocks, blocks, threads, label,
                                        checks)
                entry["search"][f"p{p}"] = result
                log(f"[{label}] p={p}: ours {result['ours_single_median_ms']:.2f} ms single, "
                    f"{result['ours_batch_ms_per_query']:.3f} ms/query batched; scikit-learn "
                    f"{result['sklearn_single_median_ms']:.2f} / "
                    f"{result['sklearn_batch_ms_per_query']:.3f} ms; "
                    f"{result['queries_mismatched']} of {result['queries_checked']} mismatched")
                del X
        finally:
            reader.close()
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
    return label, entry


def tables(entries, threads, blocks_note):
    build_rows, search_rows = [], []
    for label, e in entries:
        r = e["reader"]
        build_rows.append([
            label, f"{e['nnz_per_row']:.0f}", fmt_seconds(e["graph_build_s"]),
            fmt_seconds(e["add_s"]), f"{e['insert_first_10pct_per_s']:,.0f}",
            f"{e['insert_last_10pct_per_s']:,.0f}", f"{e['insert_ratio_last_to_first']:.2f}",
            fmt_seconds(e["slowest_batch_s"]),
            f"{e['bytes_per_measure']:,.0f}",
            f"{e['rss_per_measure']:,.0f} / " + (
                "n/a" if e.get("anon_rss_per_measure") is None
                else f"{e['anon_rss_per_measure']:,.0f}"),
            f"{fmt_seconds(r['cold-ish']['open_s'])} / "
            f"{fmt_seconds(r['cold-ish']['open_to_first_result_s'])}",
            f"{fmt_seconds(r['warm']['open_s'])} / {fmt_seconds(r['warm']['open_to_first_result_s'])}",
        ])
        for p in (1, 2):
            s = e["search"][f"p{p}"]
            search_rows.append([
                label, f"p={p}",
                f"{s['ours_single_median_ms']:.2f} / {s['ours_single_p95_ms']:.2f}",
                f"{s['sklearn_single_median_ms']:.2f} / {s['sklearn_single_p95_ms']:.2f}",
                f"{s['ours_batch_ms_per_query']:.3f}", f"{s['sklearn_batch_ms_per_query']:.3f}",
                f"{100 * s['fraction_of_rows_read']:.2f}% / {100 * s['fraction_of_rows_exact']:.3f}%",
                f"{s['queries_checked'] - s['queries_mismatched']} / {s['queries_checked']}",
                f"{s['max_relative_distance_difference']:.1e}",
            ])
    print_table("build, storage and open (insert rates in measures/s; open = open time / "
                "open to first result, in a fresh process)",
                ["corpus, N", "nnz/row", "graph", "add", "insert first 10%", "insert last 10%",
                 "last/first", "slowest add", "disk B/measure",
                 "reader RSS / anon B/measure", "open cold-ish",
                 "open warm"], build_rows, threads)
    print_table(f"search, k={K} (ms; single = median / p95 over distinct queries, batched = per "
                f"query in one call; {blocks_note})",
                ["corpus, N", "p", "ours single", "sklearn single", "ours batched",
                 "sklearn batched", "rows read / exact", "exact queries", "max rel diff"],
                search_rows, threads)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_list, default=None,
                        help="corpus sizes, comma-separated (default 100000,1000000; 10000000 "
                             "allowed)")
    parser.add_argument("--corpus", default="topics,uniform",
                        help="comma-separated: topics, uniform (default both)")
    parser.add_argument("--nodes", type=int_list, default=None,
                        help="graph sizes of the uniform corpus (default 1000,50000; "
                             "--quick: 1000)")
    parser.add_argument("--queries", type=positive_int, default=None,
                        help="distinct timed single queries per corpus, N and p (default 50; "
                             "--quick: 20); the batch has 200 (--quick: 50)")
    parser.add_argument("--threads", type=positive_int, default=2,
                        help="threads for ours (n_threads) and scikit-learn (n_jobs, BLAS, "
                             "OpenMP) alike (default 2)")
    parser.add_argument("--quick", action="store_true",
                        help="N = 20,000, 1,000-measure batches, few queries (a smoke run)")
    parser.add_argument("--keep", metavar="DIR", default=None,
                        help="build the indexes in DIR and keep them")
    parser.add_argument("--out", default=None,
                        help="JSON path (default bench/results/bench_scale.json)")
    parser.add_argument("--reader-child", nargs=2, metavar=("INDEX", "QUERIES"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reader_child:
        reader_child(*args.reader_child, args.threads)
        return

    corpora = [c.strip() for c in args.corpus.split(",") if c.strip()]
    unknown = set(corpora) - {"topics", "uniform"}
    if unknown or not corpora:
        parser.error(f"--corpus: unknown corpus {', '.join(sorted(unknown)) or '(none)'}; "
                     "expected topics and/or uniform")
    sizes = args.n or ([20_000] if args.quick else [100_000, 1_000_000])
    node_counts = args.nodes or ([1_000] if args.quick else [1_000, 50_000])
    args.queries = args.queries or (20 if args.quick else 50)
    threads = args.threads

    # Import every library before the thread cap: the cap only reaches
    # libraries already loaded.
    import psutil  # noqa: F401  (the child needs it; fail early if it is missing)
    from sklearn.neighbors import NearestNeighbors  # noqa: F401

    from sobolev_index import SobolevIndex  # noqa: F401

    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    workdir = args.keep or tempfile.mkdtemp(prefix="bench-scale-")
    checks = Checks()
    entries = []
    started = time.perf_counter()
    try:
        with limit_threads(threads) as pools:
            for corpus in corpora:
                graphs = {}
                for nodes in (node_counts if corpus == "uniform" else [TOPIC_NODES]):
                    for n in sizes:
                        entries.append(run_one(corpus, n, nodes, args, workdir, graphs, checks))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    blocks = 2 if args.quick else 5
    tables(entries, threads, f"medians of {blocks} alternating blocks for single queries, 3 for "
                             "batches")
    print(f"\ntotal time {time.perf_counter() - started:.0f} s")
    write_json("bench_scale", {"k": K, "runs": {label: e for label, e in entries},
                               "quick": args.quick, "total_seconds": time.perf_counter() - started},
               args.out, threads, checks, pools)
    checks.exit_if_failed()


if __name__ == "__main__":
    main()
