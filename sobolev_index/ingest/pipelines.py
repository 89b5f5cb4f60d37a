"""Either kind of index through one call: files in, whichever pipeline fits.

A build takes the pipeline of the input it is given (a corpus and word
vectors, or point sets); every later call takes the pipeline of the index's
kind (:func:`~sobolev_index.ingest.fill.index_kind`), so that a caller (the
command line, a script) never asks which kind an index is. This module sits
above the text pipeline (:mod:`~sobolev_index.ingest.documents`) and the
point pipeline (:mod:`~sobolev_index.ingest.pointindex`), which do not know
each other.

A sharded index (:class:`~sobolev_index.distributed.ShardedIndex`) is
routed here too: ``read_files``, ``add_files``, ``query_measures`` and
``index_details`` hand it to :mod:`sobolev_index.distributed.files`, which
reads with its first shard's settings, so a caller need not ask which kind
of index it holds either.
"""
import json
import os
import sys

from .corpus import Columns
from .documents import add_documents, build_index, read_corpus, text_info, text_measures
from .fill import index_kind
from .pointindex import (
    POINT_KINDS,
    add_pointsets,
    build_point_index,
    point_measures,
    read_pointsets,
    stored_diagram_weights,
)
from .recipes import DEFAULT_DIAGRAM_WEIGHTS, DEFAULT_RECIPE, recipe_info
from .text import DEFAULT_ENCODING, check_encoding, text_lines

__all__ = ["build_from_files", "read_files", "ReadFiles", "add_files", "query_measures",
           "index_details", "read_keys", "read_documents"]


def _sharded_files(index):
    """:mod:`sobolev_index.distributed.files` when ``index`` is a sharded
    index, else None. (A sharded index exists only once its module is
    imported, so an ordinary call imports nothing of the distributed layer.)"""
    sharded = sys.modules.get("sobolev_index.distributed.sharded")
    if sharded is None or not isinstance(index, sharded.ShardedIndex):
        return None
    from ..distributed import files

    return files


def _corpus(files, corpus_format, encoding, columns, plain="text"):
    """The documents of corpus ``files`` (see
    :func:`~sobolev_index.ingest.corpus.read_corpus`); ``columns`` a
    :class:`~sobolev_index.ingest.corpus.Columns`, a dict with any of
    ``key``, ``text`` and ``label``, or None."""
    columns = _columns(columns)
    return read_corpus(list(files), corpus_format, plain=plain, encoding=encoding,
                       key_column=columns.key, text_column=columns.text,
                       label_column=columns.label)


def read_documents(files, corpus_format="auto", encoding=DEFAULT_ENCODING, columns=None):
    """The documents of corpus ``files`` as a list (see
    :func:`~sobolev_index.ingest.corpus.read_corpus`; ``columns`` as for
    :func:`build_from_files`)."""
    check_encoding(encoding)
    return list(_corpus(files, corpus_format, encoding, columns))


def _columns(columns):
    if columns is None:
        return Columns()
    if isinstance(columns, Columns):
        return columns
    if not isinstance(columns, dict) or set(columns) - {"key", "text", "label"}:
        raise ValueError(f"columns is {columns!r:.80}; expected a dict with any of 'key', 'text' "
                         "and 'label' (the names of those columns)")
    return Columns(**columns)


def _refuse_columns(columns):
    if _columns(columns).given:
        raise ValueError("the key, text and label columns apply to corpus files; point-cloud "
                         "and diagram files have none")


def _point_files_encoding(encoding):
    # The point readers decode UTF-8 only; another encoding is refused rather
    # than ignored.
    if check_encoding(encoding) not in ("utf-8", "utf-8-sig"):
        raise ValueError(f"encoding {encoding!r} applies to text corpora; point-cloud and diagram "
                         "files are read as UTF-8")


def _read_pointsets(files, kind, diagram_weights="uniform"):
    # Diagrams in class folders (root/<class>/<sample>.csv) are labelled by
    # their folder; clouds carry their labels in the file.
    return read_pointsets(list(files), kind, diagram_weights, label_from_dir=kind == "diagrams")


def _read_for_index(index, files, kind):
    # Later diagrams are weighted as the build's were, or they would not be
    # comparable with the stored ones.
    weights = stored_diagram_weights(index) if kind == "diagrams" else "uniform"
    return _read_pointsets(files, kind, weights)


def build_from_files(path, *, corpus=(), vectors=None, points=(), diagrams=False,
                     diagram_weights=None, corpus_format="auto", settings=None,
                     fold_case=False, skip_empty=False, store_text=True, recipe=DEFAULT_RECIPE,
                     nodes=None, edges=None, k=None, roots=None, p=1, seed=0, progress=None,
                     encoding=DEFAULT_ENCODING, columns=None, learn=None):
    """Build an index at ``path`` from files: a text index from ``corpus``
    files (:func:`~sobolev_index.ingest.documents.read_corpus`, in
    ``corpus_format``) and word ``vectors``, or a point index from
    ``points`` files: JSON Lines point clouds, or with ``diagrams``
    persistence diagram files and folders (weights ``diagram_weights``:
    "uniform" or "persistence", the recipes' choice when None;
    labelled by their folder). Corpus files are decoded from ``encoding``
    (point files are UTF-8); ``columns`` names the key, text and label
    columns of CSV, TSV and JSON Lines files (a dict with any of "key",
    "text" and "label"). ``vectors="learn"`` learns word vectors from the
    corpus (``learn``: their options, see
    :func:`~sobolev_index.ingest.documents.build_index`).

    The other options are those of
    :func:`~sobolev_index.ingest.documents.build_index` and
    :func:`~sobolev_index.ingest.pointindex.build_point_index`; the text
    options are not used for points. Returns (index open for writing,
    report); the report's ``kind`` is "text", "clouds" or "diagrams".
    """
    if diagram_weights is None:
        diagram_weights = DEFAULT_DIAGRAM_WEIGHTS
    options = dict(recipe=recipe, nodes=nodes, edges=edges, k=k, roots=roots, p=p, seed=seed,
                   progress=progress)
    check_encoding(encoding)
    if points:
        if corpus or vectors:
            raise ValueError("give either corpus files and vectors, or point files, not both")
        _point_files_encoding(encoding)
        _refuse_columns(columns)
        kind = "diagrams" if diagrams else "clouds"
        return build_point_index(path, _read_pointsets(points, kind, diagram_weights), kind=kind,
                                 diagram_weights=diagram_weights,
                                 **options)
    if not corpus or not vectors:
        raise ValueError("a build needs corpus files and word vectors (a vector file, or "
                         "vectors='learn' to learn them from the corpus), or point files")
    return build_index(path, _corpus(corpus, corpus_format, encoding, columns), vectors,
                       settings=settings, fold_case=fold_case, skip_empty=skip_empty,
                       store_text=store_text, learn=learn, **options)


class ReadFiles:
    """The documents (``kind`` "text") or point sets (``kind`` "clouds" or
    "diagrams") that :func:`read_files` read from ``files``, for
    :func:`add_files`."""

    def __init__(self, kind, items, files):
        self.kind, self.items, self.files = kind, items, list(files)

    def __len__(self):
        return len(self.items)

    def __repr__(self):
        return f"ReadFiles({self.kind!r}, {len(self.items)} items from {self.files!r:.80})"


def read_files(index, files, *, corpus_format="auto", encoding=DEFAULT_ENCODING, columns=None):
    """Read ``files`` as :func:`add_files` would for ``index`` (open for
    reading is enough), without writing: a :class:`ReadFiles` to pass to
    :func:`add_files` as its ``files``. Reading first lets a caller hold
    the write lock only while it writes: a pipe whose writer is slow, or
    never comes, then blocks no other writer (the command line's ``add``
    does this). A sharded index reads them with its first shard.

    ``index`` may also be the path of an index, single or sharded: what
    holds its settings is then opened for reading (for a sharded index,
    shard 0 only) and closed again."""
    if isinstance(index, (str, os.PathLike)):
        from ..distributed.opening import settings_holder

        with settings_holder(index) as holder:
            return read_files(holder, files, corpus_format=corpus_format, encoding=encoding,
                              columns=columns)
    sharded = _sharded_files(index)
    if sharded is not None:
        with sharded.first_shard(index) as shard:
            return read_files(shard, files, corpus_format=corpus_format, encoding=encoding,
                              columns=columns)
    kind = index_kind(index)
    check_encoding(encoding)
    if kind in POINT_KINDS:
        _point_files_encoding(encoding)
        _refuse_columns(columns)
        return ReadFiles(kind, _read_for_index(index, files, kind), files)
    # A text index, or one of plain measures (add_documents says it has no words).
    return ReadFiles("text", list(_corpus(files, corpus_format, encoding, columns)), files)


def add_files(index, files, *, vectors=None, corpus_format="auto", skip_empty=False,
              batch_size=1000, upsert=False, store_text=True, progress=None,
              skip_existing=False, encoding=DEFAULT_ENCODING, columns=None):
    """Add the documents or point sets of ``files`` to ``index`` (open for
    writing), read as the index was built: corpus files for a text index
    (``vectors``, ``skip_empty`` and ``store_text`` as in
    :func:`~sobolev_index.ingest.documents.add_documents`; the files decoded
    from ``encoding``), point clouds or diagrams for a point index.

    Every batch is committed on its own; a KeyboardInterrupt carries the
    keys committed before it as ``added``; ``skip_existing`` leaves out
    what is there already, so the same call resumes it. ``columns`` as for
    :func:`build_from_files`. Returns a report: ``added`` (keys),
    ``replaced``, ``existing``, ``skipped``, ``new_words`` (0 for point
    sets), ``read`` (the documents or point sets the files held) and, for
    text, the words that stayed unknown (see
    :func:`~sobolev_index.ingest.documents.add_documents`).

    ``files`` may also be what :func:`read_files` read (then
    ``corpus_format``, ``encoding`` and ``columns`` were applied there).

    A sharded index adds them through its shards (see
    :func:`sobolev_index.distributed.files.add_files`): words it does not
    know are ignored, and ``vectors`` is refused, since every shard's words
    table would have to change at once.
    """
    sharded = _sharded_files(index)
    if sharded is not None:
        if vectors is not None:
            raise ValueError(
                f"vectors is {vectors!r}, but new words cannot get nodes in a sharded index "
                "(every shard's words table would have to change at once); words it does not "
                "know are ignored: leave vectors out")
        return sharded.add_files(index, files, corpus_format=corpus_format,
                                 skip_empty=skip_empty, batch_size=batch_size, upsert=upsert,
                                 store_text=store_text, progress=progress,
                                 skip_existing=skip_existing, encoding=encoding,
                                 columns=columns)
    if isinstance(files, ReadFiles):
        read = files
        kind = index_kind(index)
        if (read.kind in POINT_KINDS or kind in POINT_KINDS) and read.kind != kind:
            raise ValueError(f"the files were read for an index of {read.kind}; this index holds "
                             f"{kind}: read them for this index")
    else:
        read = read_files(index, files, corpus_format=corpus_format, encoding=encoding,
                          columns=columns)
    if read.kind in POINT_KINDS:
        report = add_pointsets(index, read.items, batch_size=batch_size,
                               progress=progress, upsert=upsert, skip_existing=skip_existing)
        return {**report, "new_words": 0, "read": len(read.items)}
    return add_documents(index, read.items, vectors, skip_empty=skip_empty,
                         batch_size=batch_size, progress=progress, upsert=upsert,
                         store_text=store_text, skip_existing=skip_existing)


def query_measures(index, texts=(), files=(), vectors=None, corpus_format="auto",
                   encoding=DEFAULT_ENCODING, columns=None):
    """Query measures for ``index``: one per text of ``texts``, then one per
    document or point set of ``files`` (read as the index was built).
    ``vectors`` places query words a text index does not know (see
    :func:`~sobolev_index.ingest.documents.text_measures`); ``corpus_format``
    and ``encoding`` are as for
    :func:`~sobolev_index.ingest.documents.read_corpus`, where plain text is
    one query per line, and ``columns`` as for :func:`build_from_files`.
    Every query of a text index is read with the index's own token
    pattern. Returns
    (measures, names): a name is the query's text, or its point set's key.
    Texts on an index not built from text raise :class:`~sobolev_index.errors.CorpusError`.
    A sharded index reads them with its first shard's settings and words.
    """
    sharded = _sharded_files(index)
    if sharded is not None:
        return sharded.query_measures(index, texts, files, vectors, corpus_format, encoding,
                                      columns)
    kind = index_kind(index)
    texts = list(texts)
    pointsets = []
    check_encoding(encoding)
    if kind in POINT_KINDS:
        if files:
            _point_files_encoding(encoding)
            _refuse_columns(columns)
        pointsets = _read_for_index(index, files, kind)
    else:
        # A plain text file of queries holds one query per line.
        texts += [doc["text"] for doc in _corpus(files, corpus_format, encoding, columns,
                                                 plain="plain-lines")]
    measures = text_measures(index, texts, vectors) if texts else []
    if pointsets:
        measures += point_measures(index, pointsets)
    return measures, texts + [s.key for s in pointsets]


def index_details(index):
    """:meth:`SobolevIndex.info` with what a build recorded: the recipe's
    choices (``recipe``, None for an index built without one) and, for a
    text index, the word count, weighting, tokenizer and vector file
    (``words`` is None for other indexes). For a sharded index, the
    recipe and text settings are its first shard's (every shard's)."""
    sharded = _sharded_files(index)
    if sharded is not None:
        return sharded.sharded_details(index)
    return {**index.info(), "recipe": recipe_info(index), **text_info(index)}


def read_keys(path, encoding=DEFAULT_ENCODING):
    """The keys of a file with one key per line (blank lines skipped, spaces
    around a key dropped), decoded from ``encoding`` as corpus files are."""
    return [line.strip() for line in text_lines(path, encoding) if line.strip()]


def check_knn_graph_output(output):
    """``output`` as a path for :func:`save_knn_graph`, checked before any
    work: a .npz or .mtx name in a folder that exists."""
    output = os.fspath(output)
    if not output.endswith((".npz", ".mtx")):
        raise ValueError(f"output is {output!r}; expected a .npz or .mtx file name")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ValueError(f"output is {output!r}, but the folder {folder} does not exist")
    return output


def save_knn_graph(output, graph, keys):
    """Write a k-NN graph (from :meth:`SobolevIndex.knn_graph`) to
    ``output`` (.npz for ``scipy.sparse.load_npz``, or .mtx Matrix Market)
    and its row keys to ``output + ".keys.json"``; returns that name.

    Both files are written under temporary names and renamed into place, so
    a failed write leaves neither, and never a graph beside the keys of
    another one."""
    import scipy.io
    import scipy.sparse

    output = check_knn_graph_output(output)
    keys_file = output + ".keys.json"
    partial = [f"{output}.partial{os.path.splitext(output)[1]}", f"{keys_file}.partial"]
    placed = False
    try:
        if output.endswith(".npz"):
            scipy.sparse.save_npz(partial[0], graph, compressed=False)
        else:
            scipy.io.mmwrite(partial[0], graph, field="real", symmetry="general")
        with open(partial[1], "w", encoding="utf-8") as handle:
            json.dump(list(keys), handle, ensure_ascii=False)
        os.replace(partial[0], output)
        placed = True
        os.replace(partial[1], keys_file)
    except BaseException:
        if placed and os.path.exists(output):
            os.remove(output)
        raise
    finally:
        for name in partial:
            if os.path.exists(name):
                os.remove(name)
    return keys_file
