"""``sobolev-index quickstart``: the whole pipeline on data the package makes.

The corpus is the Python standard library's documentation (docstrings read
with ast, and the pydoc topics), and the word vectors are learned from it
with PPMI and truncated SVD, so nothing is downloaded. The run writes the
corpus and vectors as ordinary files, builds an index from most of the
corpus through the same code as ``sobolev-index build``, searches it, adds
the rest incrementally, deletes, compacts and verifies, and reports timings.
"""
import json
import os
import shutil
import tempfile
import time

from ..index.storage import require_new_directory
from .documents import add_documents, build_index, read_corpus, text_measures
from .embeddings import write_word2vec_binary
from .learn import learn_vectors, nearest_words
from .stdlib_corpus import stdlib_documents

__all__ = ["run_quickstart", "EXAMPLE_QUERIES"]

EXAMPLE_QUERIES = (
    "read a file line by line",
    "send data over a network socket",
    "current date and time",
    "compress data with gzip",
)
EXAMPLE_KEY = "json.dumps"
# Documents held back from the build and added afterwards, to show
# incremental updates.
HELD_BACK = 0.1


def _first_line(text, width=70):
    line = " ".join(text.strip().split("\n\n")[0].split())
    return line if len(line) <= width else line[:width - 1] + "…"


def run_quickstart(directory=None, seed=0, log=print):
    """Run the quickstart: the whole text pipeline on Python's own documentation.

    It writes the corpus and learned word vectors as files, builds an index
    from most of the corpus, searches it with :data:`EXAMPLE_QUERIES`, adds
    the rest, deletes a few documents, compacts and verifies, as the module
    docstring describes. It takes some seconds (about ten on a laptop).

    Parameters
    ----------
    directory : str or path-like, optional
        A new or empty folder (made if need be) that keeps the corpus, the
        vectors and the index afterwards. If the run fails, what it wrote
        there is removed, so that the folder can be used again. None (the
        default) works in a temporary folder, removed at the end.
    seed : int, default=0
        Seeds the learned vectors and the build (its graph and roots).
    log : callable, default=print
        Called with each line of the report, a str, as it is made.

    Returns
    -------
    dict
        The report: ``directory`` (None for a temporary one), ``seed``,
        ``timings`` (seconds by stage, and ``total``), ``documents``,
        ``words`` and ``dim`` of the learned vectors, ``nearest_words`` (of
        a few example words), ``build`` (the build's report, with counts for
        ``added`` and ``skipped``), ``searches`` (each query with its
        results), ``added``, ``new_words``, ``deleted``, ``final_documents``
        and ``verify_ok``.

    Raises
    ------
    FileExistsError
        If ``directory`` exists and is not an empty folder.

    Examples
    --------
    The run takes several seconds, so the example is not run as a test:

    >>> from sobolev_index.ingest.quickstart import run_quickstart
    >>> report = run_quickstart("quickstart", log=lambda line: None)  # doctest: +SKIP
    >>> report["verify_ok"], report["final_documents"] > 1000  # doctest: +SKIP
    (True, True)
    """
    keep = directory is not None
    if keep:
        directory = os.path.abspath(os.fspath(directory))
        require_new_directory(directory)
        os.makedirs(directory, exist_ok=True)
    else:
        directory = tempfile.mkdtemp(prefix="sobolev-quickstart-")
    try:
        return _run(directory, seed, log, keep)
    except BaseException:
        if keep:  # a half-made DIR would refuse the next run; leave it empty
            for name in os.listdir(directory):
                target = os.path.join(directory, name)
                if os.path.isdir(target):
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    os.unlink(target)
        raise
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)


def _run(directory, seed, log, keep):
    report = {"directory": directory if keep else None, "seed": seed, "timings": {}}
    timings = report["timings"]
    started = time.perf_counter()

    def timed(name, since):
        timings[name] = round(time.perf_counter() - since, 3)
        return timings[name]

    log("sobolev-index quickstart: Python's own documentation as a searchable corpus")
    t = time.perf_counter()
    documents = stdlib_documents()
    n_build = int(len(documents) * (1 - HELD_BACK))
    corpus_file = os.path.join(directory, "stdlib-docs.jsonl")
    more_file = os.path.join(directory, "stdlib-docs-more.jsonl")
    for path, part in ((corpus_file, documents[:n_build]), (more_file, documents[n_build:])):
        with open(path, "w", encoding="utf-8") as handle:
            for doc in part:
                handle.write(json.dumps({"key": doc["key"], "text": doc["text"],
                                         "label": doc["label"], "source": doc.get("source")}) + "\n")
    log(f"  corpus: {len(documents):,} docstrings and pydoc topics "
        f"({timed('corpus', t):.1f} s) -> {os.path.basename(corpus_file)} "
        f"({n_build:,}) and {os.path.basename(more_file)} ({len(documents) - n_build:,})")

    t = time.perf_counter()
    # min_count 3: this corpus is large enough to drop words seen twice.
    vectors, _ = learn_vectors(documents, min_count=3, seed=seed)
    vectors_file = os.path.join(directory, "stdlib-vectors.bin")
    write_word2vec_binary(vectors_file, vectors.words, vectors.vectors)
    log(f"  word vectors: {len(vectors):,} words x {vectors.dim} dims by PPMI + SVD "
        f"({timed('vectors', t):.1f} s) -> {os.path.basename(vectors_file)}")
    shown = {}
    for word in ("file", "socket", "json"):
        if word in vectors:
            shown[word] = [w for w, _ in nearest_words(vectors, word, n=4)]
    log("    nearest words: " + "; ".join(f"{w} -> {', '.join(n)}" for w, n in shown.items()))
    report.update(documents=len(documents), words=len(vectors), dim=vectors.dim,
                  nearest_words=shown)

    t = time.perf_counter()
    index_dir = os.path.join(directory, "index")
    # The build's defaults: the "quality" recipe (docs/quality.md).
    index, built = build_index(index_dir, read_corpus(corpus_file), vectors_file, seed=seed,
                               skip_empty=True)
    with index:
        log(f"  build: {len(index):,} documents, a {index.graph.n_nodes:,}-node graph with "
            f"{index.graph.n_edges:,} edges, sliced over {len(index.roots)} roots "
            f"({timed('build', t):.1f} s)")
        report.update(build={k: v for k, v in built.items() if k != "added"} |
                      {"added": len(built["added"]), "skipped": len(built["skipped"])})

        log("  searches (k = 3, S_1):")
        searches = []
        t = time.perf_counter()
        found = index.search(text_measures(index, list(EXAMPLE_QUERIES)), k=3)
        for query, hits in zip(EXAMPLE_QUERIES, found.to_records()):
            log(f"    {query!r}")
            for hit in hits:
                text = (index.get(hit["key"])["fields"] or {}).get("text", "")
                log(f"      {hit['distance']:.3f}  {hit['key']:<34} {_first_line(text, 60)}")
            searches.append({"query": query, "results": hits})
        if EXAMPLE_KEY in index:
            hits = index.search(EXAMPLE_KEY, k=4).to_records()[0]
            log(f"    neighbours of the stored document {EXAMPLE_KEY!r}: "
                + ", ".join(f"{h['key']} ({h['distance']:.3f})" for h in hits[1:]))
            searches.append({"query": EXAMPLE_KEY, "results": hits})
        timed("searches", t)
        report["searches"] = searches

        t = time.perf_counter()
        added = add_documents(index, read_corpus(more_file), vectors_file, skip_empty=True)
        log(f"  add: {len(added['added']):,} more documents, {added['new_words']} new words "
            f"placed by their vectors; {len(index):,} in all ({timed('add', t):.2f} s)")
        victims = added["added"][:5]
        t = time.perf_counter()
        index.delete(victims)
        segments_before = len(index.segments)
        index.compact()
        log(f"  delete {len(victims)} + compact: {segments_before} -> {len(index.segments)} "
            f"segment(s), {len(index):,} documents ({timed('delete_compact', t):.2f} s)")
        t = time.perf_counter()
        verified = index.verify()
        log(f"  verify: {'ok' if verified['ok'] else 'PROBLEMS: ' + str(verified['problems'])} "
            f"({timed('verify', t):.2f} s)")
        report.update(added=len(added["added"]), new_words=added["new_words"],
                      deleted=len(victims), final_documents=len(index), verify_ok=verified["ok"])
    total = timed("total", started)
    log(f"done in {total:.1f} s")
    if keep:
        log("")
        log("Go on from here:")
        log(f"  sobolev-index info {index_dir}")
        log(f"  sobolev-index search {index_dir} --text \"parse command line arguments\" -k 5")
        log(f"  sobolev-index search {index_dir} --key {EXAMPLE_KEY} --json")
        log(f"  sobolev-index sql {index_dir} \"SELECT key, sobolev_distance(key, '{EXAMPLE_KEY}') "
            f"AS d FROM documents WHERE label = 'json' ORDER BY d LIMIT 5\" --table")
    else:
        log("(pass a DIRECTORY to keep the index, corpus and vectors)")
    return report
