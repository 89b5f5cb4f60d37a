"""How well S_p classifies text against Word Mover's Distance, and which
build settings move it; writes docs/quality.md.

One command regenerates the page, its figure and its JSON::

    pip install ".[paper]"
    python bench/quality.py

Corpora:

- TWITTER (``$SOBOLEV_INDEX_DATA`` or ../shared/data beside the repository:
  twitter/all_twitter_by_line.txt and its MiniLM word vectors), 3 classes;
  tokens by the "ascii" pattern, which the vectors were made for. Left out
  with a note when the files are absent.
- stdlib: the docstrings of the 10 largest packages of this Python's
  standard library (``sobolev_index.ingest.stdlib_corpus``, labelled by
  package; the same text ``sobolev-index quickstart`` writes), with word
  vectors learned from all the standard library's docstrings by PPMI and
  SVD as the quickstart does. Any Python installation makes it, but it
  differs between Python versions; the page records the version.

Every corpus keeps the documents with at least ``MIN_WORDS`` tokens that are
not English stop words and have a vector, so every method sees the same
documents. Word Mover's Distance is exact (POT) on the word vectors with
normalised counts and stop words removed, the usual setting.

Protocol: ``--splits`` (default 20) stratified random 70/30 splits; k-NN
with k in 1..19 chosen by 3-fold cross-validation inside each training part
(bench/paper/protocol.py). Each row reports the mean test error and its
standard deviation over the splits, and its difference from WMD on the same
splits as mean +- the standard error of the mean of the paired differences:
"about the same as WMD" means within that standard error.

Rows, one factor at a time from the recipe (every word its own node, each
node joined to its 5 nearest nodes, tf-idf, English stop words removed,
S_1 sliced over 10 random roots): the graph's edges, its number of nodes,
the roots, the weighting and stop words, p; graph OT on the recipe's graph
(which separates what the tree costs from what the graph costs); the
previous defaults (M = 1000 random "log" edges, one root, counts, stop
words kept); and the defaults themselves, through ``build_index`` and
``SobolevIndex.pairwise`` exactly as a user gets them.

Learned vectors: the same build defaults on word vectors learned from the
evaluated documents themselves by
``sobolev_index.ingest.learn.learn_vectors`` with its defaults (PPMI and
SVD, dim 100, window 5, min_count 2, the corpus's token pattern), which is
what ``sobolev-index build --vectors learn`` does, instead of the given
vectors; and once more with min_count 1. A word seen fewer than min_count
times has no vector, nor has one whose learned vector comes out zero (no
context in the kept dimensions), so a document may have no word the index
knows: those indexes are built with ``skip_empty`` and a missing document
is at infinite distance from every document (``_evaluate``): it is never a
neighbour, and as a test document it counts as an error, as it would be
for a user, so the rows are on the same documents and splits as every
other.

Cost of the roots (``--skip-cost`` leaves it out; ``--cost-only`` measures
it again and keeps the rest of the stored report): single-query and
batched latency (``COST_QUERIES`` queries, k = 10, the two indexes timed
in ``COST_ROUNDS`` alternating rounds, see root_cost) on the synthetic
topic corpus of bench/ at N = ``COST_N`` with the recipe's graph recipe
and 1 or 10 roots, their ratios, bytes on disk per document and build
time.

``--threads`` caps our loops, BLAS and the WMD / OT worker processes;
``--processes`` runs the k-NN evaluations in parallel. Writes
docs/quality.md, docs/figures/quality.png and bench/results/quality.json.
"""
import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from collections import Counter

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
from _common import add_threads_option, limit_threads  # noqa: E402
from reproduce_paper import word_measures_on  # noqa: E402

DATA = os.environ.get("SOBOLEV_INDEX_DATA") or os.path.join(os.path.dirname(ROOT), "shared", "data")
MIN_WORDS = {"TWITTER": 1, "stdlib": 5}
STDLIB_LABELS = 10
ROOTS = 10
COST_N = 100_000
COST_QUERIES = 50
COST_ROUNDS = 5


# ------------------------------------------------------------------ corpora
def _documents_twitter():
    from sobolev_index.ingest.documents import read_corpus
    from sobolev_index.ingest.embeddings import load_vectors

    path = os.path.join(DATA, "twitter", "all_twitter_by_line.txt")
    vectors = os.path.join(DATA, "twitter", "twitter-minilm-384.bin")
    if not (os.path.exists(path) and os.path.exists(vectors)):
        return None
    docs = list(read_corpus(path))
    return docs, load_vectors(vectors), "ascii"


def _documents_stdlib():
    from sobolev_index.ingest.stdlib_corpus import ppmi_svd_vectors, stdlib_documents
    from sobolev_index.ingest.text import tokenize

    docs = stdlib_documents()
    vectors = ppmi_svd_vectors([tokenize(d["text"]) for d in docs], seed=0)
    sizes = Counter(d["label"] for d in docs if d["label"] != "topic")
    keep = {label for label, _ in sizes.most_common(STDLIB_LABELS)}
    return [d for d in docs if d["label"] in keep], vectors, "unicode"


def load_corpus(name):
    """(documents, WordVectors of their words, token pattern, word-id measures
    per setting) or None; documents are those with >= MIN_WORDS usable tokens."""
    from sobolev_index.ingest.text import ENGLISH_STOPWORDS, tokenize

    found = _documents_twitter() if name == "TWITTER" else _documents_stdlib()
    if found is None:
        return None
    docs, vectors, pattern = found
    tokens = {stop: [tokenize(d["text"], pattern, stopwords=ENGLISH_STOPWORDS if stop else None)
                     for d in docs] for stop in (True, False)}
    known = set(vectors.words)
    kept = [i for i, t in enumerate(tokens[True])
            if sum(w in known for w in t) >= MIN_WORDS[name]]
    docs = [docs[i] for i in kept]
    words, measures = {}, {}
    for stop in (True, False):
        # The graph of a setting is made from the words it uses, as a build does.
        vocabulary = sorted({w for i in kept for w in tokens[stop][i] if w in known})
        words[stop] = vectors.subset(vocabulary)
        assert words[stop].words == vocabulary
        column = {w: j for j, w in enumerate(vocabulary)}
        rows = [[column[w] for w in tokens[stop][i] if w in column] for i in kept]
        df = Counter(w for r in rows for w in set(r))
        for weighting in ("count", "tfidf"):
            out = []
            for r in rows:
                ids, counts = np.unique(r, return_counts=True)
                weights = counts.astype(np.float64)
                if weighting == "tfidf":
                    # The smoothed idf the index uses: ln((1 + n) / (1 + df)) + 1.
                    weights *= np.log((1 + len(rows)) / (1 + np.array([df[j] for j in ids]))) + 1
                out.append((ids, weights))
            measures[(stop, weighting)] = out
    return {"documents": docs, "labels": np.array([str(d["label"]) for d in docs]),
            "vectors": words, "pattern": pattern, "measures": measures}


# ---------------------------------------------------------------- distances
def graph_of(vectors, edges, nodes, k=5, seed=0):
    from sobolev_index import Graph

    return Graph.from_points(vectors.vectors, n_nodes=nodes, edges=edges, k=k, seed=seed)


def sobolev_matrix(graph, measures, p, roots, threads, seed=0):
    """(S_p matrix sliced over ``roots`` roots, seconds incl. trees and
    features): one root is the most central node, more are random."""
    from sobolev_index.distances import sliced_pairwise

    started = time.perf_counter()
    strategy = "center" if roots == 1 else "random"
    chosen, eta = graph.roots(roots, strategy=strategy, seed=seed, on_violation="perturb")
    trees = graph.trees(chosen, on_violation="perturb", seed=seed)
    F = [tree.features_of(word_measures_on(graph, measures), n_threads=threads) for tree in trees]
    D = sliced_pairwise(F, None, trees, p, eta, n_threads=threads)
    return D, time.perf_counter() - started


def default_build_matrix(corpus, threads):
    """The distance matrix of ``build_index`` with its defaults (the token
    pattern aside), through ``SobolevIndex.pairwise``."""
    from sobolev_index.ingest.documents import build_index, text_settings

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        index, report = build_index(os.path.join(tmp, "ix"), corpus["documents"],
                                    corpus["vectors"][True],
                                    settings=text_settings(pattern=corpus["pattern"]))
        with index:
            keys = [d["key"] for d in corpus["documents"]]
            D = index.pairwise(keys, n_threads=threads)
    return D, time.perf_counter() - started, report["recipe"]


def _learned_pairwise(corpus, vectors, threads):
    """(n x n matrix, np.inf for the documents the index skipped, build report)."""
    import warnings

    from sobolev_index.errors import SkippedDocumentsWarning
    from sobolev_index.ingest.documents import build_index, text_settings

    keys = [d["key"] for d in corpus["documents"]]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedDocumentsWarning)  # counted below
        index, report = build_index(os.path.join(tmp, "ix"), corpus["documents"], vectors,
                                    settings=text_settings(pattern=corpus["pattern"]),
                                    skip_empty=True)
        skipped = set(report["skipped"])
        present = np.array([k not in skipped for k in keys])
        with index:
            D = index.pairwise([k for k, kept in zip(keys, present) if kept], n_threads=threads)
    full = np.full((len(keys), len(keys)), np.inf)
    full[np.ix_(present, present)] = D
    return full, report


def learned_build_matrix(corpus, threads, **options):
    """The build defaults on vectors ``learn_vectors`` learns from the
    corpus's documents (``options`` change its defaults): (n x n distance
    matrix with np.inf rows and columns for documents left out, seconds
    for learning and building, facts for the page)."""
    from sobolev_index.ingest.documents import text_settings
    from sobolev_index.ingest.learn import learn_vectors
    from sobolev_index.ingest.text import tokenize

    started = time.perf_counter()
    vectors, learned = learn_vectors(corpus["documents"], pattern=corpus["pattern"], seed=0,
                                     **options)
    D, report = _learned_pairwise(corpus, vectors, threads)
    seconds = time.perf_counter() - started
    missing = ~np.isfinite(np.diag(D))
    # Words seen often enough that got no vector: theirs came out zero.
    counts = Counter(w for d in corpus["documents"] for w in tokenize(d["text"], corpus["pattern"]))
    zero = {w for w, c in counts.items() if c >= learned["min_count"] and w not in vectors}
    assert len(zero) == learned["zero_vectors"], (len(zero), learned["zero_vectors"])
    settings = text_settings(pattern=corpus["pattern"])
    by_zero = sum(1 for d, m in zip(corpus["documents"], missing)
                  if m and zero.intersection(settings.tokens(d["text"])))
    learned.update(zero_words=sorted(zero, key=lambda w: (-counts[w], w)),
                   missing=int(missing.sum()), missing_by_zero=by_zero,
                   build_vocabulary=report["vocabulary"], build_words=report["words_with_vectors"],
                   token_coverage=report["token_coverage"],
                   build_seconds=seconds - learned["seconds"])
    return D, seconds, learned


# Rows on learned vectors: (row name, learn_vectors options).
LEARNED_ROWS = (("build defaults, vectors learned from the corpus", {}),
                ("vectors learned from the corpus, min_count 1", {"min_count": 1}))


def rows_of(corpus, threads, skip_ot):
    """{row name: (factor, distance matrix, seconds)}, the build defaults'
    recipe, and {learned row name: facts}."""
    from paper import baselines

    vectors = corpus["vectors"]
    n_words = len(vectors[True])
    recipe = corpus["measures"][(True, "tfidf")]
    out = {}
    graphs = {}

    def graph(edges, nodes, k=5, stop=True):
        """The graph over the words of the stop-word setting ``stop``, and
        the seconds it took to make."""
        key = (edges, nodes, k, stop)
        if key not in graphs:
            started = time.perf_counter()
            made = graph_of(vectors[stop], edges, nodes, k)
            graphs[key] = made, time.perf_counter() - started
        return graphs[key]

    def add(factor, name, g, measures, p=1, roots=ROOTS):
        g, graph_seconds = g
        D, seconds = sobolev_matrix(g, measures, p, roots, threads)
        out[name] = (factor, D, graph_seconds + seconds)

    started = time.perf_counter()
    result = baselines.wmd_distances(corpus["measures"][(True, "count")],
                                     vectors[True].vectors.astype(np.float64), n_jobs=threads)
    out["WMD"] = ("baseline", result["distances"], time.perf_counter() - started)
    knn5 = graph("knn", n_words)
    add("recipe", "recipe: knn 5, every word, tf-idf, 10 roots", knn5, recipe)
    for edges, k in (("knn", 10), ("log", 5), ("sqrt", 5)):
        label = f"knn {k}" if edges == "knn" else f"random {edges}"
        add("edges", f"edges: {label}", graph(edges, n_words, k), recipe)
    for nodes in (1000, 2000):
        if nodes < n_words:
            add("nodes", f"nodes: {nodes:,} clusters", graph("knn", nodes), recipe)
    add("roots", "roots: 1 (central)", knn5, recipe, roots=1)
    add("roots", "roots: 5", knn5, recipe, roots=5)
    add("roots", "roots: 20", knn5, recipe, roots=20)
    for stop, weighting in ((True, "count"), (False, "tfidf"), (False, "count")):
        label = f"{weighting}, stop words {'removed' if stop else 'kept'}"
        add("weights", f"weights: {label}", graph("knn", len(vectors[stop]), stop=stop),
            corpus["measures"][(stop, weighting)])
    add("p", "p = 2", knn5, recipe, p=2)
    add("previous defaults", "previous defaults: log, 1,000 nodes, 1 root, counts, stop words kept",
        graph("log", 1000, stop=False), corpus["measures"][(False, "count")], roots=1)
    D, seconds, chosen = default_build_matrix(corpus, threads)
    out["build defaults (quality recipe)"] = ("defaults", D, seconds)
    learned = {}
    for name, options in LEARNED_ROWS:
        D, seconds, learned[name] = learned_build_matrix(corpus, threads, **options)
        out[name] = ("learned", D, seconds)
    if not skip_ot:
        result = baselines.graph_ot_distances(knn5[0], word_measures_on(knn5[0], recipe),
                                              n_jobs=threads)
        out["graph OT on the recipe's graph"] = (
            "reference", result["distances"],
            knn5[1] + result["seconds"] + result["preprocessing_seconds"])
    return out, chosen, learned


# -------------------------------------------------------------------- Orbit
def orbit_rows(threads, per_class):
    """Orbit diagrams (bench/paper/orbit.py: H1 of linked twist map orbits,
    5 classes) as measures on graphs of all their points: {row: (factor,
    matrix, seconds)}, labels, and the number of diagrams."""
    from paper import baselines, orbit

    from sobolev_index.ingest.pointindex import build_point_index
    from sobolev_index.ingest.pointsets import PointSet

    data = orbit.orbit_diagrams(n_per_class=per_class, n_points=1000, seed=0,
                                cache_dir=os.path.join(tempfile.gettempdir(), "sobolev-index-orbit"),
                                n_jobs=threads)
    diagrams, labels = data["diagrams"], np.asarray(data["labels"])
    points = np.vstack(diagrams)
    weights = {"uniform": np.ones(len(points)), "persistence": points[:, 1] - points[:, 0]}

    def measures(weighting):
        """Each diagram as (point ids, weights): ``sobolev_matrix`` and
        ``word_measures_on`` put the points on a graph's nodes."""
        return [(ids, weights[weighting][ids])
                for ids in np.split(np.arange(len(points)), np.cumsum([len(d) for d in diagrams])[:-1])]

    from sobolev_index import Graph

    def timed_graph(edges):
        started = time.perf_counter()
        return Graph.from_points(points, n_nodes=1000, edges=edges, k=5, seed=0), \
            time.perf_counter() - started

    (knn, knn_seconds), (sqrt, sqrt_seconds) = timed_graph("knn"), timed_graph("sqrt")
    graph_seconds = {id(knn): knn_seconds, id(sqrt): sqrt_seconds}
    out = {}
    for factor, name, graph, weighting, roots in (
            ("recipe", "S_1: knn 5, 1,000 nodes, persistence, 10 roots", knn, "persistence", ROOTS),
            ("roots", "S_1: knn 5, 1,000 nodes, persistence, 1 root", knn, "persistence", 1),
            ("weights", "S_1: knn 5, 1,000 nodes, uniform, 10 roots", knn, "uniform", ROOTS),
            ("edges", "S_1: sqrt, 1,000 nodes, persistence, 10 roots", sqrt, "persistence", ROOTS),
            ("previous defaults", "S_1: sqrt, 1,000 nodes, uniform, 1 root (the paper's graph)",
             sqrt, "uniform", 1)):
        D, seconds = sobolev_matrix(graph, measures(weighting), 1, roots, threads)
        out[name] = (factor, D, graph_seconds[id(graph)] + seconds)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        # Weighted by persistence, as `build --points DIR --diagrams` reads them.
        sets = [PointSet(f"orbit-{i}", d, weights=d[:, 1] - d[:, 0])
                for i, d in enumerate(diagrams)]
        index, report = build_point_index(os.path.join(tmp, "ix"), sets, kind="diagrams")
        with index:
            D = index.pairwise([s.key for s in sets], n_threads=threads)
    out[f"build defaults ({report['recipe']['nodes']:,} nodes)"] = (
        "defaults", D, time.perf_counter() - started)
    for name, graph, weighting in (("graph OT: knn 5, 1,000 nodes, persistence", knn, "persistence"),
                                   ("graph OT: sqrt, 1,000 nodes, uniform", sqrt, "uniform")):
        result = baselines.graph_ot_distances(graph, word_measures_on(graph, measures(weighting)),
                                              n_jobs=threads)
        out[name] = ("baseline" if "knn" in name else "reference", result["distances"],
                     graph_seconds[id(graph)] + result["seconds"] + result["preprocessing_seconds"])
    return out, labels, len(points)


def _evaluate_orbit(job):
    name, D, labels, split_list, regularize = job
    from paper.protocol import knn_accuracy, svm_accuracy
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        svm = svm_accuracy(D, labels, split_list, regularize=regularize)["accuracies"]
        knn = knn_accuracy(D, labels, split_list)["accuracies"]
    return name, svm, knn


def evaluate_orbit(rows, labels, split_list, processes):
    """SVM accuracy and k-NN error per row; differences against the
    baseline row (graph OT on the recipe's graph), paired over the splits."""
    jobs = [(name, D, labels, split_list, name.startswith("graph OT"))
            for name, (_, D, _) in rows.items()]
    with multiprocessing.get_context("fork").Pool(max(1, processes)) as pool:
        results = pool.map(_evaluate_orbit, jobs)
    svm = {name: 100.0 * np.asarray(a) for name, a, _ in results}
    knn = {name: 100.0 * (1.0 - np.asarray(a)) for name, _, a in results}
    base = next(name for name, (factor, _, _) in rows.items() if factor == "baseline")
    table = {}
    for name, (factor, _, seconds) in rows.items():
        diff = svm[name] - svm[base]
        table[name] = {
            "factor": factor, "svm_mean": float(svm[name].mean()), "svm_std": float(svm[name].std()),
            "knn_error_mean": float(knn[name].mean()), "knn_error_std": float(knn[name].std()),
            "diff_mean": float(diff.mean()),
            "diff_sem": float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0,
            "seconds": float(seconds), "svm": [float(x) for x in svm[name]],
            "knn_errors": [float(x) for x in knn[name]],
        }
    return table


# ------------------------------------------------------------------ evaluate
def _evaluate(job):
    """k-NN test accuracy per split. A document at infinite distance from
    all (np.inf on the diagonal: not in the index) is never a neighbour and,
    as a test document, counts as an error: k is chosen and the others are
    classified on the rest, and the accuracy is over the whole test part."""
    name, D, labels, split_list = job
    from paper.protocol import knn_accuracy
    from threadpoolctl import threadpool_limits

    present = np.isfinite(np.diag(D))
    with threadpool_limits(1):
        if present.all():
            return name, knn_accuracy(D, labels, split_list)["accuracies"]
        position = np.cumsum(present) - 1
        kept = [(position[train[present[train]]], position[test[present[test]]])
                for train, test in split_list]
        accuracies = knn_accuracy(D[np.ix_(present, present)], np.asarray(labels)[present],
                                  kept)["accuracies"]
    return name, [a * len(t) / len(test) for a, (_, t), (_, test) in
                  zip(accuracies, kept, split_list)]


def evaluate(rows, labels, split_list, processes):
    jobs = [(name, D, labels, split_list) for name, (_, D, _) in rows.items()]
    if processes > 1:
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            results = pool.map(_evaluate, jobs)
    else:
        results = [_evaluate(job) for job in jobs]
    errors = {name: 100.0 * (1.0 - np.asarray(acc)) for name, acc in results}
    wmd = errors["WMD"]
    table = {}
    for name, (factor, D, seconds) in rows.items():
        e = errors[name]
        diff = e - wmd
        table[name] = {
            "factor": factor, "error_mean": float(e.mean()), "error_std": float(e.std()),
            "diff_mean": float(diff.mean()),
            "diff_sem": float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0,
            "seconds": float(seconds), "errors": [float(x) for x in e],
        }
        missing = ~np.isfinite(np.diag(D))
        if missing.any():
            # Points of the error that are missing test documents, per split.
            table[name]["missing_error_mean"] = float(np.mean(
                [100.0 * missing[test].sum() / len(test) for _, test in split_list]))
    return table


# ---------------------------------------------------------------------- cost
def topic_measures(n, threads):
    """The synthetic topic corpus of bench/ with the recipe's graph recipe
    (10,000 nodes, 5 nearest-node edges): (graph, n measures on its nodes)."""
    from _common import synthetic_corpus

    graph, indptr, words, counts, _, _ = synthetic_corpus(
        n, n_topics=20, seed=1, edges="knn", k=5, n_threads=threads)
    nodes = graph.assignment[words]
    return graph, [(nodes[indptr[i]:indptr[i + 1]], counts[indptr[i]:indptr[i + 1]])
                   for i in range(n)]


def time_rounds(readers, queries, threads, rounds, n_single=None):
    """Open indexes ``readers`` ({roots: reader}) timed against one another:
    ``rounds`` rounds, each reader in turn, each block an untimed warm-up
    search, then the first ``n_single`` queries one by one (median) and all
    of them in one call (time per query). Per reader: medians over the
    rounds, the medians of each round's ratio to the smallest key's reader
    (``ratio_single``, ``ratio_batched``) and the rounds' own figures."""
    n_single = len(queries) if n_single is None else n_single
    single, batched = {r: [] for r in readers}, {r: [] for r in readers}
    for _ in range(rounds):
        for roots, reader in readers.items():
            reader.search(queries[:5], k=10, n_threads=threads)
            times = []
            for q in queries[:n_single]:
                t = time.perf_counter()
                reader.search([q], k=10, n_threads=threads)
                times.append(time.perf_counter() - t)
            single[roots].append(1000 * float(np.median(times)))
            t = time.perf_counter()
            reader.search(queries, k=10, n_threads=threads)
            batched[roots].append(1000 * (time.perf_counter() - t) / len(queries))
    first = min(readers)
    return {roots: {"single_ms": float(np.median(single[roots])),
                    "batched_ms": float(np.median(batched[roots])),
                    "ratio_single": float(np.median(np.divide(single[roots], single[first]))),
                    "ratio_batched": float(np.median(np.divide(batched[roots], batched[first]))),
                    "rounds_single_ms": single[roots], "rounds_batched_ms": batched[roots]}
            for roots in readers}


def root_cost(threads):
    """Single-query and batched latency and disk per document, 1 against 10
    roots, on the synthetic topic corpus at N = COST_N with the recipe's
    graph recipe (10,000 nodes, 5 nearest-node edges). Both indexes are
    open at once and timed against each other (time_rounds, COST_ROUNDS
    rounds of the COST_QUERIES queries)."""
    from sobolev_index import SobolevIndex

    graph, measures = topic_measures(COST_N + COST_QUERIES, threads)
    queries = measures[COST_N:]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        readers = {}
        try:
            for roots in (1, ROOTS):
                path = os.path.join(tmp, f"r{roots}")
                started = time.perf_counter()
                index = SobolevIndex.create(path, graph, roots=None if roots == 1 else roots,
                                            on_violation="perturb")
                with index:
                    index.add(measures[:COST_N])
                size = sum(os.path.getsize(os.path.join(d, f))
                           for d, _, files in os.walk(path) for f in files)
                out[roots] = {"bytes_per_document": size / COST_N,
                              "build_seconds": time.perf_counter() - started}
                readers[roots] = SobolevIndex.open(path)
            for roots, row in time_rounds(readers, queries, threads, COST_ROUNDS).items():
                out[roots].update(row)
        finally:
            for reader in readers.values():
                reader.close()
    return out


# -------------------------------------------------------------------- report
def machine_facts():
    import scipy
    import sklearn

    import sobolev_index

    return {"cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "scipy": scipy.__version__,
            "scikit-learn": sklearn.__version__, "sobolev-index": sobolev_index.__version__,
            "date": time.strftime("%Y-%m-%d")}


def _fmt_diff(row):
    if row["factor"] == "baseline":
        return ""
    return f"{row['diff_mean']:+.2f} ± {row['diff_sem']:.2f}"


def _and(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def learned_paragraph(name, data):
    """What the learned-vector rows of corpus ``name`` mean, in numbers."""
    learned = data["learned"]
    rows = list(learned.values())
    first = rows[0]
    text = (f"**Learned vectors.** Learned from the {first['documents']:,} documents above "
            f"({first['distinct_words']:,} distinct words, stop words included), vectors of "
            f"dimension {first['dim']}: ")
    text += "; ".join(
        f"with min_count {f['min_count']}, {f['words']:,} words get one ({f['seconds']:.1f} s), "
        f"and the index has {f['build_words']:,} of the {f['build_vocabulary']:,} words besides "
        f"stop words, {100 * f['token_coverage']:.1f}% of their occurrences" for f in rows) + ". "
    missing = [(row_name, f) for row_name, f in learned.items() if f["missing"]]
    if missing:
        text += (_and(f"{f['missing']:,} (min_count {f['min_count']})" for _, f in missing)
                 + f" of the {data['n_documents']:,} documents have no word the index knows: left "
                 "out, they are on average "
                 + _and(f"{data['table'][row_name]['missing_error_mean']:.2f}" for row_name, _ in missing)
                 + " points of the error. ")
    else:
        text += "Every document has a word the index knows. "
    zero = [f for f in rows if f["zero_words"]]
    if zero:
        text += ("Some words seen often enough get no vector either, because theirs comes out "
                 "zero (no context in the kept dimensions): "
                 + _and(f"{len(f['zero_words']):,} with min_count {f['min_count']} ("
                        + ", ".join(f"`{w}`" for w in f["zero_words"][:3])
                        + (", ..." if len(f["zero_words"]) > 3 else "") + ")" for f in zero)
                 + "; of the documents left out, they account for "
                 + _and(f"{f['missing_by_zero']:,}" for f in zero) + ". ")
    if name == "stdlib":
        text += ("The given vectors are learned too, by PPMI and SVD with min_count 3, but from "
                 "all the standard library's docstrings.")
    return text.rstrip()


def render(report):
    m = report["machine"]
    lines = [
        "# Classification quality: S_p against Word Mover's Distance",
        "",
        "Generated by one command on " + m["date"] + ":",
        "",
        "```bash",
        'pip install ".[paper]"',
        "python bench/quality.py",
        "```",
        "",
        f"It ran in {report['seconds'] / 60:.1f} minutes on {m['cores']} cores with "
        f"`--threads {report['args']['threads']}`, Python {m['python']}, NumPy {m['numpy']}, "
        f"scikit-learn {m['scikit-learn']}, sobolev-index {m['sobolev-index']}. Every number "
        "is in `bench/results/quality.json`.",
        "",
        f"**Protocol.** {report['args']['splits']} stratified random 70/30 splits, the same for "
        "every row; k-NN with k in 1..19 chosen by 3-fold cross-validation inside each "
        "training part. *error* is the mean test error (%) ± its standard deviation over the "
        "splits; *vs WMD* is the mean paired difference in points ± its standard error (a "
        "difference within one standard error is \"about the same\"). *matrix time* is the "
        "whole distance matrix, the graph included (for S_p also its trees and features; for "
        "graph OT its shortest paths; for *build defaults* the whole build, index written, and "
        "for learned vectors their learning too). "
        "Rows that share the recipe's graph and roots (roots 5 and 20, p = 2, counts with stop "
        "words removed) reuse its cached trees; the fresh *build defaults* row pays for "
        "everything.",
        "",
        "**Rows.** The recipe is what `build` does by default: every word its own node (at "
        "most 10,000), edges to each node's 5 nearest nodes, tf-idf weights, English stop "
        "words removed, S_1 sliced over 10 random roots. Each other row changes one thing. "
        "*build defaults* is the index `build_index` makes with no options (the token "
        "pattern aside), its distances read back through `SobolevIndex.pairwise`. *build "
        "defaults, vectors learned from the corpus* is that index with the given word vectors "
        "replaced by vectors learned from the evaluated documents themselves, as `sobolev-index "
        "build --vectors learn` learns them (`learn_vectors`: PPMI and SVD with dimension 100, "
        "a window of 5 and min_count 2, the corpus's token pattern): it is what a user with no "
        "word vectors gets, and its *vs WMD* compares with WMD on the given vectors. The row "
        "after it learns with min_count 1, so that words seen once get a vector too. A word "
        "with no vector is ignored, so a document may have no word the index knows; those two "
        "indexes are built with `skip_empty` (`--skip-empty`), and a document left out is at "
        "infinite distance from every other: it is never a neighbour, and as a test document "
        "it counts as an error, as it would for a user. WMD is exact, on normalised counts "
        "with stop words removed.",
        "",
    ]
    for name, data in report["corpora"].items():
        if data is None:
            lines += [f"## {name}", "", f"Not run: {report['missing'][name]}", ""]
            continue
        table = data["table"]
        wmd = table["WMD"]
        lines += [f"## {name}", "", data["description"], ""]
        if data.get("learned"):
            lines += [learned_paragraph(name, data), ""]
        lines += ["| setting | k-NN error (%) | vs WMD (points) | matrix time (s) | WMD time / time |",
                  "|---|---|---|---|---|"]
        for row_name, row in table.items():
            ratio = wmd["seconds"] / row["seconds"] if row["seconds"] > 0 else float("nan")
            lines.append(f"| {row_name} | {row['error_mean']:.2f} ± {row['error_std']:.2f} | "
                         f"{_fmt_diff(row)} | {row['seconds']:.2f} | {ratio:.0f}x |")
        lines.append("")
    orbit = report.get("orbit")
    if orbit:
        lines += [
            "## Orbit (persistence diagrams)",
            "",
            f"{orbit['n_diagrams']} H1 diagrams of orbits of the linked twist map "
            f"(bench/paper/orbit.py: 5 classes, {orbit['per_class']} orbits each of 1,000 "
            f"points), {orbit['n_points']:,} diagram points in all; the graphs are built over "
            "all of them. SVM on exp(-t d) with t and C chosen by inner cross-validation "
            "(bench/paper/protocol.py; graph OT's indefinite Gram matrix gets its smallest "
            "eigenvalue's magnitude added to the diagonal), and k-NN as above, over the same "
            "splits. *vs OT* compares SVM accuracy with graph OT on the same 5-nearest-node "
            "graph and weights, paired over the splits.",
            "",
            "| setting | SVM accuracy (%) | vs OT (points) | k-NN error (%) | matrix time (s) |",
            "|---|---|---|---|---|",
        ]
        for row_name, row in orbit["table"].items():
            diff = "" if row["factor"] == "baseline" else (
                f"{row['diff_mean']:+.2f} ± {row['diff_sem']:.2f}")
            lines.append(f"| {row_name} | {row['svm_mean']:.1f} ± {row['svm_std']:.1f} | {diff} | "
                         f"{row['knn_error_mean']:.1f} ± {row['knn_error_std']:.1f} | "
                         f"{row['seconds']:.2f} |")
        lines.append("")
    cost = report.get("cost")
    if cost:
        one, many = cost["1"], cost[str(ROOTS)]
        lines += [
            "## What 10 roots cost",
            "",
            f"Synthetic topic corpus of `bench/` ({COST_N:,} documents, a 10,000-node graph with "
            f"5 nearest-node edges), k = 10, {COST_QUERIES} queries one by one (median) and "
            f"in one batch, both indexes timed in {COST_ROUNDS} alternating rounds (medians), "
            f"`--threads {report['args']['threads']}`:",
            "",
            "| roots | single query (ms) | batched (ms/query) | bytes on disk per document |",
            "|---|---|---|---|",
        ]
        for label, row in (("1 (`--recipe fast`)", one),
                           (f"{ROOTS} (`--recipe quality`, the default)", many)):
            batched = f"{row['batched_ms']:.2f}" if "batched_ms" in row else "n/a"
            lines.append(f"| {label} | {row['single_ms']:.2f} | {batched} | "
                         f"{row['bytes_per_document']:,.0f} |")
        # (Runs before the alternating blocks kept no ratios: their medians'.)
        ratio = many.get("ratio_single", many["single_ms"] / one["single_ms"])
        lines += [
            "",
            f"Ten roots take {ratio:.1f}x the time of one root per single query at this N"
            + (f", {many['ratio_batched']:.1f}x per query in a batch" if "ratio_batched" in many
               else "")
            + f", and {many['bytes_per_document'] / one['bytes_per_document']:.1f}x the disk"
            + (" (the ratios are medians of each round's)" if "ratio_single" in many else "")
            + ".",
            "",
            "These ratios hold where the roots' shortest-path trees cut off the same "
            "subtrees, whose posting lists the index stores and a search at p = 1 reads "
            "once. This corpus's words cluster around topics, and its trees share most "
            "lists. Where they share few, ten roots cost up to ten times one root: on "
            "TWITTER's graph a tenth of the postings are shared, and on the uniform "
            "corpus of `bench_scale.py` with a 50,000-node graph ten roots took 9.8x the "
            "single-query time and 4.9x the disk "
            "([benchmarks.md](benchmarks.md), 2026-11-28 20:50).",
            "",
        ]
    lines += ["![k-NN error by setting](figures/quality.png)", ""]
    return "\n".join(lines)


def plot(report, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = {n: d for n, d in report["corpora"].items() if d is not None}
    if not corpora:
        return
    fig, axes = plt.subplots(1, len(corpora), figsize=(7 * len(corpora), 6), squeeze=False)
    for ax, (name, data) in zip(axes[0], corpora.items()):
        table = data["table"]
        names = list(table)
        y = np.arange(len(names))
        means = [table[n]["error_mean"] for n in names]
        stds = [table[n]["error_std"] for n in names]
        colours = ["tab:grey" if table[n]["factor"] == "baseline" else
                   "tab:green" if table[n]["factor"] in ("recipe", "defaults") else
                   "tab:orange" if table[n]["factor"] == "learned" else "tab:blue"
                   for n in names]
        ax.barh(y, means, xerr=stds, color=colours, capsize=2)
        ax.axvline(table["WMD"]["error_mean"], color="black", lw=0.8, ls="--")
        ax.set_yticks(y)
        ax.set_yticklabels(names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("k-NN test error (%)")
        ax.set_title(name)
        lo = min(means) - max(stds) - 3
        ax.set_xlim(max(0, lo), max(means) + max(stds) + 2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--corpus", default="TWITTER,stdlib")
    parser.add_argument("--skip-ot", action="store_true", help="leave out graph OT (minutes)")
    parser.add_argument("--skip-cost", action="store_true", help="leave out the cost of roots")
    parser.add_argument("--orbits-per-class", type=int, default=60,
                        help="Orbit diagrams per class (0 leaves Orbit out)")
    parser.add_argument("--processes", type=int, default=None,
                        help="processes for the k-NN evaluations (default: --threads)")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "quality.json"))
    parser.add_argument("--render-only", action="store_true",
                        help="write the page and figure again from --json, computing nothing")
    parser.add_argument("--cost-only", action="store_true",
                        help="measure the cost of roots again and keep the rest of --json (the "
                             "classification does not depend on how the index stores or "
                             "searches), then write the page")
    parser.add_argument("--docs", default=os.path.join(ROOT, "docs"))
    add_threads_option(parser)
    args = parser.parse_args(argv)
    names = [n for n in args.corpus.split(",") if n]
    unknown = [n for n in names if n not in MIN_WORDS]
    if unknown:
        parser.error(f"--corpus {','.join(unknown)}: expected names from {','.join(MIN_WORDS)} "
                     "(or an empty string for none)")
    from paper.protocol import splits

    if args.render_only:
        with open(args.json, encoding="utf-8") as handle:
            write_page(json.load(handle), args.docs)
        return
    if args.cost_only:
        with open(args.json, encoding="utf-8") as handle:
            report = json.load(handle)
        import sobolev_index  # noqa: F401
        with limit_threads(args.threads):
            print("[cost] 1 and 10 roots", file=sys.stderr, flush=True)
            report["cost"] = {str(k): v for k, v in root_cost(args.threads).items()}
        report["cost_machine"] = machine_facts()
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=1, default=float)
        write_page(report, args.docs)
        return
    import sobolev_index  # noqa: F401  (loaded before the thread caps, as the peers)

    started = time.perf_counter()
    report = {"args": vars(args), "machine": machine_facts(), "corpora": {}, "missing": {}}
    with limit_threads(args.threads):
        for name in names:
            print(f"[{name}] loading", file=sys.stderr, flush=True)
            corpus = load_corpus(name)
            if corpus is None:
                report["corpora"][name] = None
                report["missing"][name] = (f"the TWITTER files are not in {DATA} (set "
                                           "SOBOLEV_INDEX_DATA to the data directory)")
                continue
            print(f"[{name}] {len(corpus['documents'])} documents, {len(corpus['vectors'][True])} "
                  "words: distances", file=sys.stderr, flush=True)
            rows, chosen, learned = rows_of(corpus, args.threads, args.skip_ot)
            print(f"[{name}] evaluating {len(rows)} rows", file=sys.stderr, flush=True)
            split_list = splits(corpus["labels"], n_splits=args.splits, seed=0)
            table = evaluate(rows, corpus["labels"], split_list, args.processes or args.threads)
            classes = Counter(corpus["labels"].tolist())
            description = (
                f"{len(corpus['documents']):,} documents in {len(classes)} classes "
                f"({', '.join(f'{c} {n}' for c, n in classes.most_common())}), "
                f"{len(corpus['vectors'][True]):,} words besides stop words with vectors of "
                f"dimension {corpus['vectors'][True].dim}; documents with at least {MIN_WORDS[name]} word(s) "
                "besides stop words.")
            if name == "stdlib":
                description += (f" Standard library of Python {platform.python_version()}; "
                                "vectors by PPMI and SVD over all of its docstrings.")
            report["corpora"][name] = {"table": table, "description": description,
                                       "build_recipe": chosen, "learned": learned,
                                       "n_documents": len(corpus["documents"])}
            for row_name, row in table.items():
                print(f"  {row_name}: {row['error_mean']:.2f} ± {row['error_std']:.2f} "
                      f"({_fmt_diff(row)}), {row['seconds']:.2f} s", file=sys.stderr, flush=True)
        if args.orbits_per_class > 0:
            print("[Orbit] diagrams and distances", file=sys.stderr, flush=True)
            rows, orbit_labels, n_points = orbit_rows(args.threads, args.orbits_per_class)
            print(f"[Orbit] evaluating {len(rows)} rows", file=sys.stderr, flush=True)
            table = evaluate_orbit(rows, orbit_labels,
                                   splits(orbit_labels, n_splits=args.splits, seed=0),
                                   args.processes or args.threads)
            report["orbit"] = {"table": table, "n_diagrams": len(orbit_labels),
                               "per_class": args.orbits_per_class, "n_points": n_points}
            for row_name, row in table.items():
                print(f"  {row_name}: SVM {row['svm_mean']:.1f} ± {row['svm_std']:.1f}, k-NN error "
                      f"{row['knn_error_mean']:.1f}", file=sys.stderr, flush=True)
        if not args.skip_cost:
            print("[cost] 1 and 10 roots", file=sys.stderr, flush=True)
            report["cost"] = {str(k): v for k, v in root_cost(args.threads).items()}
    report["seconds"] = time.perf_counter() - started
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as out:
        json.dump(report, out, indent=1, default=float)
    write_page(report, args.docs)
    print(f"wrote {args.json}", file=sys.stderr)


def write_page(report, docs):
    os.makedirs(os.path.join(docs, "figures"), exist_ok=True)
    plot(report, os.path.join(docs, "figures", "quality.png"))
    with open(os.path.join(docs, "quality.md"), "w", encoding="utf-8") as out:
        out.write(render(report))
    print(f"wrote {os.path.join(docs, 'quality.md')}", file=sys.stderr)


if __name__ == "__main__":
    main()
