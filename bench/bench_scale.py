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
- the exact k-NN graph (k = 15, ``SobolevIndex.knn_graph``): timed over
  every row when N <= ``--graph-rows``; above that, its work on
  ``--graph-rows`` stored documents drawn at random (each searched for
  its 16 nearest, itself among them, in batches of the size knn_graph
  uses), and the per-row time times N is reported as an estimate
  (``graph_estimated`` in the JSON). Every sampled row must find itself
  at distance 0, or the run fails. ``--graph-rows 0`` skips it.
- peak RSS (VmHWM, else ``ru_maxrss``; see :func:`peak_rss`) of this
  process after the build and at the end of the (corpus, N), and of the
  warm reader child. It is the peak since the process started, so a later
  (corpus, N) of the same run shows at least the peak of the earlier ones;
  the index writer's memory is part of this process's.

Large mode, for N above ``--peer-limit`` (default 2,000,000): the corpus
is made and added chunk by chunk (``_common.synthetic_chunks`` and
``uniform_chunks``: 100,000 measures per chunk, each from its own random
stream, the queries from another; the graph is the one of the small mode),
so it is never held whole; scikit-learn is not timed (the tables say "n/a
(chunked check)", the JSON null), and the exactness check is a chunked
brute force: each chunk is made again, its features computed with the
index's trees and compared with ``sklearn.metrics.pairwise_distances``
("manhattan" at p = 1, "euclidean" at p = 2, on features scaled by
w^(1/p), summed over the trees with the index's weights) against the
checked queries, keeping a running top k. The batch has 50 queries (so
has the chunked check of several roots); the checks are the same as in the small mode. Its corpus
is of the same distribution as the small mode's but not the same
measures. At or below the limit everything is as described above.

Roots (``--roots``, default 1): each (corpus, N) is built once per count
in the list, 1 being the central root and R > 1 random roots (the
default build recipe's 10, for instance: ``--roots 1,10``). With several
roots S_p is a weighted sum over trees, which no single scikit-learn
metric computes, so scikit-learn is not timed and the exactness check is
the chunked brute force of the large mode, summed over the trees.

Corpora (``--corpus``): "topics" is ``_common.synthetic_corpus`` as
bench_index.py uses it (20 topics, a 10,000-node graph, 20-150 supports,
geometric counts); "uniform" is ``_common.uniform_corpus``: no topics,
uniformly chosen words, 95% short measures (5-30 supports) and 5% long ones
(300-1,000), Zipf masses, on each graph size of ``--nodes`` (default 1,000
and 50,000 nodes). Both graphs have random "log" edges unless ``--edges
knn`` gives them the build recipes' 5 nearest nodes: ``--edges knn --roots
1,10`` is the default recipe against ``--recipe fast``.

``--threads N`` (default 2) goes to our searches and builds (``n_threads``),
to scikit-learn (``n_jobs``), and caps every BLAS and OpenMP library in this
process and in the reader child processes. Progress goes to stderr; tables
to stdout; the JSON to ``--out`` (default bench/results/bench_scale.json).
Indexes are built in a temporary directory (removed at the end) unless
``--keep DIR`` is given.

Memory: in the small mode the corpus and the peer's feature matrix are held
in this process, about 12 bytes per nonzero feature for the matrix plus as
much again for its scaled copy (the topic corpus has about 190 nonzeros per
measure: some 4.5 GB at N = 10^6, ten times that at 10^7, hence the large
mode). The large mode holds one chunk of the corpus and one block of the
brute force at a time (some hundreds of MB for the topic corpus, whatever
N), besides the index's own writer and reader.
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
    CHUNK_MEASURES,
    Checks,
    alternating_medians,
    fmt_seconds,
    limit_threads,
    max_relative_difference,
    positive_int,
    print_table,
    recall,
    synthetic_chunks,
    synthetic_corpus,
    uniform_chunks,
    uniform_corpus,
    write_json,
)

K = 10
BATCH_QUERIES = 200
# The batch of the large mode and of --quick.
SMALL_BATCH_QUERIES = 50
TOPIC_NODES = 10_000
# The corpora's parameters besides the graph size, shared by the whole
# corpus (small mode) and its chunks (large mode).
TOPIC_PARAMS = {"n_topics": 20, "seed": 1}
# The corpora's graph (--edges): "log", random edges (M ln M), as in the
# runs before 2026-11-28; "knn", each node's 5 nearest nodes, the graph of
# the build recipes (bench/quality.py's topic corpus).
EDGES = {"log": {"edges": "log"}, "knn": {"edges": "knn", "k": 5}}
UNIFORM_PARAMS = {"seed": 2}
# Above this N the large mode runs (--peer-limit).
PEER_LIMIT = 2_000_000
# Entries (queries x rows) of one dense distance block of the chunked brute
# force: 16 MB of float64, whatever the chunk size.
BRUTE_BLOCK_ENTRIES = 2_000_000
METRIC = {1: "manhattan", 2: "euclidean"}
NOT_TIMED = "n/a (chunked check)"
# The k-NN graph's k (the issues' figure), and the rows its estimate times.
GRAPH_K = 15
GRAPH_ROWS = 1_000


def log(message):
    print(message, file=sys.stderr, flush=True)


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def proc_status(field):
    """Bytes of a field of /proc/self/status such as "RssAnon"; None where /proc is missing."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss():
    """This process's peak resident set size so far, in bytes: VmHWM of
    /proc/self/status, else ``ru_maxrss`` (KiB on Linux, bytes on macOS).

    VmHWM first because Linux carries ``ru_maxrss`` over an exec, and
    subprocess starts children with vfork + exec: the reader child's
    ``ru_maxrss`` would start at the builder's peak. VmHWM is the peak of
    the process's own memory since its exec.
    """
    peak = proc_status("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def fmt_bytes(b):
    if b is None:
        return "n/a"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def measures_of(indptr, nodes, masses, start, stop):
    """(nodes, masses) pairs of measures start..stop-1, views into the CSR arrays."""
    return [(nodes[indptr[i]:indptr[i + 1]], masses[indptr[i]:indptr[i + 1]])
            for i in range(start, stop)]


def fmt_long(s):
    """Seconds, or hours when they are many."""
    return f"{s / 3600:.1f} h" if s >= 3600 else fmt_seconds(s)


def row_count(text):
    """--graph-rows: a whole number of rows, 0 allowed (also written like 2e3)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 <= value < 2**62) or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of rows (0 skips the graph)")
    return int(value)


def int_list(text):
    try:
        values = [int(float(v)) for v in text.split(",") if v.strip()]
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers")
    return values


def count(text):
    """One positive integer, also written like 2e6."""
    values = int_list(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one positive integer")
    return values[0]


# ---------------------------------------------------------------- reader child
def reader_child(path, query_file, threads):
    """Runs in a fresh process: open the index, answer one query, warm up, report.

    Prints one JSON line: open time, open-to-first-result time, the RSS
    the reader added (after warm-up searches at p = 1 and 2) and the
    process's peak RSS.
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
                      "anon_rss_before": anon_before, "anon_rss_after": anon_after,
                      "peak_rss": peak_rss()}))


def anon_rss():
    """Bytes of anonymous resident memory (RssAnon of /proc/self/status):
    what the process itself holds, without the file pages it maps (those
    are the page cache's, shared between processes and reclaimable).
    None where /proc is missing."""
    return proc_status("RssAnon")


def run_reader_child(path, query_file, threads):
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--reader-child", path, query_file,
         "--threads", str(threads)],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------- one corpus
def make_corpus(name, n_measures, nodes, threads, graphs, edges="log"):
    """(graph, indptr, node ids, masses, graph_seconds) of n_measures measures
    (0 for the graph alone: it does not depend on the number of measures);
    the graph has ``edges`` (see EDGES)."""
    if name == "topics":
        graph, indptr, words, counts, _, graph_s = synthetic_corpus(
            n_measures, n_nodes=TOPIC_NODES, n_threads=threads, **EDGES[edges],
            **TOPIC_PARAMS)
        return graph, indptr, graph.assignment[words], counts, graph_s
    graph, indptr, words, masses, _, graph_s = uniform_corpus(
        n_measures, n_nodes=nodes, n_threads=threads, graph=graphs.get(nodes), **EDGES[edges],
        **UNIFORM_PARAMS)
    if nodes in graphs:
        # The clustering was done for a smaller N; report its time again.
        graph_s = graphs[f"{nodes}-seconds"]
    else:
        graphs[nodes], graphs[f"{nodes}-seconds"] = graph, graph_s
    return graph, indptr, graph.assignment[words], masses, graph_s


def corpus_chunks(name, graph, n_measures, nodes, stream):
    """Large mode: (start, indptr, node ids, masses) of the corpus (stream 0)
    or the queries (stream 1), chunk by chunk, on the graph of make_corpus."""
    if name == "topics":
        chunks = synthetic_chunks(n_measures, stream=stream, chunk_measures=CHUNK_MEASURES,
                                  **TOPIC_PARAMS)
    else:
        chunks = uniform_chunks(n_measures, n_nodes=nodes, stream=stream,
                                chunk_measures=CHUNK_MEASURES, **UNIFORM_PARAMS)
    for start, indptr, words, masses in chunks:
        nodes = graph.assignment[words]
        # Not held while the chunk is used: one chunk's words are some 70 MB.
        del words
        yield start, indptr, nodes, masses


def concatenated(chunks):
    """One CSR (indptr, node ids, masses) of all the chunks."""
    parts = list(chunks)
    offsets = np.cumsum([0] + [indptr[-1] for _, indptr, _, _ in parts])
    indptr = np.concatenate([[0]] + [indptr[1:] + offset
                                     for (_, indptr, _, _), offset in zip(parts, offsets)])
    return (indptr.astype(np.int64, copy=False), np.concatenate([part[2] for part in parts]),
            np.concatenate([part[3] for part in parts]))


def build(path, graph, chunks, n, batch_size, roots=1):
    """Create the index (the central root, or ``roots`` random roots) and add
    the n measures of ``chunks`` ((start, indptr, node ids, masses), as made)
    in batches; returns build figures."""
    from sobolev_index import SobolevIndex

    started = time.perf_counter()
    index = SobolevIndex.create(path, graph, roots=None if roots == 1 else roots, p=1)
    create_s = time.perf_counter() - started
    done, seconds = [], []
    support_sum, support_max = 0, 0
    log_every = max(1, -(-n // batch_size) // 10)
    for chunk_start, indptr, nodes, masses in chunks:
        sizes = np.diff(indptr)
        support_sum += int(sizes.sum())
        support_max = max(support_max, int(sizes.max(initial=0)))
        for start in range(0, len(indptr) - 1, batch_size):
            stop = min(len(indptr) - 1, start + batch_size)
            batch = measures_of(indptr, nodes, masses, start, stop)
            keys = [f"m{chunk_start + i}" for i in range(start, stop)]
            started = time.perf_counter()
            index.add(batch, keys=keys)
            seconds.append(time.perf_counter() - started)
            done.append(chunk_start + stop)
            if len(done) % log_every == 0:
                log(f"    added {done[-1]:,} / {n:,} ({done[-1] / sum(seconds):,.0f} measures/s "
                    f"so far)")
    index.close()
    if not done or done[-1] != n:
        raise RuntimeError(f"added {done[-1] if done else 0:,} measures, expected {n:,}")
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
            "slowest_batch_s": max(seconds),
            "supports_mean": support_sum / n, "supports_max": support_max,
            "peak_rss_after_build_bytes": peak_rss()}


def scaled(F, lengths, p):
    """Features scaled by w^(1/p): S_p is then the plain l_p distance scikit-learn computes."""
    import scipy.sparse as sp

    S = sp.csr_matrix((F.data * lengths[F.indices] ** (1.0 / p), F.indices, F.indptr),
                      shape=F.shape)
    S.sort_indices()
    return S


def search_timings(reader, queries, p, n_single, n_batch, blocks, threads, peer=None):
    """Single and batched latency of ours, and of scikit-learn if ``peer`` is
    given (a fitted ``NearestNeighbors`` and the scaled query features).

    Returns (batched, single, our single results by query, the peer's single
    results by query): ``{side: Timing}`` of ``alternating_medians`` for the
    first two, empty for the last without a peer. Without a peer the
    alternating blocks are ours alone.
    """
    batch = queries[:n_batch]
    nn, Q = peer or (None, None)

    # Batched: one call per block and side, each after a 2-query warm-up.
    fns = {"ours": lambda i: reader.search(batch, k=K, p=p, n_threads=threads)}
    warmups = {"ours": lambda: reader.search(batch[:2], k=K, p=p, n_threads=threads)}
    if peer:
        fns["sklearn"] = lambda i: nn.kneighbors(Q[:n_batch])
        warmups["sklearn"] = lambda: nn.kneighbors(Q[:2])
    batched = alternating_medians(fns, 3, 1, warmups)

    # Single queries: distinct queries 0 .. n_single-1, in alternating blocks;
    # the warm-up before each block is query n_single, never timed.
    singles_ours, singles_peer = {}, {}

    def ours_single(i):
        singles_ours[i] = reader.search(queries[i:i + 1], k=K, p=p, n_threads=threads)
        return singles_ours[i]

    def sklearn_single(i):
        singles_peer[i] = nn.kneighbors(Q[i])
        return singles_peer[i]

    fns = {"ours": ours_single}
    warmups = {"ours": lambda: reader.search(queries[n_single:n_single + 1], k=K, p=p,
                                             n_threads=threads)}
    if peer:
        fns["sklearn"] = sklearn_single
        warmups["sklearn"] = lambda: nn.kneighbors(Q[n_single])
    single = alternating_medians(fns, blocks, n_single // blocks, warmups)
    return batched, single, singles_ours, singles_peer


def exactness(label, p, truth_name, ours_batch, truth_batch, ours_singles, truth_singles, checks):
    """Compare our results with the true ones (``truth_name``'s) and record the checks.

    ``truth_batch`` is (distances, rows) of the batch, a row per query;
    ``truth_singles`` maps a single query's number to its (distances, rows).
    The truth names rows, our results keys: row j is key "m<j>".
    """
    def keys_of(rows):
        return [f"m{j}" for j in rows]

    batch_truth = [keys_of(rows) for rows in truth_batch[1]]
    batch_recall = recall(ours_batch.keys, batch_truth)
    batch_rel = max_relative_difference(ours_batch.distances, truth_batch[0])
    timed = sorted(ours_singles)
    single_truth = [keys_of(truth_singles[i][1]) for i in timed]
    single_found = [ours_singles[i].keys[0] for i in timed]
    single_recall = recall(single_found, single_truth)
    single_rel = max(max_relative_difference(ours_singles[i].distances[0], truth_singles[i][0])
                     for i in timed)
    mismatched = sum(set(o) != set(t) for o, t in zip(ours_batch.keys, batch_truth))
    mismatched += sum(set(o) != set(t) for o, t in zip(single_found, single_truth))
    checks.recall(f"{label} p={p} batched ({len(batch_truth)} queries) vs {truth_name}",
                  batch_recall)
    checks.close(f"{label} p={p} batched distances", batch_rel)
    checks.recall(f"{label} p={p} single queries ({len(timed)}) vs {truth_name}", single_recall)
    checks.close(f"{label} p={p} single-query distances", single_rel)
    return {"queries_checked": len(batch_truth) + len(timed), "queries_mismatched": int(mismatched),
            "batch_recall": batch_recall, "single_recall": single_recall,
            "max_relative_distance_difference": max(batch_rel, single_rel)}


def search_entry(batched, single, n_batch, blocks, exact):
    """The JSON of one p: timings (the peer's None when it was not timed) and exactness."""
    def p95(times):
        return float(np.percentile(times, 95))

    peer_timed = "sklearn" in single
    ours = batched["ours"].result
    return {
        "ours_single_median_ms": single["ours"].median * 1e3,
        "ours_single_p95_ms": p95(single["ours"].times) * 1e3,
        "sklearn_single_median_ms": single["sklearn"].median * 1e3 if peer_timed else None,
        "sklearn_single_p95_ms": p95(single["sklearn"].times) * 1e3 if peer_timed else None,
        "ours_batch_ms_per_query": batched["ours"].median / n_batch * 1e3,
        "sklearn_batch_ms_per_query": (batched["sklearn"].median / n_batch * 1e3 if peer_timed
                                       else None),
        # What the batch read (SearchResult.stats): the index has no blocks;
        # the share of rows whose values were read in full, and of exact values.
        "fraction_of_rows_read": ours.stats["rows_read"] / ours.stats["rows"],
        "fraction_of_rows_exact": ours.stats["exact"] / ours.stats["rows"],
        **exact,
        "batch_queries": n_batch, "batch_blocks": 3,
        "single_queries_timed": len(single["ours"].times), "single_blocks": blocks,
        "batch_seconds": {name: t.times for name, t in batched.items()},
        "single_seconds": {name: t.times for name, t in single.items()},
    }


def log_search(label, p, result):
    peer = ("not timed" if result["sklearn_single_median_ms"] is None
            else f"{result['sklearn_single_median_ms']:.2f} / "
                 f"{result['sklearn_batch_ms_per_query']:.3f} ms")
    log(f"[{label}] p={p}: ours {result['ours_single_median_ms']:.2f} ms single, "
        f"{result['ours_batch_ms_per_query']:.3f} ms/query batched; scikit-learn {peer}; "
        f"{result['queries_mismatched']} of {result['queries_checked']} mismatched")


def peer_searches(reader, corpus_csr, query_csr, n_single, n_batch, blocks, threads, label,
                  checks):
    """Small mode: ours against scikit-learn's brute force on the whole
    feature matrix, whose timed results are also the truth.
    Returns ({"p1": ..., "p2": ...}, nonzero features per row)."""
    from sklearn.neighbors import NearestNeighbors

    # The peer's features: the same tree, the same normalised measures.
    tree = reader.trees[0]
    F = tree.features(*corpus_csr, n_threads=threads)
    FQ = tree.features(*query_csr, n_threads=threads)
    queries = measures_of(*query_csr, 0, len(query_csr[0]) - 1)
    results = {}
    for p in (1, 2):
        X = scaled(F, tree.length, p)
        Q = scaled(FQ, tree.length, p)
        nn = NearestNeighbors(n_neighbors=K, algorithm="brute", metric=METRIC[p],
                              n_jobs=threads).fit(X)
        batched, single, singles_ours, singles_sk = search_timings(
            reader, queries, p, n_single, n_batch, blocks, threads, (nn, Q))
        exact = exactness(label, p, "scikit-learn", batched["ours"].result,
                          batched["sklearn"].result, singles_ours,
                          {i: (d[0], rows[0]) for i, (d, rows) in singles_sk.items()}, checks)
        results[f"p{p}"] = search_entry(batched, single, n_batch, blocks, exact)
        log_search(label, p, results[f"p{p}"])
        del X, nn
    return results, F.nnz / F.shape[0]


def brute_force(trees, eta, chunks, query_csr, ps, threads):
    """The exact k nearest rows of each query at each p in ``ps``: the sum
    over the trees of eta times scikit-learn's ``pairwise_distances`` on the
    tree's features scaled by w^(1/p), over the corpus chunk by chunk, in
    blocks of at most BRUTE_BLOCK_ENTRIES distances, keeping a running top k.

    Returns ({p: (distances, rows)}, each (queries, K) in order of distance;
    nonzero features per row, over all the trees).
    """
    from sklearn.metrics import pairwise_distances

    FQ = [tree.features(*query_csr, n_threads=threads) for tree in trees]
    Q = {p: [scaled(F, tree.length, p) for F, tree in zip(FQ, trees)] for p in ps}
    n_queries = FQ[0].shape[0]
    rows_per_block = max(1_000, BRUTE_BLOCK_ENTRIES // n_queries)
    best = {p: (np.empty((n_queries, 0)), np.empty((n_queries, 0), dtype=np.int64)) for p in ps}
    nnz = rows = 0
    for chunk_start, indptr, nodes, masses in chunks:
        for a in range(0, len(indptr) - 1, rows_per_block):
            b = min(len(indptr) - 1, a + rows_per_block)
            lo, hi = indptr[a], indptr[b]
            F = [tree.features(indptr[a:b + 1] - lo, nodes[lo:hi], masses[lo:hi],
                               n_threads=threads) for tree in trees]
            nnz, rows = nnz + sum(part.nnz for part in F), rows + b - a
            row_ids = np.arange(chunk_start + a, chunk_start + b)
            for p in ps:
                D = None
                for Qr, Fr, tree, weight in zip(Q[p], F, trees, eta):
                    part = pairwise_distances(Qr, scaled(Fr, tree.length, p), metric=METRIC[p],
                                              n_jobs=threads)
                    D = weight * part if D is None else D + weight * part
                # The k smallest of the running top k and this block.
                d = np.concatenate([best[p][0], D], axis=1)
                r = np.concatenate([best[p][1], np.broadcast_to(row_ids, D.shape)], axis=1)
                if d.shape[1] > K:
                    keep = np.argpartition(d, K - 1, axis=1)[:, :K]
                    d, r = np.take_along_axis(d, keep, 1), np.take_along_axis(r, keep, 1)
                best[p] = d, r
                del D
    order = {p: np.argsort(d, axis=1, kind="stable") for p, (d, _) in best.items()}
    return ({p: (np.take_along_axis(d, order[p], 1), np.take_along_axis(r, order[p], 1))
             for p, (d, r) in best.items()}, nnz / rows)


def chunked_searches(reader, chunks, query_csr, n_single, n_batch, blocks, threads, label,
                     checks):
    """Large mode: ours timed alone; the truth from :func:`brute_force` over
    the corpus made again chunk by chunk (``chunks()``), one pass for both p.
    Returns ({"p1": ..., "p2": ...}, nonzero features per row)."""
    queries = measures_of(*query_csr, 0, len(query_csr[0]) - 1)
    timed = {p: search_timings(reader, queries, p, n_single, n_batch, blocks, threads)
             for p in (1, 2)}
    # Only the checked queries: the batch's and the timed singles'.
    n_checked = max(n_batch, *(max(singles) + 1 for _, _, singles, _ in timed.values()))
    indptr, nodes, masses = query_csr
    log(f"[{label}] exactness: chunked brute force, {n_checked} queries ...")
    started = time.perf_counter()
    truth, nnz_per_row = brute_force(
        reader.trees, reader.eta, chunks(),
        (indptr[:n_checked + 1], nodes[:indptr[n_checked]], masses[:indptr[n_checked]]),
        (1, 2), threads)
    log(f"[{label}] brute force took {fmt_seconds(time.perf_counter() - started)}")
    results = {}
    for p, (batched, single, singles_ours, _) in timed.items():
        d, rows = truth[p]
        exact = exactness(label, p, "chunked scikit-learn brute force", batched["ours"].result,
                          (d[:n_batch], rows[:n_batch]), singles_ours,
                          {i: (d[i], rows[i]) for i in singles_ours}, checks)
        results[f"p{p}"] = search_entry(batched, single, n_batch, blocks, exact)
        log_search(label, p, results[f"p{p}"])
    return results, nnz_per_row


def graph_timing(reader, n, rows, threads, label, checks):
    """The exact k-NN graph (k = GRAPH_K): ``knn_graph`` timed over every row
    when n <= rows, else the same searches (each document for its
    GRAPH_K + 1 nearest, KNN_GRAPH_BATCH per call) of ``rows`` documents
    drawn at random, and n times their time per row as the estimate."""
    from sobolev_index.index.base import KNN_GRAPH_BATCH

    keys = reader.keys_in_order()
    reader.search(keys[:64], k=GRAPH_K + 1, n_threads=threads)  # warm-up
    if n <= rows:
        log(f"[{label}] k-NN graph, k = {GRAPH_K}, every row ...")
        started = time.perf_counter()
        graph = reader.knn_graph(GRAPH_K, n_threads=threads)
        seconds = time.perf_counter() - started
        width = min(GRAPH_K, n - 1)
        checks.require(f"{label} k-NN graph holds k entries per row",
                       graph.nnz == n * width, f"{graph.nnz} entries for {n} rows")
        return {"graph_k": GRAPH_K, "graph_rows_timed": n, "graph_estimated": False,
                "graph_seconds": seconds, "graph_ms_per_row": 1e3 * seconds / n}
    sample = np.sort(np.random.default_rng(0).choice(n, size=rows, replace=False))
    chosen = [keys[i] for i in sample]
    log(f"[{label}] k-NN graph, k = {GRAPH_K}: timing {rows:,} of {n:,} rows ...")
    del keys
    results = []
    started = time.perf_counter()
    for start in range(0, rows, KNN_GRAPH_BATCH):
        batch = chosen[start:start + KNN_GRAPH_BATCH]
        results.append((batch, reader.search(batch, k=GRAPH_K + 1, n_threads=threads)))
    seconds = time.perf_counter() - started
    missing = sum(key not in hits or float(d[list(hits).index(key)]) != 0.0
                  for batch, found in results
                  for key, hits, d in zip(batch, found.keys, found.distances))
    checks.require(f"{label} k-NN graph rows ({rows:,} sampled) find themselves at 0",
                   missing == 0, f"{missing} rows did not")
    per_row = seconds / rows
    return {"graph_k": GRAPH_K, "graph_rows_timed": rows, "graph_estimated": True,
            "graph_seconds": per_row * n, "graph_ms_per_row": 1e3 * per_row}


def run_one(corpus, n, nodes, roots, args, workdir, graphs, made, checks):
    """Everything for one (corpus, N, roots); returns its JSON entry. ``made``
    keeps the last corpus made, for the next root count of the same N."""
    from sobolev_index import SobolevIndex

    threads = args.threads
    large = n > args.peer_limit
    # Several roots: no single scikit-learn metric is their weighted sum.
    peer = not large and roots == 1
    n_single = args.queries
    # The chunked check costs a pass over every row per query and tree:
    # without the peer the batch is the small one.
    n_queries = max(SMALL_BATCH_QUERIES if args.quick or not peer else BATCH_QUERIES,
                    n_single + 1)
    n_batch = min(BATCH_QUERIES if peer else SMALL_BATCH_QUERIES, n_queries)
    blocks = 2 if args.quick else 5
    label = (f"{corpus}" + (f"-{nodes}" if corpus == "uniform" else "")
             + (f"-{args.edges}" if args.edges != "log" else "") + f" N={n:,}"
             + (f" R={roots}" if roots > 1 else ""))
    if large:
        log(f"[{label}] large mode (N > --peer-limit {args.peer_limit:,}): the corpus made chunk "
            f"by chunk, scikit-learn not timed; {n_queries} queries ...")
        graph, _, _, _, graph_s = make_corpus(corpus, 0, nodes, threads, graphs, args.edges)

        def chunks():
            return corpus_chunks(corpus, graph, n, nodes, stream=0)

        query_csr = concatenated(corpus_chunks(corpus, graph, n_queries, nodes, stream=1))
    else:
        # As many queries as any root count of this N takes, so that they
        # all search the same corpus with the first n_queries of them.
        made_queries = max(SMALL_BATCH_QUERIES if args.quick else BATCH_QUERIES, n_single + 1)
        if made.get("key") != (corpus, n, nodes, made_queries):
            made.clear()
            log(f"[{label}] corpus: {n:,} measures + {made_queries} queries ...")
            made["key"] = (corpus, n, nodes, made_queries)
            made["corpus"] = make_corpus(corpus, n + made_queries, nodes, threads, graphs,
                                         args.edges)
        graph, indptr, node_ids, masses, graph_s = made["corpus"]
        corpus_csr = (indptr[:n + 1], node_ids[:indptr[n]], masses[:indptr[n]])

        def chunks():
            return iter([(0, *corpus_csr)])

        q0, q1 = indptr[n], indptr[n + n_queries]
        query_csr = (indptr[n:n + n_queries + 1] - q0, node_ids[q0:q1], masses[q0:q1])
    entry = {"corpus": corpus, "n": n, "roots": roots,
             "edge_rule": args.edges,
             "mode": "peer" if peer else "chunked",
             "nodes": graph.n_nodes, "edges": graph.n_edges, "graph_build_s": graph_s}
    path = os.path.join(workdir, label.replace(" ", "_").replace(",", "").replace("=", ""))
    try:
        log(f"[{label}] build: graph {graph.n_nodes:,} nodes ({fmt_seconds(graph_s)}); adding ...")
        entry.update(build(path, graph, chunks(), n, 1_000 if args.quick else 10_000, roots))
        entry["bytes_on_disk"] = dir_bytes(path)
        entry["bytes_per_measure"] = entry["bytes_on_disk"] / n
        log(f"[{label}] built in {entry['add_s']:.1f} s; {entry['bytes_per_measure']:,.0f} B/measure; "
            f"peak RSS so far {fmt_bytes(entry['peak_rss_after_build_bytes'])}")

        query_file = os.path.join(workdir, "queries.npz")
        np.savez(query_file, indptr=query_csr[0], nodes=query_csr[1], masses=query_csr[2])
        runs = {}
        for state in ("cold-ish", "warm"):
            runs[state] = run_reader_child(path, query_file, threads)
            log(f"[{label}] reader ({state}): open {fmt_seconds(runs[state]['open_s'])}, first result "
                f"{fmt_seconds(runs[state]['open_to_first_result_s'])}, peak RSS "
                f"{fmt_bytes(runs[state]['peak_rss'])}")
        entry["reader"] = runs
        entry["rss_per_measure"] = (runs["warm"]["rss_after"] - runs["warm"]["rss_before"]) / n
        warm = runs["warm"]
        entry["anon_rss_per_measure"] = (
            None if warm["anon_rss_after"] is None
            else (warm["anon_rss_after"] - warm["anon_rss_before"]) / n)

        reader = SobolevIndex.open(path, "r")
        try:
            if not peer:
                entry["search"], entry["nnz_per_row"] = chunked_searches(
                    reader, chunks, query_csr, n_single - n_single % blocks, n_batch, blocks,
                    threads, label, checks)
            else:
                entry["search"], entry["nnz_per_row"] = peer_searches(
                    reader, corpus_csr, query_csr, n_single - n_single % blocks, n_batch, blocks,
                    threads, label, checks)
            if args.graph_rows:
                entry.update(graph_timing(reader, n, args.graph_rows, threads, label, checks))
                log(f"[{label}] k-NN graph: {entry['graph_ms_per_row']:.2f} ms per row, "
                    f"{'about ' if entry['graph_estimated'] else ''}"
                    f"{fmt_long(entry['graph_seconds'])} for the {n:,} rows")
        finally:
            reader.close()
        entry["peak_rss_bytes"] = peak_rss()
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
    return label, entry


def tables(entries, threads, blocks_note):
    def peer(form, *values):
        """The peer's figures, or NOT_TIMED where it was not timed (None)."""
        return NOT_TIMED if values[0] is None else form.format(*values)

    build_rows, search_rows, graph_rows = [], [], []
    for label, e in entries:
        if "graph_seconds" in e:
            graph_rows.append([
                label, f"{e['graph_rows_timed']:,}", f"{e['graph_ms_per_row']:.2f}",
                ("about " if e["graph_estimated"] else "") + fmt_long(e["graph_seconds"])])
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
            f"{fmt_bytes(e['peak_rss_after_build_bytes'])} / {fmt_bytes(e['peak_rss_bytes'])}",
            fmt_bytes(r["warm"]["peak_rss"]),
        ])
        for p in (1, 2):
            s = e["search"][f"p{p}"]
            search_rows.append([
                label, f"p={p}",
                f"{s['ours_single_median_ms']:.2f} / {s['ours_single_p95_ms']:.2f}",
                peer("{:.2f} / {:.2f}", s["sklearn_single_median_ms"], s["sklearn_single_p95_ms"]),
                f"{s['ours_batch_ms_per_query']:.3f}", peer("{:.3f}", s["sklearn_batch_ms_per_query"]),
                f"{100 * s['fraction_of_rows_read']:.2f}% / {100 * s['fraction_of_rows_exact']:.3f}%",
                f"{s['queries_checked'] - s['queries_mismatched']} / {s['queries_checked']}",
                f"{s['max_relative_distance_difference']:.1e}",
            ])
    print_table("build, storage and open (insert rates in measures/s; open = open time / "
                "open to first result, in a fresh process; peak RSS = VmHWM of this process "
                "after the build / at the end, and of the warm reader)",
                ["corpus, N", "nnz/row (all roots)", "graph", "add", "insert first 10%", "insert last 10%",
                 "last/first", "slowest add", "disk B/measure",
                 "reader RSS / anon B/measure", "open cold-ish",
                 "open warm", "peak RSS build / end", "reader peak RSS"], build_rows, threads)
    print_table(f"search, k={K} (ms; single = median / p95 over distinct queries, batched = per "
                f"query in one call; {blocks_note})",
                ["corpus, N", "p", "ours single", "sklearn single", "ours batched",
                 "sklearn batched", "rows read / exact", "exact queries", "max rel diff"],
                search_rows, threads)
    if graph_rows:
        print_table(f"exact k-NN graph, k={GRAPH_K}, p=1 (every row timed, or the rows "
                    f"timed x N: an estimate)",
                    ["corpus, N", "rows timed", "ms per row", "whole graph"], graph_rows, threads)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_list, default=None,
                        help="corpus sizes, comma-separated (default 100000,1000000; 10000000 "
                             "allowed, in the large mode: see --peer-limit)")
    parser.add_argument("--corpus", default="topics,uniform",
                        help="comma-separated: topics, uniform (default both)")
    parser.add_argument("--nodes", type=int_list, default=None,
                        help="graph sizes of the uniform corpus (default 1000,50000; "
                             "--quick: 1000)")
    parser.add_argument("--queries", type=positive_int, default=None,
                        help="distinct timed single queries per corpus, N and p (default 50; "
                             "--quick: 20); the batch has 200 (--quick, the large mode and R > 1: 50)")
    parser.add_argument("--peer-limit", type=count, default=PEER_LIMIT,
                        help=f"largest N timed against scikit-learn on the whole feature matrix "
                             f"(default {PEER_LIMIT:,}); a larger N runs in the large mode: the "
                             f"corpus made and added chunk by chunk, never held whole, "
                             f"scikit-learn not timed, exactness checked by a chunked brute "
                             f"force with scikit-learn")
    parser.add_argument("--roots", type=int_list, default=[1],
                        help="root counts, comma-separated (default 1, the central root; "
                             "R > 1: R random roots, as the default build recipe's 10); each "
                             "(corpus, N) is built once per count")
    parser.add_argument("--edges", choices=sorted(EDGES), default="log",
                        help="the corpora's graph: log (random edges; the default, as in "
                             "earlier runs) or knn (5 nearest nodes: the build recipes' graph)")
    parser.add_argument("--graph-rows", type=row_count, default=GRAPH_ROWS,
                        help=f"the exact k-NN graph (k = {GRAPH_K}): timed whole up to this N, "
                             f"estimated from this many random rows above it (default "
                             f"{GRAPH_ROWS:,}; 0 skips it)")
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
    if len(set(args.roots)) != len(args.roots):
        parser.error(f"--roots: {','.join(map(str, args.roots))} names a count twice")
    sizes = args.n or ([20_000] if args.quick else [100_000, 1_000_000])
    node_counts = args.nodes or ([1_000] if args.quick else [1_000, 50_000])
    args.queries = args.queries or (20 if args.quick else 50)
    threads = args.threads

    # Import every library before the thread cap: the cap only reaches
    # libraries already loaded.
    import psutil  # noqa: F401  (the child needs it; fail early if it is missing)
    from sklearn.metrics import pairwise_distances  # noqa: F401
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
                        made = {}
                        for roots in args.roots:
                            entries.append(run_one(corpus, n, nodes, roots, args, workdir,
                                                   graphs, made, checks))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    blocks = 2 if args.quick else 5
    tables(entries, threads, f"medians of {blocks} alternating blocks for single queries, 3 for "
                             "batches")
    print(f"\ntotal time {time.perf_counter() - started:.0f} s")
    write_json("bench_scale", {"k": K, "runs": {label: e for label, e in entries},
                               "quick": args.quick, "peer_limit": args.peer_limit,
                               "total_seconds": time.perf_counter() - started},
               args.out, threads, checks, pools)
    checks.exit_if_failed()


if __name__ == "__main__":
    main()
