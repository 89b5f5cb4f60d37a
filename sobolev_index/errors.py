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
    """Base class of every error raised on purpose by sobolev-index."""


class InvalidMeasureError(SobolevIndexError, ValueError):
    """A measure is empty, has unknown nodes, or has bad masses."""


class InvalidGraphError(SobolevIndexError, ValueError):
    """A graph has bad lengths, self-loops, unknown nodes or is disconnected."""


class AssumptionError(InvalidGraphError):
    """A root violates Assumption 2.1: some node has two shortest paths to it."""


class AssumptionWarning(UserWarning):
    """Lengths were perturbed to make shortest paths from a root unique."""


class UnlistedSegmentsWarning(UserWarning):
    """Segment files that no commit lists are in ``INDEX/segments/``: a
    writer died before its commit, or the catalog lost commits (see
    :meth:`SobolevIndex.recover`)."""


class SkippedDocumentsWarning(RuntimeWarning):
    """Documents without a known word were skipped (``skip_empty``); the
    report of the call lists them."""


class DuplicateKeyError(SobolevIndexError, ValueError):
    """A key given to ``add`` is already live in the index (or repeated)."""


class KeyNotFoundError(SobolevIndexError, KeyError):
    """A key is not in the index (or was deleted)."""

    def __str__(self):  # KeyError would show the message in quotes
        return str(self.args[0]) if self.args else ""


class IndexLockedError(SobolevIndexError):
    """Another process holds the index's writer lock."""


class CorruptIndexError(SobolevIndexError):
    """An index file is missing, unreadable or fails its checksum."""


class NotAnIndexError(CorruptIndexError):
    """The path is not a sobolev-index directory."""


class UnsupportedFormatError(CorruptIndexError):
    """The index was written in a format version this release cannot read."""


class OlderFormatError(UnsupportedFormatError):
    """The index was written in an older format, which this release reads
    but does not write to: :meth:`SobolevIndex.upgrade` rewrites it."""


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
