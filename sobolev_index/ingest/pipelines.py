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
    """Read the documents of corpus files, as a list.

    The files are read as :func:`build_from_files` and :func:`add_files`
    read them (:func:`~sobolev_index.ingest.corpus.read_corpus`): plain
    text is one document per file.

    Parameters
    ----------
    files : iterable of str or path-like
        Corpus files and directories, ``"-"`` for standard input.
    corpus_format : str, default="auto"
        One of :data:`~sobolev_index.ingest.corpus.CORPUS_FORMATS`;
        ``"auto"`` tells the format by the file's name, then by its first
        line.
    encoding : str, default="utf-8"
        The text encoding the files are decoded from.
    columns : Columns, dict or None, default=None
        The key, text and label columns of CSV, TSV and JSON Lines files: a
        :class:`~sobolev_index.ingest.corpus.Columns` or a dict with any of
        ``"key"``, ``"text"`` and ``"label"``. None takes the defaults.

    Returns
    -------
    list of dict
        The documents, ``{"key", "text", "label", "fields"}`` each, in file
        order.

    Raises
    ------
    ValueError
        If ``encoding``, ``corpus_format`` or ``columns`` is not valid.
    CorpusError
        If a file does not exist or cannot be read in its format; the
        message names the file and line.

    Examples
    --------
    >>> from sobolev_index.ingest.pipelines import read_documents
    >>> with open("reviews.csv", "w", encoding="utf-8") as f:
    ...     print("id,review,stars", file=f)
    ...     print('r1,"Good, and cheap",5', file=f)
    ...     print("r2,Too slow,2", file=f)
    >>> for doc in read_documents(["reviews.csv"], columns={"text": "review"}):
    ...     print(doc)
    {'key': 'r1', 'text': 'Good, and cheap', 'label': None, 'fields': {'stars': '5'}}
    {'key': 'r2', 'text': 'Too slow', 'label': None, 'fields': {'stars': '2'}}
    """
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
    """Build an index at ``path`` from files, of either kind.

    A text index from ``corpus`` files
    (:func:`~sobolev_index.ingest.documents.read_corpus`, in
    ``corpus_format``) and word ``vectors``
    (:func:`~sobolev_index.ingest.documents.build_index`), or a point index
    from ``points`` files (:func:`~sobolev_index.ingest.pointindex.build_point_index`):
    JSON Lines point clouds, or with ``diagrams`` persistence diagram files
    and folders, labelled by their folder. Give one or the other. The text
    options are not used for points.

    Parameters
    ----------
    path : str or path-like
        Where the index is made: a path that does not exist yet, or an
        empty folder.
    corpus : iterable of str or path-like, default=()
        Corpus files and directories (``"-"`` for standard input), for a
        text index.
    vectors : str, path-like, WordVectors or None, default=None
        The word vectors of a text index: a vector file (only the corpus's
        words are read), a :class:`~sobolev_index.ingest.embeddings.WordVectors`,
        or ``"learn"`` to learn them from the corpus.
    points : iterable of str or path-like, default=()
        Point-cloud files (JSON Lines), or with ``diagrams`` persistence
        diagram files and folders, for a point index.
    diagrams : bool, default=False
        Read ``points`` as persistence diagrams, not point clouds.
    diagram_weights : {"uniform", "persistence"} or None, default=None
        How the points of a diagram are weighted; None is the recipes'
        choice, ``"persistence"``.
    corpus_format : str, default="auto"
        The format of the corpus files, one of
        :data:`~sobolev_index.ingest.corpus.CORPUS_FORMATS`; ``"auto"`` tells
        it by the file's name, then by its first line.
    settings : TextSettings or None, default=None
        How texts become words and weights
        (:class:`~sobolev_index.ingest.documents.TextSettings`); None is the
        recipe's choice.
    fold_case : bool, default=False
        Lowercase the words of the vector file before matching them.
    skip_empty : bool, default=False
        Leave out, with a warning, the documents with no word that has a
        vector, instead of refusing them.
    store_text : bool, default=True
        Keep each document's text in its fields (``fields["text"]``).
    recipe : {"quality", "fast"}, default="quality"
        What fills in the options left as None (see
        :mod:`~sobolev_index.ingest.recipes`).
    nodes : int or None, default=None
        The most nodes the graph may have; None is the recipe's choice.
    edges : {"log", "sqrt", "knn"} or None, default=None
        How the graph's nodes are joined; None is ``"knn"``.
    k : int or None, default=None
        The nearest nodes each node is joined to with ``edges="knn"``; None
        is the recipe's choice (5).
    roots : int, list of int or None, default=None
        A count of roots or a list of nodes; None is the recipe's count.
    p : float or "inf", default=1
        The index's default order of S_p for searches, in [1, inf].
    seed : int, default=0
        Seed of the graph, the random roots and any tie-breaking.
    progress : callable or None, default=None
        Called as ``progress(stage, done, total)`` as work advances.
    encoding : str, default="utf-8"
        The text encoding the corpus files are decoded from. Point files are
        read as UTF-8: another encoding is refused with them.
    columns : Columns, dict or None, default=None
        The key, text and label columns of CSV, TSV and JSON Lines corpus
        files: a :class:`~sobolev_index.ingest.corpus.Columns` or a dict with
        any of ``"key"``, ``"text"`` and ``"label"``. Refused with point
        files.
    learn : dict or None, default=None
        With ``vectors="learn"``, the options of the vectors learned
        (``dim``, ``window``, ``min_count``, see
        :func:`~sobolev_index.ingest.documents.build_index`).

    Returns
    -------
    index : SobolevIndex
        The new index, open for writing.
    report : dict
        What the build did (see
        :func:`~sobolev_index.ingest.documents.build_index` and
        :func:`~sobolev_index.ingest.pointindex.build_point_index`); its
        ``kind`` is ``"text"``, ``"clouds"`` or ``"diagrams"``.

    Raises
    ------
    ValueError
        If both corpus files and point files are given, or neither (or a
        corpus without vectors), or an option is not one of its values.
    FileExistsError
        If ``path`` exists and is not an empty folder.
    CorpusError
        If a file cannot be read, or the input holds nothing to index.

    See Also
    --------
    add_files : Add more files to the index.
    query_measures : Queries read as the index was built.

    Examples
    --------
    >>> import json
    >>> import numpy as np
    >>> from sobolev_index.ingest.embeddings import write_word2vec_text
    >>> words = ["cat", "dog", "fish", "bird", "tree", "rock", "sun", "moon"]
    >>> write_word2vec_text("words.txt", words, np.random.default_rng(0).normal(size=(8, 4)))
    >>> docs = [{"key": "a", "text": "cat dog fish", "label": "pets"},
    ...         {"key": "b", "text": "tree rock sun", "label": "nature"},
    ...         {"key": "c", "text": "dog bird cat", "label": "pets"}]
    >>> with open("corpus.jsonl", "w", encoding="utf-8") as f:
    ...     for doc in docs:
    ...         print(json.dumps(doc), file=f)
    >>> from sobolev_index.ingest.pipelines import build_from_files, query_measures
    >>> index, report = build_from_files("text.idx", corpus=["corpus.jsonl"], vectors="words.txt")
    >>> report["kind"], report["added"], report["vocabulary"]
    ('text', ['a', 'b', 'c'], 7)
    >>> measures, names = query_measures(index, texts=["cat fish"])
    >>> found = index.search(measures, k=2)
    >>> found.keys, found.distances.round(4).tolist()
    ([['a', 'c']], [[1.182, 3.0121]])
    >>> index.close()

    A point index from point clouds:

    >>> rng = np.random.default_rng(0)
    >>> with open("clouds.jsonl", "w", encoding="utf-8") as f:
    ...     for i in range(4):
    ...         cloud = {"key": f"c{i}", "points": rng.normal(i % 2, size=(6, 2)).tolist()}
    ...         print(json.dumps(cloud), file=f)
    >>> index, report = build_from_files("clouds.idx", points=["clouds.jsonl"], nodes=8)
    >>> report["kind"], report["added"], report["nodes"]
    ('clouds', ['c0', 'c1', 'c2', 'c3'], 8)
    >>> index.close()
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
    """What :func:`read_files` read from files, for :func:`add_files`.

    The documents (``kind`` ``"text"``) or point sets (``kind``
    ``"clouds"`` or ``"diagrams"``) of ``files``. ``len()`` is the number of
    items. :func:`add_files` refuses point sets read for an index of
    another kind.

    Parameters
    ----------
    kind : {"text", "clouds", "diagrams"}
        What the items are.
    items : list
        The document dicts, or the
        :class:`~sobolev_index.ingest.pointsets.PointSet` objects.
    files : iterable of str or path-like
        The files they were read from (kept as a list).

    Attributes
    ----------
    kind : str
        As given.
    items : list
        As given.
    files : list
        As given.

    Examples
    --------
    >>> from sobolev_index.ingest.pipelines import ReadFiles
    >>> read = ReadFiles("text", [{"key": "a", "text": "cat", "label": None, "fields": None}],
    ...                  ["new.jsonl"])
    >>> read
    ReadFiles('text', 1 items from ['new.jsonl'])
    >>> len(read), read.kind
    (1, 'text')
    """

    def __init__(self, kind, items, files):
        self.kind, self.items, self.files = kind, items, list(files)

    def __len__(self):
        return len(self.items)

    def __repr__(self):
        return f"ReadFiles({self.kind!r}, {len(self.items)} items from {self.files!r:.80})"


def read_files(index, files, *, corpus_format="auto", encoding=DEFAULT_ENCODING, columns=None):
    """Read files as :func:`add_files` would for an index, without writing.

    Corpus files for a text index, point clouds or diagrams for a point
    index (diagrams weighted as the build's were). Reading first lets a
    caller hold the write lock only while it writes: a pipe whose writer is
    slow, or never comes, then blocks no other writer (the command line's
    ``add`` does this).

    Parameters
    ----------
    index : SobolevIndex, ShardedIndex, str or path-like
        The index the files are for; open for reading is enough. A sharded
        index reads them with its first shard. A path of an index, single or
        sharded: what holds its settings is then opened for reading (for a
        sharded index, shard 0 only) and closed again.
    files : iterable of str or path-like
        The files (``"-"`` for standard input).
    corpus_format : str, default="auto"
        The format of corpus files, as in :func:`read_documents`.
    encoding : str, default="utf-8"
        The text encoding of corpus files. Point files are read as UTF-8:
        another encoding is refused with them.
    columns : Columns, dict or None, default=None
        The key, text and label columns of corpus files, as for
        :func:`build_from_files`. Refused for a point index.

    Returns
    -------
    ReadFiles
        What was read, to pass to :func:`add_files` as its ``files``.

    Raises
    ------
    ValueError
        If ``encoding`` or ``columns`` is not valid, or does not apply to
        point files.
    CorpusError
        If a file cannot be read as the index's kind of input.

    Examples
    --------
    >>> import json
    >>> import numpy as np
    >>> from sobolev_index.ingest.embeddings import write_word2vec_text
    >>> words = ["cat", "dog", "fish", "bird", "tree", "rock", "sun", "moon"]
    >>> write_word2vec_text("words.txt", words, np.random.default_rng(0).normal(size=(8, 4)))
    >>> docs = [{"key": "a", "text": "cat dog fish", "label": "pets"},
    ...         {"key": "b", "text": "tree rock sun", "label": "nature"},
    ...         {"key": "c", "text": "dog bird cat", "label": "pets"}]
    >>> with open("corpus.jsonl", "w", encoding="utf-8") as f:
    ...     for doc in docs:
    ...         print(json.dumps(doc), file=f)
    >>> from sobolev_index import SobolevIndex
    >>> from sobolev_index.ingest.pipelines import add_files, build_from_files, read_files
    >>> index, _ = build_from_files("read.idx", corpus=["corpus.jsonl"], vectors="words.txt")
    >>> index.close()
    >>> with open("more.jsonl", "w", encoding="utf-8") as f:
    ...     print(json.dumps({"key": "d", "text": "bird fish", "label": "pets"}), file=f)
    >>> read = read_files("read.idx", ["more.jsonl"])
    >>> read
    ReadFiles('text', 1 items from ['more.jsonl'])
    >>> with SobolevIndex.open("read.idx", mode="a") as index:
    ...     print(add_files(index, read)["added"], len(index))
    ['d'] 4
    """
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
    """Add the documents or point sets of files to an index, read as it was built.

    Corpus files for a text index
    (:func:`~sobolev_index.ingest.documents.add_documents`), point clouds or
    diagrams for a point index
    (:func:`~sobolev_index.ingest.pointindex.add_pointsets`). Every batch is
    committed on its own; a KeyboardInterrupt carries the keys committed
    before it as ``added``, and ``skip_existing`` leaves out what is there
    already, so the same call resumes it.

    A sharded index adds them through its shards (see
    :func:`sobolev_index.distributed.files.add_files`): words it does not
    know are ignored, and ``vectors`` is refused, since every shard's words
    table would have to change at once.

    Parameters
    ----------
    index : SobolevIndex or ShardedIndex
        The index, open for writing.
    files : iterable of str or path-like, or ReadFiles
        The files (``"-"`` for standard input), or what :func:`read_files`
        read (then ``corpus_format``, ``encoding`` and ``columns`` were
        applied there).
    vectors : str, path-like, WordVectors or None, default=None
        For a text index, where words it does not know get their vectors, to
        be placed on the node nearest them (``"stored"``: the vector file
        the index was built with); None ignores such words.
    corpus_format : str, default="auto"
        The format of corpus files, as in :func:`read_documents`.
    skip_empty : bool, default=False
        Leave out, with a warning, the documents with no word the index
        knows, instead of refusing them.
    batch_size : int, default=1000
        Documents or point sets per committed batch.
    upsert : bool, default=False
        Replace the live documents that have the keys given, instead of
        refusing those keys.
    store_text : bool, default=True
        Keep each document's text in its fields (``fields["text"]``).
    progress : callable or None, default=None
        Called as ``progress(stage, done, total)`` as work advances.
    skip_existing : bool, default=False
        Leave out what has a key that is live already. Exclusive with
        ``upsert``.
    encoding : str, default="utf-8"
        The text encoding of corpus files. Point files are read as UTF-8.
    columns : Columns, dict or None, default=None
        The key, text and label columns of corpus files, as for
        :func:`build_from_files`.

    Returns
    -------
    dict
        ``added`` (keys), ``replaced`` (a count), ``existing`` (keys left
        out), ``skipped``, ``new_words`` (0 for point sets), ``read`` (the
        documents or point sets the files held) and, for text, the words
        that stayed unknown (see
        :func:`~sobolev_index.ingest.documents.add_documents`).

    Raises
    ------
    ValueError
        If ``files`` were read for an index of another kind, ``vectors`` is
        given for a sharded index, or an option is not valid.
    CorpusError
        If the index is open for reading, a file cannot be read, or a
        document has no word the index knows (without ``skip_empty``).
    CorpusKeyError
        If a key is given twice, or (without ``upsert`` or
        ``skip_existing``) is in the index already.

    Examples
    --------
    >>> import json
    >>> import numpy as np
    >>> from sobolev_index.ingest.embeddings import write_word2vec_text
    >>> words = ["cat", "dog", "fish", "bird", "tree", "rock", "sun", "moon"]
    >>> write_word2vec_text("words.txt", words, np.random.default_rng(0).normal(size=(8, 4)))
    >>> docs = [{"key": "a", "text": "cat dog fish", "label": "pets"},
    ...         {"key": "b", "text": "tree rock sun", "label": "nature"},
    ...         {"key": "c", "text": "dog bird cat", "label": "pets"}]
    >>> with open("corpus.jsonl", "w", encoding="utf-8") as f:
    ...     for doc in docs:
    ...         print(json.dumps(doc), file=f)
    >>> from sobolev_index.ingest.pipelines import add_files, build_from_files
    >>> index, _ = build_from_files("add.idx", corpus=["corpus.jsonl"], vectors="words.txt")
    >>> with open("new.jsonl", "w", encoding="utf-8") as f:
    ...     print(json.dumps({"key": "d", "text": "moon sun", "label": "nature"}), file=f)
    >>> report = add_files(index, ["new.jsonl"])
    >>> report["added"], report["read"], report["unknown_examples"]
    (['d'], 1, ['moon'])

    With vectors, a word the index does not know gets a node:

    >>> report = add_files(index, ["new.jsonl"], vectors="words.txt", upsert=True)
    >>> report["added"], report["replaced"], report["new_words"]
    (['d'], 1, 1)
    >>> index.close()
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
    """Query measures for an index: from texts, and from files read as the index was built.

    One measure per text of ``texts``, then one per document or point set of
    ``files``. Every query of a text index is read with the index's own
    token pattern; a plain text file holds one query per line. A sharded
    index reads them with its first shard's settings and words. Nothing is
    written.

    Parameters
    ----------
    index : SobolevIndex or ShardedIndex
        The index to search; open for reading is enough.
    texts : iterable of str, default=()
        Query texts, for a text index.
    files : iterable of str or path-like, default=()
        Query files: corpus files for a text index, point clouds or diagrams
        for a point index.
    vectors : str, path-like, WordVectors or None, default=None
        Where query words a text index does not know get their vectors, to
        be placed on the node nearest them for these queries (see
        :func:`~sobolev_index.ingest.documents.text_measures`); None ignores
        such words.
    corpus_format : str, default="auto"
        The format of corpus files, as in :func:`read_documents`, but plain
        text is one query per line.
    encoding : str, default="utf-8"
        The text encoding of corpus files. Point files are read as UTF-8.
    columns : Columns, dict or None, default=None
        The key, text and label columns of corpus files, as for
        :func:`build_from_files`.

    Returns
    -------
    measures : list of (nodes, masses)
        The query measures, texts first, then those of the files.
    names : list of str
        One per measure: the query's text, or its point set's key.

    Raises
    ------
    CorpusError
        If texts are given for an index not built from text, or a file
        cannot be read.
    InvalidMeasureError
        If a query text has no word the index knows (or only its stop
        words).
    ValueError
        If ``encoding`` or ``columns`` is not valid.

    Examples
    --------
    >>> import json
    >>> import numpy as np
    >>> from sobolev_index.ingest.embeddings import write_word2vec_text
    >>> words = ["cat", "dog", "fish", "bird", "tree", "rock", "sun", "moon"]
    >>> write_word2vec_text("words.txt", words, np.random.default_rng(0).normal(size=(8, 4)))
    >>> docs = [{"key": "a", "text": "cat dog fish", "label": "pets"},
    ...         {"key": "b", "text": "tree rock sun", "label": "nature"},
    ...         {"key": "c", "text": "dog bird cat", "label": "pets"}]
    >>> with open("corpus.jsonl", "w", encoding="utf-8") as f:
    ...     for doc in docs:
    ...         print(json.dumps(doc), file=f)
    >>> from sobolev_index.ingest.pipelines import build_from_files, query_measures
    >>> index, _ = build_from_files("query.idx", corpus=["corpus.jsonl"], vectors="words.txt")
    >>> with open("queries.txt", "w", encoding="utf-8") as f:
    ...     print("cat dog", file=f)
    ...     print("sun rock", file=f)
    >>> measures, names = query_measures(index, texts=["fish"], files=["queries.txt"])
    >>> names
    ['fish', 'cat dog', 'sun rock']
    >>> index.search(measures, k=1).keys
    [['a'], ['a'], ['b']]

    A word the index does not know, placed by its vector:

    >>> measures, names = query_measures(index, texts=["moon"], vectors="words.txt")
    >>> [(nodes.tolist(), masses.round(4).tolist()) for nodes, masses in measures]
    [([4], [2.3863])]
    >>> index.close()
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
    """Describe an index: its info with what its build recorded.

    Parameters
    ----------
    index : SobolevIndex or ShardedIndex
        The index; open for reading is enough.

    Returns
    -------
    dict
        :meth:`SobolevIndex.info <sobolev_index.SobolevIndex.info>` with the
        recipe's choices (``recipe``, None for an index built without one)
        and, for a text index, the word count (``words``), ``weighting``,
        tokenizer (``token_pattern``), the number of ``stopwords``, the
        vector file (``vectors``) and ``learned``; ``words`` is None for
        other indexes. For a sharded index, the recipe and text settings are
        its first shard's (every shard's).

    Examples
    --------
    >>> import json
    >>> import numpy as np
    >>> from sobolev_index.ingest.embeddings import write_word2vec_text
    >>> words = ["cat", "dog", "fish", "bird", "tree", "rock", "sun", "moon"]
    >>> write_word2vec_text("words.txt", words, np.random.default_rng(0).normal(size=(8, 4)))
    >>> docs = [{"key": "a", "text": "cat dog fish", "label": "pets"},
    ...         {"key": "b", "text": "tree rock sun", "label": "nature"},
    ...         {"key": "c", "text": "dog bird cat", "label": "pets"}]
    >>> with open("corpus.jsonl", "w", encoding="utf-8") as f:
    ...     for doc in docs:
    ...         print(json.dumps(doc), file=f)
    >>> from sobolev_index.ingest.pipelines import build_from_files, index_details
    >>> index, _ = build_from_files("details.idx", corpus=["corpus.jsonl"], vectors="words.txt",
    ...                             recipe="fast")
    >>> details = index_details(index)
    >>> details["documents"], details["words"], details["weighting"], details["recipe"]["roots"]
    (3, 7, 'tfidf', 1)
    >>> index.close()
    """
    sharded = _sharded_files(index)
    if sharded is not None:
        return sharded.sharded_details(index)
    return {**index.info(), "recipe": recipe_info(index), **text_info(index)}


def read_keys(path, encoding=DEFAULT_ENCODING):
    """Read the keys of a file with one key per line.

    Blank lines are skipped and the spaces around a key dropped.

    Parameters
    ----------
    path : str or path-like
        The file, or ``"-"`` for standard input.
    encoding : str, default="utf-8"
        The text encoding it is decoded from, as corpus files are.

    Returns
    -------
    list of str
        The keys, in file order.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    CorpusError
        If the file does not decode from ``encoding``, or holds a NUL
        character.
    ValueError
        If ``encoding`` is not a text encoding Python knows.

    Examples
    --------
    >>> from sobolev_index.ingest.pipelines import read_keys
    >>> with open("keys.txt", "w", encoding="utf-8") as f:
    ...     print("doc-1", file=f)
    ...     print("", file=f)
    ...     print("  doc-2 ", file=f)
    >>> read_keys("keys.txt")
    ['doc-1', 'doc-2']
    """
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
