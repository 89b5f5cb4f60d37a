"""Exceptions and warnings raised by sobolev-index.

Every error caused by bad input is also a ``ValueError``, so callers that do
not know this package can still catch it the usual way.

Advice that messages give in the library's words is named in
:data:`ADVICE`; a message includes the entry itself (never its own copy of
the words), so that a front end with other words for the same advice (the
command line's options) can put them in its place by name, and rewording
the advice here rewords every message that gives it.
"""

# Advice given in messages, by name, in the Python API's words.
ADVICE = {
    "fold_case": "(try fold_case)",
    "skip_empty": "(skip_empty=True, --skip-empty)",
    "keep_stopwords": "(settings=text_settings(stopwords=()), --stopwords none)",
    "skip_existing": "delete it first, upsert it, or leave it out with skip_existing",
    "wait_for_writer": ("open it with mode='r' to read, or pass timeout=SECONDS to wait for "
                        "the writer"),
    "open_for_writing": "open it with mode='a'",
    "read_only": "; open it with mode='r' to read it",
    "verify": "run verify() and",
    "upgrade": "with SobolevIndex.upgrade(path)",
    "read_as_is": "or open it with mode='r' to read it as it is",
    "repair": "verify(repair=True) moves it",
    "encoding": "(encoding 'cp1252', 'latin-1', 'utf-16', ...; --encoding on the command line)",
    "format": ("(format 'lines', 'plain-lines', 'jsonl', 'csv' or 'tsv'; --format on the "
               "command line)"),
    "columns": ("(text_column=, key_column=, label_column=; --text-column NAME ... on the "
                "command line)"),
    "format_lines": "is format 'lines' (--format lines on the command line)",
    "vectors": "(vectors=; --vectors FILE)",
    "no_key_column": "(key_column=False; --key-column none on the command line)",
    "no_text": "(store_text=False, --no-text)",
}


class SobolevIndexError(Exception):
    """Base class of every error raised on purpose by sobolev-index.

    Catch it to handle any of the package's own errors. It is raised as it
    is where no subclass fits, for example when an index cannot be opened
    for writing on a read-only file system, or a Dask scheduler is asked for
    without Dask's distributed scheduler installed.
    """


class InvalidMeasureError(SobolevIndexError, ValueError):
    """Raised when a measure is empty, has unknown nodes, or has bad masses.

    Raised wherever measures are read (features, distances, an index's
    ``add``, ``search`` and ``distance``): a node that is not an integer id
    of the graph, a mass that is negative, not finite or not a number, a
    measure whose masses sum to 0 (or are too large or too small to
    normalise), or CSR arrays that do not describe a batch of measures. The
    message names the measure. Also a ``ValueError``.
    """


class InvalidGraphError(SobolevIndexError, ValueError):
    """Raised when a graph has bad lengths, self-loops, unknown nodes or is disconnected.

    Raised by :meth:`Graph.from_edges <sobolev_index.Graph.from_edges>` for
    an edge list that does not describe a connected graph with positive,
    finite lengths (the message names the first bad edge, or the
    components), and by :class:`~sobolev_index.ShortestPathTree` for a
    parent array that is not a tree. Also a ``ValueError``.
    """


class AssumptionError(InvalidGraphError):
    """Raised when a root violates Assumption 2.1: some node has two shortest paths to it.

    Raised by :meth:`Graph.tree <sobolev_index.Graph.tree>` (and so when an
    index is created with that root) with ``on_violation="raise"``, or when
    perturbing the lengths did not make the paths unique; by
    :meth:`Graph.roots <sobolev_index.Graph.roots>` when fewer nodes than
    asked for satisfy the assumption. The message names a node with two
    paths. An :class:`InvalidGraphError`, so also a ``ValueError``.
    """


class AssumptionWarning(UserWarning):
    """Warned when lengths were perturbed to make shortest paths from a root unique.

    Issued by :meth:`Graph.tree <sobolev_index.Graph.tree>` with
    ``on_violation="perturb"`` for a root that violates Assumption 2.1; the
    message gives the size of the perturbation and its seed.
    """


class UnlistedSegmentsWarning(UserWarning):
    """Warned when segment files that no commit lists are in ``INDEX/segments/``.

    Issued when an index is opened: a writer died before its commit, or the
    catalog lost commits. Those files may hold acknowledged documents;
    :meth:`SobolevIndex.recover <sobolev_index.SobolevIndex.recover>` moves
    them aside and adds back their documents.
    """


class SkippedDocumentsWarning(RuntimeWarning):
    """Documents without a known word were skipped (``skip_empty``); the
    report of the call lists them."""


class DuplicateKeyError(SobolevIndexError, ValueError):
    """Raised when a key given to ``add`` is already live in the index, or repeated.

    ``add`` refuses a key that a live document has (``upsert`` replaces it)
    or that appears twice in one batch; nothing of the batch is written.
    Also a ``ValueError``.
    """


class KeyNotFoundError(SobolevIndexError, KeyError):
    """Raised when a key is not in the index, or was deleted.

    Raised by the calls that look documents up by key (``get``, ``delete``,
    a search or distance with stored keys as queries, ``explain``). Also a
    ``KeyError``; its message is shown without quotes.
    """

    def __str__(self):  # KeyError would show the message in quotes
        return str(self.args[0]) if self.args else ""


class IndexLockedError(SobolevIndexError):
    """Raised when the index's writer lock is held: it has a writer already.

    An index has one writer at a time. Opening one for writing (``mode="a"``)
    while another process, or another handle of this process, writes to it
    raises this at once, or after ``timeout`` seconds when a timeout is
    given.
    """


class CorruptIndexError(SobolevIndexError):
    """Raised when an index file is missing, unreadable or fails its checksum.

    Raised when an index is opened or read: the catalog cannot be read, the
    graph file or a segment file does not match its checksum, or the
    catalog and the files disagree. The message names the file.
    """


class NotAnIndexError(CorruptIndexError):
    """Raised when the path is not a sobolev-index directory.

    Raised on opening a path that does not exist, is a file, or is a
    directory without the catalog of an index (or, for a sharded index,
    without its manifest). A :class:`CorruptIndexError`.
    """


class UnsupportedFormatError(CorruptIndexError):
    """Raised when the index was written in a format version this release cannot read.

    Raised on opening an index that a newer release wrote (upgrade
    sobolev-index), or an old format no longer read (rebuild the index). A
    :class:`CorruptIndexError`.
    """


class OlderFormatError(UnsupportedFormatError):
    """Raised when an index in an older format is opened for writing.

    This release reads the older format but does not write to it: open the
    index with ``mode="r"`` to read it as it is, or rewrite it with
    :meth:`SobolevIndex.upgrade <sobolev_index.SobolevIndex.upgrade>`. An
    :class:`UnsupportedFormatError`.
    """


class VectorFileError(SobolevIndexError, ValueError):
    """A word-vector file is malformed, truncated or has the wrong dimension."""


class CorpusError(SobolevIndexError, ValueError):
    """A corpus or input file cannot be read as documents or measures."""


class PointsFileError(CorpusError):
    """A point-cloud or persistence-diagram file cannot be read as point sets."""


class CorpusKeyError(DuplicateKeyError, CorpusError):
    """A key of the input is given twice, or is live in the index already."""


class CorpusVectorsError(VectorFileError, CorpusError):
    """The word-vector file for a corpus is missing, or has none of its words."""


class DiskFullError(SobolevIndexError, OSError):
    """The disk filled up while a file of the index was written; nothing of
    the operation was committed and the index is as it was."""


def add_note(exc, note):
    """``exc.add_note(note)`` where Python has it (3.11 on); on 3.10 the note
    is kept in ``exc.__notes__`` as 3.11 keeps it, but tracebacks do not
    show it."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", ()), note]
