"""Sharded indexes and the ingest layer: splitting an index into shards, and
reading files (text, point sets) for a sharded index as for a single one.

A sharded index made by :func:`shard_index` keeps the ingest layer's meta
values (text settings, build recipe, point-set kind) and, for a text index,
the words table in **every** shard, so each shard stays a complete index of
its kind (``sobolev-index search --text`` works on it alone), and the
sharded index reads texts with the words and settings of its first shard,
which are every shard's.

The words table of a sharded text index does not grow: giving new words
nodes would change every shard's table, which no transaction spans. Adding
documents reads them with the words the index knows and ignores the others
(:func:`add_files`); a query may still place unknown words with vectors
(nothing is stored).
"""
import asyncio
import contextlib
import json
import os

import numpy as np

from ..errors import CorruptIndexError, SobolevIndexError
from ..index import SobolevIndex, storage
from ..index.arguments import check_positive
from ..ingest.documents import text_info
from ..ingest.export import StoredMeasures, export_header, live_documents
from ..ingest.fill import index_kind
from ..ingest.pipelines import add_files as _add_files
from ..ingest.pipelines import query_measures as _query_measures
from ..ingest.recipes import recipe_info
from ..measures import as_measure_batch
from . import shards as tasks
from .sharded import ShardedIndex

__all__ = ["connect", "shard_index", "first_shard", "sharded_details",
           "query_measures", "add_files"]


def _silent(stage, done, total):
    pass


def connect(address, timeout=10):
    """A ``dask.distributed.Client`` of the scheduler at ``address`` (for
    example ``tcp://host:8786``), waiting up to ``timeout`` seconds for it.
    An address that answers nothing raises OSError naming it."""
    try:
        from distributed import Client
    except ImportError:
        raise SobolevIndexError(
            f"a scheduler ({address}) needs Dask's distributed scheduler, which is not "
            "installed: pip install 'sobolev-index[distributed]'") from None
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"scheduler address is {address!r}; expected one like "
                         "tcp://host:8786")
    try:
        return Client(address, timeout=timeout)
    except (OSError, TimeoutError, asyncio.TimeoutError) as exc:  # two classes on 3.10
        raise OSError(f"no Dask scheduler answered at {address} within {timeout} s ({exc})") \
            from None


# ------------------------------------------------------------------ split
def shard_index(source, dest, shards, batch_size=1000, progress=None, client=None):
    """Split a single index into a new sharded index of ``shards`` shards at ``dest``.

    The sharded index is made with :meth:`ShardedIndex.create_like
    <sobolev_index.ShardedIndex.create_like>`: every shard has the source's
    graph file (trees included), roots, eta and p. Every shard gets the
    source's ingest meta values (text settings, build recipe, point-set
    kind) and, for a text index, its words table with document frequencies.
    Then every live document is copied in insertion order, ``batch_size``
    at a time, with its id, key, label, fields and measure as stored
    (masses not normalised again): searches on the sharded index give the
    source's keys and distances, ties in the same order. Documents added
    later get the ids the source would have given them.

    The sharded index is built in a hidden sibling of ``dest``
    (``.sobolev-split-*``) and renamed to ``dest`` only when complete: a
    split that fails leaves nothing at ``dest`` (an empty folder given
    stays, empty), and one killed part-way leaves at most that staging
    directory, never an incomplete index at ``dest``; remove it. A reader
    of the source copies the snapshot it opened. The sharded index is
    closed when the split returns: open it with :func:`open_index`.

    Parameters
    ----------
    source : str, path-like or SobolevIndex
        The index to split: its path, or an open
        :class:`~sobolev_index.SobolevIndex` (read as the snapshot it has
        open).
    dest : str or path-like
        Where the sharded index goes: a new path, or an empty folder.
    shards : int
        Number of shards (an integer >= 1).
    batch_size : int, default 1000
        Documents copied per batch (an integer >= 1).
    progress : callable, optional
        Called as ``progress("copying", done, total)`` before the copy and
        after each batch. None (the default): no reports.
    client : dask.distributed.Client, optional
        The client on whose workers the shards are written. None (the
        default): in this process.

    Returns
    -------
    dict
        ``path`` (absolute path of ``dest``), ``shards`` (their number),
        ``documents`` (documents copied), ``kind`` (``"text"``,
        ``"clouds"``, ``"diagrams"``, or None for plain measures),
        ``words`` (the size of the words table, None unless text) and
        ``per_shard`` (documents in each shard).

    Raises
    ------
    FileExistsError
        If ``dest`` exists and is not an empty directory.
    ValueError
        If ``shards`` or ``batch_size`` is not an integer >= 1.
    NotAnIndexError
        If ``source`` is a path that holds no index.
    CorruptIndexError
        If the source's catalog and its live documents disagree, or a file
        of it is damaged.

    See Also
    --------
    open_index : Open the sharded index (or any index).

    Examples
    --------
    >>> from sobolev_index import Graph, SobolevIndex, open_index, shard_index
    >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> with SobolevIndex.create("split-example.idx", graph, roots=[0]) as index:
    ...     keys = index.add([([node], None) for node in range(4)] * 2)
    >>> keys
    ['doc-1', 'doc-2', 'doc-3', 'doc-4', 'doc-5', 'doc-6', 'doc-7', 'doc-8']
    >>> report = shard_index("split-example.idx", "split-example.sharded", shards=2)
    >>> report["shards"], report["documents"], report["per_shard"], report["kind"]
    (2, 8, [4, 4], None)
    >>> with open_index("split-example.sharded") as sharded:
    ...     result = sharded.search("doc-1", k=3)
    ...     print(type(sharded).__name__, len(sharded), result.keys, result.distances.tolist())
    ShardedIndex 8 [['doc-1', 'doc-5', 'doc-2']] [[0.0, 0.0, 1.0]]
    """
    check_positive("batch_size", batch_size)
    dest = os.fspath(dest)
    storage.require_new_directory(dest)
    progress = progress or _silent
    if isinstance(source, SobolevIndex):
        return _split(source, dest, shards, int(batch_size), progress, client)
    with SobolevIndex.open(source, mode="r") as opened:
        return _split(opened, dest, shards, int(batch_size), progress, client)


def _split(source, dest, shards, batch_size, progress, client):
    kind = index_kind(source)
    header = export_header(source, kind)
    total = header["documents"]
    # Made and filled in a sibling directory, renamed to dest only once every
    # document is copied (as SobolevIndex.create builds in a sibling): a
    # split killed part-way leaves no sharded index at dest, only the
    # hidden staging directory, which it names.
    with storage.staged_directory(dest, ".sobolev-split-") as staging:
        with ShardedIndex.create_like(staging, source, shards=shards,
                                      client=client) as sharded:
            if header["meta"] or header["words"] is not None:
                sharded._raise_failed(sharded._placement.map(
                    tasks.set_ingest_meta,
                    sharded._every_shard(header["meta"], header["words"]), pinned=True),
                    "meta")
            copied = _copy_documents(source, sharded, batch_size, progress, total)
            # Documents added later are numbered as the source would number
            # them (its deleted documents' ids are not given again).
            sharded.reserve_ids(source.next_id)
            per_shard = [shard["documents"] for shard in sharded.info()["shards"]]
        # Checked again: dest may have been filled meanwhile (an empty
        # folder there is replaced by the index).
        storage.require_new_directory(dest)
    return {"path": os.path.abspath(dest), "shards": len(per_shard), "documents": copied,
            "kind": kind, "words": None if header["words"] is None else len(header["words"]),
            "per_shard": per_shard}


def _copy_documents(source, sharded, batch_size, progress, total):
    """Add the source's live documents to ``sharded`` in id order, as
    stored; returns how many."""
    measures = StoredMeasures(source)
    n_nodes = source.graph.n_nodes
    copied = 0
    progress("copying", 0, total)
    # Pinned: no writer of the source deletes a segment file of its latest
    # commit while its measures are read.
    with storage.files_pinned(source.path):
        batch = []
        for doc in live_documents(source.catalog):
            batch.append(doc)
            if len(batch) == batch_size:
                copied += _add_batch(sharded, batch, measures, n_nodes)
                batch = []
                progress("copying", copied, total)
        if batch:
            copied += _add_batch(sharded, batch, measures, n_nodes)
    if copied != total:
        raise CorruptIndexError(
            f"{source.path}: the catalog lists {copied} live documents but the index counts "
            f"{total}; run verify()")
    progress("copying", copied, total)
    return copied


def _add_batch(sharded, docs, measures, n_nodes):
    ids, keys, labels, fields, lengths, node_parts, mass_parts = [], [], [], [], [], [], []
    for doc_id, key, segment_id, row, label, stored_fields, _ in docs:
        nodes, masses = measures.measure(int(doc_id), int(segment_id), int(row))
        ids.append(int(doc_id))
        keys.append(key)
        labels.append(label)
        fields.append(json.loads(stored_fields) if stored_fields else None)
        lengths.append(len(nodes))
        node_parts.extend(nodes)
        mass_parts.extend(masses)
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    batch = as_measure_batch(indptr=indptr, nodes=np.asarray(node_parts, dtype=np.int64),
                             masses=np.asarray(mass_parts, dtype=np.float64), n_nodes=n_nodes)
    sharded.add(batch, keys=keys, labels=labels, fields=fields, ids=ids)
    return len(keys)


# ------------------------------------------- reading files for a sharded index
@contextlib.contextmanager
def first_shard(sharded):
    """Shard 0 of ``sharded`` opened for reading in this process: it holds
    the text settings, words table and build recipe every shard has."""
    sharded._check_open()
    with SobolevIndex.open(sharded.shard_paths[0], mode="r") as shard:
        yield shard


def sharded_details(sharded):
    """:meth:`ShardedIndex.info` with what a build recorded (as
    :func:`sobolev_index.ingest.pipelines.index_details` gives for a single
    index): ``recipe`` and, for a text index, ``words``, ``weighting``,
    ``token_pattern``, ``stopwords`` and ``vectors``."""
    info = sharded.info()
    with first_shard(sharded) as shard:
        return {**info, "recipe": recipe_info(shard), **text_info(shard)}


def query_measures(sharded, texts=(), files=(), vectors=None, corpus_format="auto",
                   encoding="utf-8", columns=None):
    """Query measures for ``sharded``, read as
    :func:`sobolev_index.ingest.pipelines.query_measures` reads them for a
    single index, with the text settings and words table of the sharded
    index. Returns (measures, names)."""
    with first_shard(sharded) as shard:
        return _query_measures(shard, texts, files, vectors, corpus_format, encoding, columns)


class _Target:
    """What the ingest layer's add reads and writes, for a sharded index:
    the catalog (text settings, words, kind) and graph of shard 0, read
    only; keys, adds and upserts go to the sharded index."""

    def __init__(self, sharded, shard):
        self.path = sharded.path
        self.catalog = shard.catalog
        self.graph = shard.graph
        self._sharded = sharded

    @property
    def writable(self):
        return self._sharded.writable

    def __len__(self):
        return len(self._sharded)

    def existing_keys(self, keys):
        return self._sharded.existing_keys(keys)

    def add(self, measures, keys=None, labels=None, fields=None):
        return self._sharded.add(measures, keys=keys, labels=labels, fields=fields)

    def upsert(self, measures, keys, labels=None, fields=None):
        return self._sharded.upsert(measures, keys, labels=labels, fields=fields)


def add_files(sharded, files, *, corpus_format="auto", skip_empty=False, batch_size=1000,
              upsert=False, store_text=True, progress=None, skip_existing=False,
              encoding="utf-8", columns=None):
    """Add the documents or point sets of ``files`` to ``sharded`` (open for
    writing), read as :func:`sobolev_index.ingest.pipelines.add_files` reads
    them for a single index of its kind, in batches of ``batch_size`` (each
    committed by every shard it touches; not atomic across shards, see
    :meth:`ShardedIndex.add`). Words a text index does not know are ignored:
    its words table does not grow (see the module's docstring). Returns the
    report of the single index's ``add_files`` (``new_words`` is 0)."""
    sharded._check_writable()
    with first_shard(sharded) as shard:
        return _add_files(_Target(sharded, shard), files, vectors=None,
                          corpus_format=corpus_format, skip_empty=skip_empty,
                          batch_size=batch_size, upsert=upsert, store_text=store_text,
                          progress=progress, skip_existing=skip_existing, encoding=encoding,
                          columns=columns)
