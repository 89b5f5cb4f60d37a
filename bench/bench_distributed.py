"""Sharded-index benchmark: what fanning a search out to S shards costs.

The corpus of ``bench_index.py`` (topic-clustered measures, 20-150 supports,
on an M-node "log" graph) is written to one SobolevIndex and to sharded
indexes of 1, 2 and 4 shards (``--shards``), all given the same batches of
1,000 measures. Each sharded index is searched in this process (shards on
threads) and on a Dask ``LocalCluster`` (2 worker processes of 1 thread,
``--workers``), with k=10 at p=1, side by side with the single index:

- a batch of ``--queries`` queries: milliseconds per query, and the
  throughput relative to the single index (searched with all ``--threads``;
  also timed with the threads one shard gets, 1 on Dask, which is what a
  shard alone would take). In this process the shards are searched one
  after another with every thread, on Dask the shards of each worker one
  after another on its thread, each within the k-th distances the shards
  before it found;
- single queries: the latency of one query;
- where the time of a batch goes (``search(..., stats=True)``): the
  fan-out (sending the batch to the shards, their searches, the results
  back) and the client-side merge of the shards' top k, per batch and per
  query; and the overhead of the sharded batch over the single index's.

On one machine this measures overhead, not speed-up: the shards share its
cores. The issue's targets: fan-out adds at most 2 ms per query batch over
the single index at N = 10^5, and 4 shards on 2 workers keep at least 0.8x
the throughput of one index.

Correctness: every sharded search must return exactly the single index's
keys and distances; otherwise the run exits with status 1 after the tables.
Each side is timed by ``alternating_medians`` (alternating blocks, a warm-up
call before each, medians). Prints tables and writes
bench/results/bench_distributed.json. ``--quick`` runs small sizes;
``--compact`` compacts the single index and every shard before timing
(one segment each), so that the comparison is of sharding alone, not of
the segment layouts that batches of 1,000 split S ways leave.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    Checks,
    add_threads_option,
    alternating_medians,
    limit_threads,
    print_table,
    synthetic_corpus,
    write_json,
)

K = 10
P = 1


def same(got, want):
    return got.keys == want.keys and np.array_equal(got.distances, want.distances)


def build(index, measures, batch_size):
    started = time.perf_counter()
    for start in range(0, len(measures), batch_size):
        index.add(measures[start:start + batch_size])
    return time.perf_counter() - started


def phases(index, queries, threads, repeats=5):
    """Median fan-out and merge seconds of a batch, from stats=True."""
    fan, merge = [], []
    for _ in range(repeats):
        seconds = index.search(queries, k=K, p=P, n_threads=threads, stats=True).stats["seconds"]
        fan.append(seconds["search"])
        merge.append(seconds["merge"])
    return float(np.median(fan)), float(np.median(merge))


def markdown(paths):
    """The Markdown table of docs/scale-out.md, from the JSON of runs."""
    import json

    lines = ["| run | shards | where | ms/query, batch | single index | throughput vs single "
             "| added per batch, ms | single query, ms | single index, ms "
             "| added per single query, ms | merge, µs/query |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for path in paths:
        with open(path) as handle:
            run = json.load(handle)
        name = os.path.basename(path) + (" (compacted)" if run.get("compacted") else "")
        for e in run["runs"]:
            lines.append(
                f"| {name} | {e['shards']} | {e['where']} | {e['batch_ms_per_query']:.2f} "
                f"| {e['single_index_batch_ms_per_query']:.2f} "
                f"| {e['throughput_vs_single']:.2f}x | {e['overhead_ms_per_batch']:+.0f} "
                f"| {e['single_query_ms']:.2f} | {e['single_index_single_query_ms']:.2f} "
                f"| {e['single_query_overhead_ms']:+.2f} | {e['merge_us_per_query']:.0f} |")
        if "dask_empty_task_ms" in run:
            trip = run["dask_empty_task_ms"]
            notes.append(f"{name}: a Dask task that does nothing took {trip['median']:.1f} ms "
                         f"from submit to result (median; fastest {trip['fastest']:.1f} ms).")
    return "\n".join(lines + [""] + notes)


def _nothing(x):
    return x


def dask_round_trip(client, repeats=50):
    """Median and minimum seconds from submitting a task that does nothing
    to holding its result: Dask's own floor under any fan-out."""
    for i in range(5):
        client.submit(_nothing, i, pure=False).result()
    seconds = []
    for i in range(repeats):
        started = time.perf_counter()
        client.submit(_nothing, i, pure=False).result()
        seconds.append(time.perf_counter() - started)
    return float(np.median(seconds)), float(np.min(seconds))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--n", type=int, default=None, help="corpus size (default 100000)")
    parser.add_argument("--shards", default="1,2,4", help="shard counts (default 1,2,4)")
    parser.add_argument("--workers", type=int, default=2, help="Dask worker processes")
    parser.add_argument("--queries", type=int, default=None, help="queries per batch")
    parser.add_argument("--no-dask", action="store_true", help="in-process shards only")
    parser.add_argument("--compact", action="store_true",
                        help="compact the single index and the shards before timing")
    parser.add_argument("--table", nargs="+", metavar="JSON", default=None,
                        help="print the Markdown table of these runs' JSON and exit")
    add_threads_option(parser)
    parser.add_argument("--json", default=None,
                        help="output path (default bench/results/bench_distributed.json)")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown(args.table))
        return
    threads = args.threads
    shard_counts = [int(s) for s in args.shards.split(",")]

    from sobolev_index import SobolevIndex
    from sobolev_index.distributed import ShardedIndex

    n_total = args.n or (5_000 if args.quick else 100_000)
    n_nodes = 1_000 if args.quick else 10_000
    n_queries = args.queries or (50 if args.quick else 200)
    n_single, blocks = (6, 3) if args.quick else (20, 3)
    checks = Checks()
    client = cluster = None
    if not args.no_dask:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=args.workers, processes=True, threads_per_worker=1,
                               dashboard_address=None)
        client = Client(cluster)
        median, fastest = dask_round_trip(client)
        print(f"Dask round trip of an empty task: {1e3 * median:.1f} ms median, "
              f"{1e3 * fastest:.1f} ms fastest", flush=True)

    workdir = tempfile.mkdtemp(prefix="bench-distributed-")
    results = {"n": n_total, "k": K, "p": P, "queries_per_batch": n_queries,
               "workers": args.workers, "compacted": bool(args.compact), "runs": []}
    if client is not None:
        results["dask_empty_task_ms"] = {"median": 1e3 * median, "fastest": 1e3 * fastest}
    try:
        with limit_threads(threads) as pools:
            print(f"corpus: {n_total:,} measures on a {n_nodes:,}-node 'log' graph ...", flush=True)
            graph, indptr, words, counts, _, _ = synthetic_corpus(
                n_total + n_queries + n_single, n_nodes=n_nodes, n_topics=20, seed=1,
                n_threads=threads)
            nodes = graph.assignment[words]
            measures = [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                        for i in range(n_total + n_queries + n_single)]
            corpus, queries = measures[:n_total], measures[n_total:]
            batch, singles = queries[:n_queries], queries[n_queries:]

            single = SobolevIndex.create(os.path.join(workdir, "single"), graph, p=P)
            results["single_build_s"] = build(single, corpus, 1_000)
            if args.compact:
                single.compact()
            single.close()
            single = SobolevIndex.open(os.path.join(workdir, "single"))
            want = single.search(batch, k=K, p=P, n_threads=threads)
            want_single = [single.search([q], k=K, p=P, n_threads=threads) for q in singles]

            rows, phase_rows = [], []
            for shards in shard_counts:
                path = os.path.join(workdir, f"sharded-{shards}")
                writer = ShardedIndex.create(path, graph, p=P, shards=shards)
                built = build(writer, corpus, 1_000)
                if args.compact:
                    writer.compact()
                writer.close()
                places = [("threads", None)] + ([] if client is None else [("dask", client)])
                for where, on in places:
                    sharded = ShardedIndex.open(path, client=on)
                    # Threads per shard: in this process a k-NN batch searches
                    # the shards one after another, each with every thread; on
                    # Dask, a worker's one thread.
                    per_shard = 1 if on is not None else threads
                    got = sharded.search(batch, k=K, p=P, n_threads=per_shard)
                    checks.require(f"{shards} shard(s) on {where}: the batch's results",
                                   same(got, want), "keys or distances differ from the single "
                                   "index's")
                    checks.require(
                        f"{shards} shard(s) on {where}: single queries' results",
                        all(same(sharded.search([q], k=K, p=P, n_threads=per_shard), one)
                            for q, one in zip(singles, want_single)),
                        "keys or distances differ from the single index's")
                    timed = alternating_medians({
                        "single": lambda i: single.search(batch, k=K, p=P, n_threads=threads),
                        # The single index with the threads of one shard: on
                        # Dask, what one shard alone would take.
                        "single-per-shard": lambda i, t=per_shard: single.search(
                            batch, k=K, p=P, n_threads=t),
                        "sharded": lambda i, s=sharded, t=per_shard: s.search(
                            batch, k=K, p=P, n_threads=t),
                    }, blocks)
                    one = alternating_medians({
                        "single": lambda i: single.search([singles[i % len(singles)]], k=K, p=P,
                                                          n_threads=threads),
                        "sharded": lambda i, s=sharded, t=per_shard: s.search(
                            [singles[i % len(singles)]], k=K, p=P, n_threads=t),
                    }, blocks, per_block=max(1, n_single // blocks))
                    fan, merge = phases(sharded, batch, per_shard)
                    single_batch = timed["single"].median
                    sharded_batch = timed["sharded"].median
                    entry = {
                        "shards": shards, "where": where, "build_s": built,
                        "batch_ms_per_query": 1e3 * sharded_batch / n_queries,
                        "single_index_batch_ms_per_query": 1e3 * single_batch / n_queries,
                        "throughput_vs_single": single_batch / sharded_batch,
                        "overhead_ms_per_batch": 1e3 * (sharded_batch - single_batch),
                        "single_index_threads_of_a_shard_batch_ms_per_query":
                            1e3 * timed["single-per-shard"].median / n_queries,
                        "threads_per_shard": per_shard,
                        "single_query_ms": 1e3 * one["sharded"].median,
                        "single_index_single_query_ms": 1e3 * one["single"].median,
                        "single_query_overhead_ms": 1e3 * (one["sharded"].median
                                                           - one["single"].median),
                        "fan_out_ms_per_batch": 1e3 * fan, "merge_ms_per_batch": 1e3 * merge,
                        "merge_us_per_query": 1e6 * merge / n_queries,
                    }
                    results["runs"].append(entry)
                    print(f"{shards} shard(s) on {where}: {entry['batch_ms_per_query']:.2f} "
                          f"ms/query batched ({entry['throughput_vs_single']:.2f}x the single "
                          f"index's throughput), {entry['single_query_ms']:.2f} ms single",
                          flush=True)
                    rows.append([f"{shards}", where, f"{per_shard}",
                                 f"{entry['batch_ms_per_query']:.3f}",
                                 f"{entry['single_index_batch_ms_per_query']:.3f}",
                                 f"{entry['single_index_threads_of_a_shard_batch_ms_per_query']:.3f}",
                                 f"{entry['throughput_vs_single']:.2f}x",
                                 f"{entry['overhead_ms_per_batch']:+.1f}",
                                 f"{entry['single_query_ms']:.2f}",
                                 f"{entry['single_index_single_query_ms']:.2f}",
                                 f"{entry['single_query_overhead_ms']:+.2f}"])
                    phase_rows.append([f"{shards}", where, f"{entry['fan_out_ms_per_batch']:.1f}",
                                       f"{entry['merge_ms_per_batch']:.2f}",
                                       f"{entry['merge_us_per_query']:.1f}"])
                    sharded.close()
            single.close()
            print_table(
                f"k={K}, p={P}, N={n_total:,}, batches of {n_queries} queries "
                f"(Dask: {args.workers} worker processes x 1 thread)"
                f"{', compacted' if args.compact else ''}",
                ["shards", "where", "threads/shard", "ms/query (batch)", "single index",
                 "single index, threads of a shard", "throughput",
                 "overhead ms/batch", "ms single query", "single index", "overhead ms, 1 query"],
                rows, threads)
            print_table("where a sharded batch's time goes (stats=True)",
                        ["shards", "where", "fan-out ms/batch", "merge ms/batch",
                         "merge us/query"], phase_rows, threads)
            write_json("bench_distributed", results, args.json, threads, checks, pools)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if client is not None:
            client.close()
            cluster.close()
    checks.exit_if_failed()


if __name__ == "__main__":
    main()
