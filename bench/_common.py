"""Shared helpers for the benchmark scripts: threads, timing, correctness, tables, JSON.

Every benchmark runs our code and its peers side by side in one process and
follows the same rules, kept here so that no script can bend them:

- ``--threads N`` (default: every core) is passed to ours (``n_threads=N``)
  and to the peers (``n_jobs=N``), and :func:`limit_threads` caps every BLAS
  and OpenMP library loaded in the process at N while the benchmark runs.
- :func:`alternating_medians` times all sides the same way: alternating
  blocks, one untimed warm-up call before each side's block, medians.
- :class:`Checks` collects correctness failures (recall below 1.0, results
  that differ from a peer's by more than :data:`REL_TOL` relative); a run
  with any exits non-zero after its tables are printed.

This machine is shared and noisy: medians of alternating blocks let both
sides meet the same moments of it.
"""
import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# Largest relative difference allowed between our result and a peer's that
# computes the same quantity (the two differ only in summation order).
REL_TOL = 1e-9


# ------------------------------------------------------------------ threads
def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def add_threads_option(parser):
    """The one ``--threads`` option every benchmark has."""
    cores = os.cpu_count() or 1
    parser.add_argument(
        "--threads", type=positive_int, default=cores,
        help=f"threads for ours (n_threads) and the peers (n_jobs, BLAS, OpenMP) alike "
             f"(default: all {cores} cores)")


def threadpools():
    """The BLAS and OpenMP libraries loaded in this process, with their thread counts."""
    from threadpoolctl import threadpool_info

    return [{k: info.get(k) for k in ("user_api", "internal_api", "num_threads", "filepath")}
            for info in threadpool_info()]


@contextlib.contextmanager
def limit_threads(n_threads):
    """Cap every BLAS and OpenMP library loaded in this process at ``n_threads``.

    Only libraries already loaded are capped, so import our package and the
    peers before entering. Ours reads the OpenMP cap too (its default thread
    count is OpenMP's maximum), so code that takes no ``n_threads`` argument,
    such as ``SobolevIndex.add``, is held to N as well. Yields the libraries
    as capped, for the JSON.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=n_threads):
        yield threadpools()


# ------------------------------------------------------------------- timing
class SelfTimed(NamedTuple):
    """A result that carries its own timing (e.g. measured inside a subprocess);
    :func:`alternating_medians` uses ``seconds`` instead of its own clock."""
    seconds: float
    value: Any


@dataclass
class Timing:
    median: float
    times: list = field(default_factory=list)
    result: Any = None  # the last timed call's result


def alternating_medians(fns, blocks, per_block=1, warmups=None):
    """Time several callables the same way; returns ``{name: Timing}``.

    ``fns`` maps a name to ``fn(i)``, where ``i`` numbers the timed calls of
    that name (0 .. blocks * per_block - 1, so a caller can give each call its
    own query). Each block runs every name in turn: one untimed warm-up call
    (``warmups[name]()`` if given, else ``fn(0)``), then ``per_block`` timed
    calls. The order of the names rotates from block to block, so no side
    always runs first or always right after the other. Each name's median is
    over all its timed calls.
    """
    names = list(fns)
    warmups = warmups or {}
    times = {name: [] for name in names}
    last = {}
    for block in range(blocks):
        shift = block % len(names)
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            if name in warmups:
                warmups[name]()
            else:
                fn(0)
            for j in range(per_block):
                started = time.perf_counter()
                result = fn(block * per_block + j)
                elapsed = time.perf_counter() - started
                if isinstance(result, SelfTimed):
                    elapsed = result.seconds
                times[name].append(elapsed)
                last[name] = result
    return {name: Timing(statistics.median(times[name]), times[name], last[name]) for name in names}


# -------------------------------------------------------------- correctness
def max_relative_difference(ours, peer):
    """Largest |a - b| / max(|a|, |b|) over all entries (0 where both are 0).

    Dense arrays or SciPy sparse matrices of the same shape; for sparse ones
    an entry stored on one side only counts as a difference of 1.
    """
    import scipy.sparse as sp

    if sp.issparse(ours) or sp.issparse(peer):
        a, b = sp.csr_matrix(ours), sp.csr_matrix(peer)
        if a.shape != b.shape:
            return float("inf")
        diff = abs(a - b).tocsr()
        diff.eliminate_zeros()
        if diff.nnz == 0:
            return 0.0
        rows, cols = diff.nonzero()
        scale = abs(a).maximum(abs(b)).tocsr()
        return float(np.max(np.asarray(diff[rows, cols]).ravel()
                            / np.asarray(scale[rows, cols]).ravel()))
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(peer, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    diff = np.abs(a - b)
    scale = np.maximum(np.abs(a), np.abs(b))
    rel = np.divide(diff, scale, out=np.zeros_like(diff), where=scale > 0)
    rel[np.isnan(diff)] = np.inf
    return float(rel.max())


def recall(found, truth):
    """Mean over queries of |found & truth| / |truth|."""
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


class Checks:
    """Correctness failures of one run; :meth:`exit_if_failed` ends the run
    with status 1 if there are any."""

    def __init__(self, tolerance=REL_TOL):
        self.tolerance = tolerance
        self.checked = []
        self.failures = []

    def recall(self, what, value):
        self.checked.append(what)
        if not value >= 1.0:
            self.failures.append(f"{what}: recall {value:.4f}, expected 1.0")

    def close(self, what, relative_difference):
        self.checked.append(what)
        if not relative_difference <= self.tolerance:
            self.failures.append(f"{what}: results differ from the peer's by "
                                 f"{relative_difference:.3g} relative (allowed {self.tolerance:g})")

    def require(self, what, ok, detail=""):
        self.checked.append(what)
        if not ok:
            self.failures.append(f"{what}: {detail}" if detail else what)

    def as_json(self):
        return {"passed": not self.failures, "relative_tolerance": self.tolerance,
                "checked": list(self.checked), "failures": list(self.failures)}

    def exit_if_failed(self):
        if not self.failures:
            print(f"\ncorrectness: all {len(self.checked)} checks passed")
            return
        print(f"\nCORRECTNESS FAILED ({len(self.failures)} check(s)); the timings above do not "
              "count:", file=sys.stderr)
        for failure in self.failures:
            print(f"  - {failure}", file=sys.stderr)
        sys.exit(1)


# ------------------------------------------------------------ tables, JSON
def machine_facts():
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }


def print_table(title, header, rows, threads):
    """A plain-text table; the title always states the thread count."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title} [threads: {threads}]")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def write_json(name, payload, path, threads, checks, pools=None):
    """Write the run's results with its thread count, thread pools and checks."""
    path = Path(path) if path else RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "threads": threads, "machine": machine_facts(),
               "threadpools_while_timed": pools, "correctness": checks.as_json(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"\nwrote {path}")
    return path


def fmt_seconds(s):
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


# ------------------------------------------------------------------- corpus
# Measures per chunk of :func:`synthetic_chunks` and :func:`uniform_chunks`.
# Each chunk has its own random stream, so the chunk size is part of what
# those corpora are: change it and they change.
CHUNK_MEASURES = 100_000


def _topic_words(rng, vocabulary, dim, n_topics):
    """Word points around topic anchors and each word's topic, drawn from ``rng``."""
    anchors = rng.normal(size=(n_topics, dim)) * 3.0
    word_topic = rng.integers(0, n_topics, vocabulary)
    points = anchors[word_topic] + rng.normal(size=(vocabulary, dim))
    return points, word_topic


def _topic_pools(word_topic, n_topics, topic_words):
    """Each topic's vocabulary (its first ``topic_words`` words), concatenated:
    (words, start of each topic's pool, length of each pool)."""
    pools = [np.flatnonzero(word_topic == t)[:topic_words] for t in range(n_topics)]
    lengths = np.array([len(pool) for pool in pools], dtype=np.int64)
    starts = np.zeros(n_topics, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return np.concatenate(pools).astype(np.int64, copy=False), starts, lengths


def _topic_measures(rng, n_measures, pools, n_topics, supports):
    """(indptr, words, counts, topics) of ``n_measures`` topic measures drawn from ``rng``.

    Measure i draws its words uniformly (with repetition) from its topic's pool.
    One ``integers`` call with a per-word upper bound consumes ``rng`` exactly
    as one call per measure with that measure's bound would (NumPy draws the
    bounded integers one by one either way), so this equals the loop it
    replaced, draw for draw.
    """
    flat, starts, lengths = pools
    sizes = rng.integers(supports[0], supports[1] + 1, n_measures)
    topics = rng.integers(0, n_topics, n_measures)
    indptr = np.zeros(n_measures + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    topic_of_word = np.repeat(topics, sizes)
    # Pools of one length (the usual case: every topic has >= topic_words
    # words) need no per-word bound array.
    if len(lengths) and (lengths == lengths[0]).all():
        high = lengths[0]
    else:
        high = lengths[topic_of_word]
    chosen = flat[starts[topic_of_word] + rng.integers(0, high, indptr[-1])]
    counts = rng.geometric(0.5, indptr[-1]).astype(np.float64)
    return indptr, chosen, counts, topics


def synthetic_corpus(n_measures, n_nodes=10_000, vocabulary=50_000, dim=32, n_topics=100,
                     supports=(20, 150), topic_words=2_000, seed=0, n_threads=None, edges="log",
                     k=10):
    """A topic-clustered corpus of measures on a graph (``edges``, ``k`` as in
    ``Graph.from_points``; "log" unless told).

    Words are points around topic anchors; the graph is built over all words;
    each measure draws its words from one topic's vocabulary with random counts.
    Returns (graph, indptr, words, counts, topics, graph_seconds); measure i's
    nodes are ``graph.assignment[words[indptr[i]:indptr[i+1]]]``.
    :func:`synthetic_chunks` makes measures of the same kind chunk by chunk
    (other measures: they come from other random streams).
    """
    from sobolev_index import Graph

    rng = np.random.default_rng(seed)
    points, word_topic = _topic_words(rng, vocabulary, dim, n_topics)
    started = time.perf_counter()
    graph = Graph.from_points(points, n_nodes=n_nodes, edges=edges, k=k, seed=seed,
                              n_threads=n_threads)
    graph_seconds = time.perf_counter() - started
    pools = _topic_pools(word_topic, n_topics, topic_words)
    indptr, chosen, counts, topics = _topic_measures(rng, n_measures, pools, n_topics, supports)
    return graph, indptr, chosen, counts, topics, graph_seconds


def _chunks(n_measures, seed, stream, chunk_measures, make):
    """Yield (start, indptr, words, masses) of measures 0 .. n_measures-1 in
    chunks of ``chunk_measures``; chunk c is ``make(rng, size)`` with
    ``rng = default_rng([seed, stream, c])``, so any chunk can be made again
    on its own, and the first n measures do not depend on ``n_measures``."""
    for chunk, start in enumerate(range(0, n_measures, chunk_measures)):
        rng = np.random.default_rng([seed, stream, chunk])
        indptr, words, masses = make(rng, min(chunk_measures, n_measures - start))
        yield start, indptr, words, masses


def synthetic_chunks(n_measures, vocabulary=50_000, dim=32, n_topics=100, supports=(20, 150),
                     topic_words=2_000, seed=0, stream=0, chunk_measures=CHUNK_MEASURES):
    """The measures of a :func:`synthetic_corpus`-like corpus, chunk by chunk.

    Yields ``(start, indptr, words, counts)`` for measures start .. start +
    len(indptr) - 2, with indptr starting at 0 in each chunk; words are
    vocabulary indices into the words (and so the graph) of
    ``synthetic_corpus(..., vocabulary, dim, n_topics, topic_words, seed)``.
    Measures of the same distribution, not the same measures: chunk c has its
    own stream ``default_rng([seed, stream, c])``, so the chunks can be made
    again one at a time without holding the others; a different ``stream``
    (e.g. 1 for queries, 0 for the corpus) gives different measures.
    """
    _, word_topic = _topic_words(np.random.default_rng(seed), vocabulary, dim, n_topics)
    pools = _topic_pools(word_topic, n_topics, topic_words)

    def make(rng, size):
        return _topic_measures(rng, size, pools, n_topics, supports)[:3]

    return _chunks(n_measures, seed, stream, chunk_measures, make)


def _uniform_measures(rng, n_measures, vocabulary, short, long, long_fraction, zipf_exponent):
    """(indptr, words, masses, is_long) of ``n_measures`` measures of
    :func:`uniform_corpus`, drawn from ``rng``."""
    is_long = rng.random(n_measures) < long_fraction
    sizes = np.where(is_long, rng.integers(long[0], long[1] + 1, n_measures),
                     rng.integers(short[0], short[1] + 1, n_measures))
    indptr = np.zeros(n_measures + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    words = rng.integers(0, vocabulary, indptr[-1])
    rank = np.arange(indptr[-1], dtype=np.int64) - np.repeat(indptr[:-1], sizes) + 1
    masses = rank.astype(np.float64) ** -float(zipf_exponent)
    return indptr, words, masses, is_long


def _uniform_vocabulary(vocabulary, n_nodes):
    return vocabulary or max(20_000, 2 * n_nodes)


def uniform_corpus(n_measures, n_nodes=1_000, vocabulary=None, dim=32, short=(5, 30),
                   long=(300, 1_000), long_fraction=0.05, zipf_exponent=1.0, seed=0,
                   n_threads=None, graph=None, edges="log", k=10):
    """A corpus without topics: short and long measures of uniformly chosen words.

    Words are ``vocabulary`` points (default: twice ``n_nodes``, at least
    20,000) drawn from one standard normal in ``dim`` dimensions, so no region
    of the graph is favoured; the graph has ``n_nodes`` nodes over them
    (``edges``, ``k`` as in ``Graph.from_points``; "log" unless told).
    A share ``long_fraction`` of the measures has ``long`` supports, the rest
    ``short``; each measure's words are drawn uniformly from the whole
    vocabulary, and its j-th word (j = 1, 2, ...) gets mass proportional to
    j^-zipf_exponent, so a few words hold most of the mass, as in text.

    The words depend only on ``seed``, ``vocabulary`` and ``dim``, so a
    ``graph`` built by an earlier call with the same three can be passed in
    to skip the clustering (the costly part for tens of thousands of nodes).
    Returns (graph, indptr, words, masses, is_long, graph_seconds) with the
    layout of :func:`synthetic_corpus`; graph_seconds is 0 for a reused graph.
    :func:`uniform_chunks` makes measures of the same kind chunk by chunk.
    """
    from sobolev_index import Graph

    vocabulary = _uniform_vocabulary(vocabulary, n_nodes)
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(vocabulary, dim))
    graph_seconds = 0.0
    if graph is None:
        started = time.perf_counter()
        graph = Graph.from_points(points, n_nodes=n_nodes, edges=edges, k=k, seed=seed,
                                  n_threads=n_threads)
        graph_seconds = time.perf_counter() - started
    # The measures get their own stream, so they do not depend on whether the
    # graph was built here.
    rng = np.random.default_rng([seed, n_measures])
    indptr, words, masses, is_long = _uniform_measures(
        rng, n_measures, vocabulary, short, long, long_fraction, zipf_exponent)
    return graph, indptr, words, masses, is_long, graph_seconds


def uniform_chunks(n_measures, n_nodes=1_000, vocabulary=None, short=(5, 30), long=(300, 1_000),
                   long_fraction=0.05, zipf_exponent=1.0, seed=0, stream=0,
                   chunk_measures=CHUNK_MEASURES):
    """The measures of a :func:`uniform_corpus`-like corpus, chunk by chunk.

    Yields ``(start, indptr, words, masses)`` as :func:`synthetic_chunks`
    does, each chunk from its own stream ``default_rng([seed, stream, c])``;
    words index the vocabulary of ``uniform_corpus(..., n_nodes, vocabulary,
    seed=seed)`` (``n_nodes`` only sets the default vocabulary size).
    """
    vocabulary = _uniform_vocabulary(vocabulary, n_nodes)

    def make(rng, size):
        return _uniform_measures(rng, size, vocabulary, short, long, long_fraction,
                                 zipf_exponent)[:3]

    return _chunks(n_measures, seed, stream, chunk_measures, make)
