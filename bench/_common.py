"""Shared helpers for the benchmark scripts: timing, tables, JSON, machine facts.

Benchmarks are not tests: they run our code and its peers side by side in one
process and report medians and ratios, because this machine is shared and noisy.
"""
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def median_time(fn, repeats=5, warmup=1):
    """Median wall time of fn() over ``repeats`` runs, and the last result."""
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def machine_facts():
    facts = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    try:
        from threadpoolctl import threadpool_info

        facts["threadpools"] = [
            {k: info.get(k) for k in ("user_api", "internal_api", "num_threads", "architecture")}
            for info in threadpool_info()
        ]
    except ImportError:
        pass
    return facts


def print_table(title, header, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def write_json(name, payload, path=None):
    path = Path(path) if path else RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine_facts(), **payload}
    path.write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {path}")
    return path


def fmt_seconds(s):
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def synthetic_corpus(n_measures, n_nodes=10_000, vocabulary=50_000, dim=32, n_topics=100,
                     supports=(20, 150), topic_words=2_000, seed=0, progress=True):
    """A topic-clustered corpus of measures on a "log" graph.

    Words are points around topic anchors; the graph is built over all words;
    each measure draws its words from one topic's vocabulary with random counts.
    Returns (graph, indptr, words, counts, topics); measure i's nodes are
    ``graph.assignment[words[indptr[i]:indptr[i+1]]]``.
    """
    import numpy as np

    from sobolev_index import Graph

    rng = np.random.default_rng(seed)
    anchors = rng.normal(size=(n_topics, dim)) * 3.0
    word_topic = rng.integers(0, n_topics, vocabulary)
    words = anchors[word_topic] + rng.normal(size=(vocabulary, dim))
    started = time.perf_counter()
    graph = Graph.from_points(words, n_nodes=n_nodes, edges="log", seed=seed)
    graph_seconds = time.perf_counter() - started
    by_topic = [np.flatnonzero(word_topic == t) for t in range(n_topics)]
    by_topic = [w[: topic_words] for w in by_topic]
    sizes = rng.integers(supports[0], supports[1] + 1, n_measures)
    topics = rng.integers(0, n_topics, n_measures)
    indptr = np.zeros(n_measures + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    chosen = np.empty(indptr[-1], dtype=np.int64)
    for i in range(n_measures):
        pool = by_topic[topics[i]]
        chosen[indptr[i]:indptr[i + 1]] = pool[rng.integers(0, len(pool), sizes[i])]
    counts = rng.geometric(0.5, indptr[-1]).astype(np.float64)
    return graph, indptr, chosen, counts, topics, graph_seconds
