"""Recall against time of the approximate search (``search(...,
candidates=N, candidate_roots=R)``) on an index with ten random roots, the
default recipe's root count, against its exact search.

    python bench/approximate.py --threads 2 [--corpus topics,uniform,twitter]
        [--n 100000] [--queries 200] [--blocks 3]

Corpora:

- ``topics``: the bench topic corpus with the recipes' graph (10,000 nodes,
  5 nearest-node edges), ``--n`` documents; trees of different roots share
  most subtrees there.
- ``uniform``: words drawn uniformly, no topics, the recipes' graph over
  ``--uniform-nodes`` nodes (50,000), ``--n`` documents; trees share little.
- ``twitter``: TWITTER (``$SOBOLEV_INDEX_DATA`` or ../shared/data beside the
  repository) built with the default recipe; skipped when absent.

The queries are measures of the same kind that the index does not hold
(``--queries`` of them). Every configuration is timed the same way:
``--blocks`` alternating blocks (see ``_common.alternating_medians``), each
an untimed warm-up, then the first 50 queries one by one (median) and all
of them in one call (per query). "root 0 alone" is the exact search of the
index's first root only (``roots=[0]``), about what an index of one root
costs.

Recall@k is tie-tolerant: a result counts when its distance is at most the
exact k-th distance. The run exits non-zero when an answer marked certified
is not the exact one, or when a returned distance differs (relative 1e-9)
from ``SobolevIndex.distance`` of the same pair, which computes S_p from the
two measures' sparse difference, apart from both searches.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np
from _common import (
    Checks,
    SelfTimed,
    add_threads_option,
    alternating_medians,
    limit_threads,
    print_table,
    threadpools,
    write_json,
)

K = 10
ROOTS = 10
N_SINGLE = 50
COUNTS = (20, 50, 100, 200)
CANDIDATE_ROOTS = (1, 2, 3)
# Returned distances checked against SobolevIndex.distance, per configuration.
CHECKED_QUERIES = 10


def _corpus_list(text):
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = sorted(set(names) - {"topics", "uniform", "twitter"})
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a comma-separated list of topics, uniform, twitter")
    return names


def _int_list(text):
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers >= 1, comma-separated")
    return values


def synthetic(name, n, n_queries, threads, uniform_nodes):
    """(graph, stored measures, query measures) of a synthetic corpus."""
    from _common import synthetic_corpus, uniform_corpus

    total = n + n_queries
    if name == "topics":
        graph, indptr, words, masses, _, _ = synthetic_corpus(
            total, n_topics=20, seed=1, edges="knn", k=5, n_threads=threads)
    else:
        graph, indptr, words, masses, _, _ = uniform_corpus(
            total, n_nodes=uniform_nodes, edges="knn", k=5, n_threads=threads)
    nodes = graph.assignment[words]
    measures = [(nodes[indptr[i]:indptr[i + 1]], masses[indptr[i]:indptr[i + 1]])
                for i in range(total)]
    return graph, measures[:n], measures[n:]


def synthetic_index(path, name, n, n_queries, threads, uniform_nodes):
    from sobolev_index import SobolevIndex

    graph, stored, queries = synthetic(name, n, n_queries, threads, uniform_nodes)
    index = SobolevIndex.create(path, graph, roots=ROOTS, on_violation="perturb")
    with index:
        for start in range(0, len(stored), 20_000):
            index.add(stored[start:start + 20_000])
    return queries


def twitter_index(path, n_queries):
    """The default build of TWITTER (the documents ``bench/quality.py``
    classifies) without ``n_queries`` random ones, and those documents'
    measures; None without the data."""
    from quality import load_corpus

    from sobolev_index.errors import CorpusError, InvalidMeasureError
    from sobolev_index.ingest.documents import build_index, text_measures, text_settings

    corpus = load_corpus("TWITTER")
    if corpus is None:
        return None
    docs = corpus["documents"]
    rng = np.random.default_rng(0)
    held = set(rng.choice(len(docs), n_queries, replace=False).tolist())
    kept = [d for i, d in enumerate(docs) if i not in held]
    index, _ = build_index(path, kept, corpus["vectors"][True], skip_empty=True,
                           settings=text_settings(pattern=corpus["pattern"]))
    with index:
        if len(index.roots) != ROOTS:
            raise SystemExit(f"the default recipe built {len(index.roots)} roots; this "
                             f"benchmark compares against {ROOTS}")
        queries = []
        for i in sorted(held):
            try:
                queries += text_measures(index, [docs[i]["text"]])
            except (CorpusError, InvalidMeasureError):  # no word of it is in the index
                continue
        return queries


def tie_tolerant_recall(found, exact, k):
    """Per query, the share of the k results within the exact k-th distance."""
    out = []
    for got, want in zip(found.distances, exact.distances):
        kth = want[k - 1]
        out.append(int(np.sum(np.asarray(got[:k]) <= kth * (1 + 1e-9) + 1e-15)) / k)
    return np.array(out)


def measure(index, queries, threads, blocks, checks, label, counts=COUNTS,
            candidate_roots=CANDIDATE_ROOTS):
    """The table rows of one corpus."""
    configs = {"exact (10 roots)": {}, "root 0 alone": {"roots": [0]}}
    for roots in candidate_roots:
        for count in counts:
            configs[f"R={roots} N={count}"] = {"candidates": count, "candidate_roots": roots}

    def single(options):
        # One timed call searches N_SINGLE queries one by one; its time is
        # their median.
        def run(_):
            times = []
            for query in queries[:N_SINGLE]:
                started = time.perf_counter()
                index.search([query], k=K, n_threads=threads, **options)
                times.append(time.perf_counter() - started)
            return SelfTimed(float(np.median(times)), None)
        return run

    def batched(options):
        return lambda _: index.search(queries, k=K, n_threads=threads, **options)

    fns = {}
    for name, options in configs.items():
        fns[("single", name)] = single(options)
        fns[("batched", name)] = batched(options)
    timed = alternating_medians(fns, blocks)
    exact = index.search(queries, k=K, n_threads=threads)
    rows, out = [], {}
    exact_single = timed[("single", "exact (10 roots)")].median
    exact_batched = timed[("batched", "exact (10 roots)")].median
    for name, options in configs.items():
        result = timed[("batched", name)].result
        single_s = timed[("single", name)].median
        batched_s = timed[("batched", name)].median / len(queries)
        entry = {"single_ms": 1e3 * single_s, "batched_ms": 1e3 * batched_s,
                 "ratio_single": single_s / exact_single,
                 "ratio_batched": batched_s * len(queries) / exact_batched}
        if "candidates" in options:
            recall = tie_tolerant_recall(result, exact, K)
            certified = np.array(result.certified, dtype=bool)
            entry.update(recall=float(recall.mean()), recall_min=float(recall.min()),
                         certified=float(certified.mean()))
            bad = np.flatnonzero(certified & (recall < 1.0))
            checks.require(f"{label} {name}: certified answers are exact", len(bad) == 0,
                           f"{len(bad)} certified answers miss a nearer document")
            worst = 0.0
            for q in range(min(CHECKED_QUERIES, len(queries))):
                for key, d in zip(result.keys[q], result.distances[q]):
                    ref = index.distance(queries[q], key)
                    worst = max(worst, abs(d - ref) / max(abs(ref), 1e-300))
            checks.close(f"{label} {name}: distances against SobolevIndex.distance", worst)
            shown = [f"{entry['recall']:.3f}", f"{entry['recall_min']:.1f}",
                     f"{entry['certified']:.2f}"]
        else:
            shown = ["1", "1", "-"] if name.startswith("exact") else ["-", "-", "-"]
        rows.append([name, *shown, f"{entry['single_ms']:.2f}", f"{entry['ratio_single']:.2f}",
                     f"{entry['batched_ms']:.2f}", f"{entry['ratio_batched']:.2f}"])
        out[name] = entry
    return rows, out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=_corpus_list, default=["topics", "uniform", "twitter"])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--uniform-nodes", type=int, default=50_000)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--counts", type=_int_list, default=list(COUNTS),
                        help="Numbers of candidates, comma-separated (default: %(default)s).")
    parser.add_argument("--candidate-roots", type=_int_list, default=list(CANDIDATE_ROOTS),
                        help="Numbers of candidate roots, comma-separated (default: %(default)s).")
    parser.add_argument("--json", default=None, help="Where to write the results' JSON.")
    add_threads_option(parser)
    args = parser.parse_args(argv)
    if min(args.counts) < K:
        parser.error(f"--counts: {min(args.counts)} candidates; expected at least k ({K})")
    threads = args.threads
    checks = Checks(tolerance=1e-9)
    report = {}
    with limit_threads(threads), tempfile.TemporaryDirectory() as tmp:
        from sobolev_index import SobolevIndex

        for name in args.corpus:
            path = os.path.join(tmp, name)
            started = time.perf_counter()
            if name == "twitter":
                queries = twitter_index(path, args.queries)
                if queries is None:
                    print("twitter: no data (set SOBOLEV_INDEX_DATA); skipped", file=sys.stderr)
                    continue
            else:
                queries = synthetic_index(path, name, args.n, args.queries, threads,
                                          args.uniform_nodes)
            print(f"{name}: built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            with SobolevIndex.open(path) as index:
                rows, out = measure(index, queries, threads, args.blocks, checks, name,
                                    args.counts, args.candidate_roots)
                pools = threadpools()
            report[name] = {"documents": len(index), "queries": len(queries), "rows": out}
            print_table(f"{name}: {report[name]['documents']:,} documents, "
                        f"{len(queries)} queries, k = {K}",
                        ["search", "recall@10", "min", "certified", "single ms", "vs exact",
                         "batched ms/query", "vs exact"], rows, threads)
    write_json("approximate", {"k": K, "roots": ROOTS, "report": report}, args.json, threads,
               checks, pools=None if not report else pools)
    checks.exit_if_failed()


if __name__ == "__main__":
    main()
