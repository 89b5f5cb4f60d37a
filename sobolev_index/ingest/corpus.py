"""Reading corpus files: one document dict at a time, whatever the format.

A document is ``{"key", "text", "label", "fields"}`` (key None: the index
names it). :func:`read_corpus` reads

- **JSON Lines** (``.jsonl``, ``.ndjson``, ``.json``): one object per line
  with ``text``, and optionally ``key`` (or else ``id``), ``label`` and any
  other names, kept as the document's fields;
- **CSV and TSV** (``.csv``; ``.tsv`` and ``.tab``): a header row naming
  the columns, then one document per row: ``text``, and optionally ``key``
  (or else ``id``) and ``label``; the other columns are kept as fields
  (their values as the text they are). Quoted cells may hold the delimiter,
  quotes (doubled) and newlines, as Python's ``csv`` module and spreadsheet
  programs write them;
- **label<TAB>text lines** (``"label"<TAB>text`` or ``label<TAB>text``, the
  TWITTER format), keys ``<file stem>-<line>``;
- **plain lines**: every non-empty line one unlabelled document;
- **one text file** as one document, key its stem;
- **a directory** of ``.txt`` files: key the relative path, label the first
  folder.

Format ``auto`` goes by the file's name first (the endings above), then by
its first line that is not blank: ``{`` starts JSON Lines, a row of
delimited names with a ``text`` column (or the text column given) is a CSV
or TSV header, a label and a TAB start labelled lines, and anything else is
plain text. A file whose name says CSV or TSV is never read as one
document: without the text column its header is an error naming the columns.

Every input is read once, from its start, so a pipe, a FIFO or
``/dev/stdin`` loses nothing to the format's guess (the lines read to guess
it are read again from memory). Files are decoded from ``encoding``
(:func:`~sobolev_index.ingest.text.text_lines`): a byte-order mark is
dropped, and bytes that do not decode are an error naming the file, line
and byte offset.
"""
import csv
import itertools
import json
import os
import re
import warnings
from dataclasses import dataclass

from ..errors import ADVICE, CorpusError
from .fill import FIELDS_MAX_DEPTH, check_fields_depth, key_text, label_text
from .text import DEFAULT_ENCODING, check_encoding, text_lines

__all__ = ["CORPUS_FORMATS", "Columns", "read_corpus"]

CORPUS_FORMATS = ("auto", "jsonl", "csv", "tsv", "lines", "plain-lines", "text", "dir")
# Formats by the file's name (lowercased); anything else is told by content.
NAMED_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
                 ".tsv": "tsv", ".tab": "tsv"}
# The delimiters a header is tried with, the format's own first: a CSV
# saved by a spreadsheet in a locale whose decimal mark is a comma uses ";".
DELIMITERS = {"csv": (",", ";", "\t", "|"), "tsv": ("\t",)}
# What a document's key is read from when no column is named: "key", or
# else "id".
KEY_NAMES = ("key", "id")
# A file read as one document with more words than this is most likely a
# corpus of one document per line in a format auto did not recognise.
ONE_DOCUMENT_WARN_WORDS = 10_000
# Cells may hold whole documents: csv's default limit (128 KiB per cell) is
# raised to this once a tabular corpus is read (the limit is per process).
_CELL_LIMIT = 2**31 - 1
# Lines that are not blank read ahead to guess a format (and to warn about
# a table without a header read as one document).
_HEAD_LINES = 5
# label<TAB>text, the label quoted ("news") or a single short word (news).
_LABELLED = re.compile(r'(?:"([^"\t]*)"|([^\s"]{1,64}))\t')
# The advice on naming columns (in parentheses).
COLUMN_ADVICE = ADVICE["columns"]


@dataclass(frozen=True)
class Columns:
    """Which columns (CSV, TSV) or names (JSON Lines) hold a document's key, text and label.

    None takes the default: ``key`` or else ``id``; ``text``; ``label``. A
    name given must be there; a default that is missing means no key (the
    index names the document) or no label. The names are matched exactly,
    or else (in a CSV or TSV header) but for case and the spaces around
    them.

    Parameters
    ----------
    key : str, False or None, default=None
        The key's column; None is ``key``, or else ``id``. False: no key
        column (the index names every document).
    text : str or None, default=None
        The text's column; None is ``text``.
    label : str or None, default=None
        The label's column; None is ``label``.

    Raises
    ------
    ValueError
        If a name is not a non-empty str, or two of them are the same.

    Examples
    --------
    >>> from sobolev_index.ingest.corpus import Columns
    >>> columns = Columns(text="body")
    >>> columns.text_name, columns.named, columns.given
    ('body', ['body'], True)
    >>> Columns().text_name, Columns().given
    ('text', False)
    >>> Columns(key="id", text="id")
    Traceback (most recent call last):
        ...
    ValueError: the key, text and label columns are 'id', 'id' and None; expected three different columns
    """

    key: str = None
    text: str = None
    label: str = None

    def __post_init__(self):
        for part in ("key", "text", "label"):
            value = getattr(self, part)
            if part == "key" and value is False:
                continue  # no key column: the index names every document
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"the {part} column is {value!r}; expected a column name"
                                 + (" (or False: no key column)" if part == "key" else ""))
        given = [v for v in (self.key, self.text, self.label) if isinstance(v, str)]
        if len(set(given)) != len(given):
            raise ValueError(f"the key, text and label columns are {self.key!r}, {self.text!r} "
                             f"and {self.label!r}; expected three different columns")

    @property
    def given(self):
        """bool: Whether any column was named (or the key column turned off)."""
        return any(v is not None for v in (self.key, self.text, self.label))

    @property
    def named(self):
        """list of str: The column names given (a header that has one of them is a header)."""
        return [v for v in (self.key, self.text, self.label) if isinstance(v, str)]

    @property
    def text_name(self):
        """str: The name of the text's column, the one given or ``text``."""
        return self.text or "text"


# ---------------------------------------------------------------- documents
def make_document(key, text, label, fields, where, key_name="key", text_name="text"):
    """A document dict, checked: text without NUL, a key and a label UTF-8
    can store (see :func:`~sobolev_index.ingest.fill.key_text` and
    :func:`~sobolev_index.ingest.fill.label_text`: an integer key, or a
    number as label, is kept as its text), fields no deeper than
    FIELDS_MAX_DEPTH. The point readers check labels and fields alike.
    Messages call the key and text by the names they were read from."""
    if not isinstance(text, str):
        raise CorpusError(f"{where}: {text_name!r} is {type(text).__name__}; expected a string")
    if "\x00" in text:
        raise CorpusError(f"{where}: {text_name!r} holds a NUL character at character "
                          f"{text.index(chr(0)) + 1} (a JSON \\u0000, or binary data); expected "
                          "text without NUL")
    if key is not None:
        key = key_text(key, where, key_name)
    check_fields_depth(fields, where)
    return {"key": key, "text": text, "label": label_text(label, where), "fields": fields or None}


def as_document(doc, position):
    """A document dict in the shape :func:`read_corpus` makes: names other
    than key, text and label go into ``fields``."""
    if isinstance(doc, str):
        return make_document(None, doc, None, None, f"document {position}")
    if not isinstance(doc, dict) or "text" not in doc:
        raise CorpusError(f"document {position} is {doc!r:.60}; expected a str or a dict with 'text'")
    if doc.get("fields") is not None and not isinstance(doc["fields"], dict):
        raise CorpusError(f"document {position}: 'fields' is {type(doc['fields']).__name__} "
                          f"{doc['fields']!r:.40}; expected a dict or None")
    fields = dict(doc.get("fields") or {})
    fields.update({k: v for k, v in doc.items() if k not in ("key", "text", "label", "fields")})
    return make_document(doc.get("key"), doc["text"], doc.get("label"), fields,
                         f"document {position}")


# --------------------------------------------------------------- JSON Lines
def _key_name(names, columns):
    """The name a record's key is read from: the one given, else "key" if
    present, else "id" if present, else None (also for no key column)."""
    if columns.key is False:
        return None
    if columns.key is not None:
        return columns.key
    return next((name for name in KEY_NAMES if name in names), None)


def _read_jsonl(lines, name, columns):
    text_name, label_name = columns.text_name, columns.label or "label"
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name} line {lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{where} is not JSON ({exc.msg} at column {exc.colno}); expected "
                              "JSON Lines: one object per line") from None
        except RecursionError:
            # json.loads recurses once per level of nesting.
            raise CorpusError(f"{where} nests objects and lists too deeply to be read; fields "
                              f"may nest at most {FIELDS_MAX_DEPTH} levels") from None
        if not isinstance(record, dict):
            raise CorpusError(f"{where} is a JSON {type(record).__name__}; expected an object "
                              'like {"key": ..., "text": ..., "label": ...}')
        if text_name not in record:
            raise CorpusError(f"{where} has no {text_name!r} field (it has {sorted(record)}); "
                              f"name the one that holds the text {COLUMN_ADVICE}")
        key_name = _key_name(record, columns)
        if isinstance(columns.key, str) and key_name not in record:
            raise CorpusError(f"{where} has no {key_name!r} field, the key given (it has "
                              f"{sorted(record)})")
        if columns.label is not None and label_name not in record:
            raise CorpusError(f"{where} has no {label_name!r} field, the label given (it has "
                              f"{sorted(record)})")
        used = {text_name, label_name, key_name}
        fields = {k: v for k, v in record.items() if k not in used}
        yield make_document(record.get(key_name) if key_name else None, record[text_name],
                            record.get(label_name), fields, where, key_name or "key", text_name)


# ----------------------------------------------------------------- CSV, TSV
def _find_column(header, wanted):
    """The position of column ``wanted`` in ``header``: the exact name,
    else the one name equal to it but for case and spaces around it; None
    when there is none."""
    if wanted in header:
        if header.count(wanted) > 1:
            return "twice"
        return header.index(wanted)
    folded = [cell.strip().casefold() for cell in header]
    matches = [i for i, cell in enumerate(folded) if cell == wanted.strip().casefold()]
    if len(matches) == 1:
        return matches[0]
    return "twice" if matches else None


def _header_cells(line, delimiter):
    try:
        return next(csv.reader([line], **_dialect("csv", delimiter)), [])
    except csv.Error:
        return []


def _dialect(fmt, delimiter):
    """The csv module's options for a format. Cells may be quoted (pandas,
    R, spreadsheets and Python's csv quote a cell that holds the delimiter,
    a quote or a newline, in CSV and TSV alike), and a quote that does not
    close right before a delimiter or a line's end is an error. In CSV,
    spaces after a delimiter ("a, b") are not part of the next cell."""
    if fmt == "tsv":
        return {"delimiter": delimiter, "strict": True}
    return {"delimiter": delimiter, "skipinitialspace": True, "strict": True}


def _delimiter_of(line, fmt, columns):
    """The delimiter with which ``line`` is a header holding the text column,
    trying the format's own first; None when no delimiter makes it one."""
    for delimiter in DELIMITERS[fmt]:
        cells = _header_cells(line, delimiter)
        if len(cells) >= 2 and isinstance(_find_column(cells, columns.text_name), int):
            return delimiter
    return None


def _shown_cells(cells, limit=8):
    shown = ", ".join(repr(c[:40]) for c in cells[:limit])
    return shown + (f", ... ({len(cells)} in all)" if len(cells) > limit else "")


def _columns_of(header, name, fmt, columns):
    """(key, text, label) positions in ``header`` and the names of the
    other columns, or a CorpusError that names what is missing."""
    what = "CSV" if fmt == "csv" else "TSV"
    text = _find_column(header, columns.text_name)
    if text == "twice":
        raise CorpusError(f"{name}: the header names the text column {columns.text_name!r} more "
                          f"than once ({_shown_cells(header)}); expected it once")
    if text is None:
        lines = (" A file of label<TAB>text lines without a header "
                 f"{ADVICE['format_lines']}." if fmt == "tsv" else "")
        raise CorpusError(
            f"{name} has no column {columns.text_name!r} (its first row: {_shown_cells(header)}); "
            f"a {what} corpus needs a header row that names its columns, one of them the text: "
            f"add one, or name the column that holds the text {COLUMN_ADVICE}.{lines}")
    positions = {"text": text}
    for part, default_names in (("key", KEY_NAMES), ("label", ("label",))):
        given = getattr(columns, part)
        if given is False:
            continue  # no key column
        candidates = (given,) if given is not None else default_names
        for wanted in candidates:
            found = _find_column(header, wanted)
            if found == "twice":
                raise CorpusError(f"{name}: the header names the {part} column {wanted!r} more "
                                  f"than once ({_shown_cells(header)}); expected it once")
            if found is not None:
                positions[part] = found
                break
        else:
            if given is not None:
                raise CorpusError(f"{name} has no column {given!r}, the {part} column given (its "
                                  f"header: {_shown_cells(header)})")
    taken = set(positions.values())
    if len(taken) != len(positions):
        raise CorpusError(f"{name}: the key, text and label columns are the same column of its "
                          f"header ({_shown_cells(header)}); expected different columns")
    others = {}
    for i, cell in enumerate(header):
        if i in taken:
            continue
        # A spreadsheet's or pandas' unnamed column (an index) gets a name.
        field = cell.strip() or f"column_{i + 1}"
        if field in others.values():
            raise CorpusError(f"{name}: the header names column {field!r} more than once "
                              f"({_shown_cells(header)}); expected every column once")
        others[i] = field
    return positions.get("key"), text, positions.get("label"), others


def _read_tabular(lines, name, fmt, columns, delimiter=None):
    """Rows of a CSV or TSV file after its header row, as documents."""
    if csv.field_size_limit() < _CELL_LIMIT:
        csv.field_size_limit(_CELL_LIMIT)
    lines = iter(lines)
    head = []
    for line in lines:  # the header: the first line that is not blank
        head.append(line)
        if line.strip():
            break
    if not head or not head[-1].strip():
        return  # an empty file holds no documents
    if delimiter is None:
        delimiter = _delimiter_of(head[-1], fmt, columns) or DELIMITERS[fmt][0]
    reader = csv.reader(itertools.chain(head, lines), **_dialect(fmt, delimiter))
    header = None
    while True:
        first = reader.line_num + 1  # the line the next row starts on
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CorpusError(
                f"{name} line {first} is not valid {fmt.upper()} ({exc}); a cell that holds "
                f"the delimiter {delimiter!r}, a quote or a newline must be quoted, with the "
                "quotes inside it doubled") from None
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if header is None:
            header = row
            key, text, label, others = _columns_of(header, name, fmt, columns)
            continue
        where = f"{name} line {first}"
        if len(row) != len(header):
            raise CorpusError(
                f"{where} has {len(row)} cells; its header has {len(header)} "
                f"({_shown_cells(header)}): quote a cell that holds the delimiter {delimiter!r}")
        if fmt == "tsv" and reader.line_num - first > 0:
            # A row over several lines: a quoted cell with newlines. One that
            # also holds TABs is most likely a quote that was text (TSV is
            # often written without quoting) and ran over the rows after it.
            runaway = next((i for i, cell in enumerate(row) if "\n" in cell and "\t" in cell),
                           None)
            if runaway is not None:
                raise CorpusError(
                    f"{where}: the quoted cell {header[runaway]!r} runs over lines "
                    f"{first}-{reader.line_num} and holds TABs; a quote at the start of a TSV "
                    "cell opens a quoted cell, so a quote that is part of a text must be inside "
                    "a quoted cell, doubled (as pandas and Python's csv module write it)")
        # Spaces around a key or label are never meant (" pos" would not
        # match --label pos).
        doc_key = row[key].strip() if key is not None else None
        if key is not None and not doc_key:
            raise CorpusError(f"{where}: the key cell ({header[key]!r}) is empty; expected "
                              "a key on every row")
        doc_label = (row[label].strip() or None) if label is not None else None
        fields = {field: row[i] for i, field in others.items()}
        yield make_document(doc_key, row[text], doc_label, fields, where,
                            header[key] if key is not None else "key", header[text])


# -------------------------------------------------------- the other formats
def _read_lines(lines, name, stem):
    """``"label"<TAB>text`` or ``label<TAB>text`` per line; key
    ``<stem>-<line number>``."""
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        found = _LABELLED.match(line)
        if found is None:
            raise CorpusError(f'{name} line {lineno} does not start with a label and a TAB '
                              f'("label"<TAB>text or label<TAB>text); got {line[:40]!r}')
        label = found.group(1) if found.group(1) is not None else found.group(2)
        yield make_document(f"{stem}-{lineno}", line[found.end():], label, None,
                            f"{name} line {lineno}")


def _read_plain_lines(lines, name, stem):
    """Every non-empty line a document without a label; key ``<stem>-<line number>``."""
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if line.strip():
            yield make_document(f"{stem}-{lineno}", line, None, None, f"{name} line {lineno}")


def _one_document(stem, text, name, sniffed, first_lines=()):
    if sniffed:
        delimiter = _looks_tabular([line for line in first_lines if line and line.strip()])
        if delimiter is not None:
            what = "TSV" if delimiter == "\t" else "CSV"
            warnings.warn(
                f"{name} is read as one document, but its first lines look like {what} rows "
                f"(cells split by {delimiter!r}); a {what} corpus needs a header row that names "
                "its columns, one of them 'text' (and format 'csv' or 'tsv' when the file's name "
                "does not end in .csv or .tsv; --format on the command line)",
                UserWarning, stacklevel=4)
        elif len(text.split()) > ONE_DOCUMENT_WARN_WORDS:
            warnings.warn(
                f"{name} is read as one document of {len(text.split()):,} words; if it holds one "
                f"document per line, give its format {ADVICE['format']}", UserWarning,
                stacklevel=4)
    return make_document(stem, text, None, None, name)


def _read_directory(root, encoding):
    paths = []
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        paths.extend(os.path.join(directory, f) for f in sorted(files) if f.endswith(".txt"))
    if not paths:
        raise CorpusError(f"{root} holds no .txt files")
    for path in paths:
        relative = os.path.relpath(path, root)
        parts = relative.split(os.sep)
        text = "".join(text_lines(path, encoding))
        yield make_document(relative[:-4], text, parts[0] if len(parts) > 1 else None, None, path)


# ------------------------------------------------------------ the format
def format_by_name(name):
    """The format a file's name gives (see NAMED_FORMATS), or None."""
    lowered = name.lower()
    return next((fmt for suffix, fmt in NAMED_FORMATS.items() if lowered.endswith(suffix)), None)


def _names_header(cells, columns):
    """Whether ``cells`` (a first line split by a delimiter) are the header
    of a CSV or TSV corpus whose file name says nothing: short names on one
    line (an empty one too: pandas' unnamed index column) with the text
    column among them, and another column the reader knows (key, id, label,
    or a column given), or a text column the user named. Prose whose first
    line holds the word "text" between commas is not a header."""
    if len(cells) < 2 or not isinstance(_find_column(cells, columns.text_name), int):
        return False
    if not all(len(cell.strip()) <= 64 and not set(cell) & set('"\t\r\n') for cell in cells):
        return False
    if columns.text is not None:
        return True
    known = [name for name in (*KEY_NAMES, "label", *columns.named) if name != columns.text_name]
    return any(isinstance(_find_column(cells, name), int) for name in known)


def _format_by_content(first, plain, columns):
    """(format, delimiter) from the first line that is not blank."""
    stripped = first.lstrip("\ufeff").lstrip()
    if stripped.startswith("{"):
        return "jsonl", None
    for fmt, delimiters in (("tsv", ("\t",)), ("csv", (",", ";", "|"))):
        for delimiter in delimiters:
            if _names_header(_header_cells(first, delimiter), columns):
                return fmt, delimiter
    if _LABELLED.match(first) is not None:
        return "lines", None
    return plain, None


def _looks_tabular(lines):
    """The delimiter with which the first lines of a text split into the
    same number (two or more) of cells each, or None: a CSV or TSV without a
    header row, read whole as one document."""
    for delimiter in ("\t", ",", ";"):
        counts = {len(_header_cells(line, delimiter)) for line in lines}
        if len(lines) >= 2 and len(counts) == 1 and counts.pop() >= 2:
            return delimiter
    return None


def _check_columns_apply(fmt, name, columns):
    if columns.given and fmt not in ("jsonl", "csv", "tsv"):
        raise CorpusError(f"{name} is read as format {fmt!r}, which has no columns; the key, "
                          "text and label columns apply to jsonl, csv and tsv files")


def read_corpus(source, format="auto", plain="text", encoding=DEFAULT_ENCODING, *,
                key_column=None, text_column=None, label_column=None):
    """Read the documents of a corpus file, directory or stream, one dict at a time.

    A document is ``{"key", "text", "label", "fields"}`` (key None: the
    index names it). The formats are those of the module's docstring;
    ``"auto"`` tells them apart by the file's name, then by its first line.
    When ``id`` is the key it is not a field; when both ``key`` and ``id``
    are there, ``key`` is the key and ``id`` a field.

    Files and stdin are decoded from ``encoding``, a byte-order mark
    dropped. Bytes that do not decode are a :class:`CorpusError` naming the
    file, line and byte offset, and so is a NUL character (a binary file, or
    UTF-16 read as UTF-8): nothing is replaced silently.

    This is a generator: nothing is checked or read, not even the options,
    until the first document is asked for.

    Parameters
    ----------
    source : str, path-like, or list or tuple of them
        A corpus file or directory, ``"-"`` for standard input, or a list of
        them, read in order.
    format : str, default="auto"
        One of :data:`CORPUS_FORMATS`: ``"auto"``, ``"jsonl"``, ``"csv"``,
        ``"tsv"``, ``"lines"`` (label<TAB>text), ``"plain-lines"``,
        ``"text"`` (one document per file) or ``"dir"``.
    plain : {"text", "plain-lines"}, default="text"
        How ``"auto"`` reads plain text: one document per file, or one per
        line (as search queries are). A file read whole as one very long
        document, or one that looks like a table without a header, gets a
        warning that names the formats.
    encoding : str, default="utf-8"
        The text encoding the files and stdin are decoded from (any Python
        text codec).
    key_column : str, False or None, default=None
        The column of a CSV or TSV file, or the name of a JSON Lines record,
        that holds the key; None is ``key``, or else ``id`` (without either
        the index names the documents); False: no key column.
    text_column : str or None, default=None
        The one that holds the text; None is ``text``.
    label_column : str or None, default=None
        The one that holds the label; None is ``label``. The other columns
        are kept as fields.

    Yields
    ------
    dict
        ``{"key", "text", "label", "fields"}`` per document, in file order;
        ``fields`` is None when there are none.

    Raises
    ------
    ValueError
        If ``format``, ``plain``, ``encoding`` or a column name is not
        valid.
    CorpusError
        If a source does not exist, does not fit its format (the message
        names the file and line), a column given is missing, or the column
        names are given for a format without columns.

    Warns
    -----
    UserWarning
        When ``"auto"`` reads a file whole as one document that looks like a
        table without a header, or has more than 10,000 words.

    Examples
    --------
    >>> from sobolev_index.ingest.corpus import read_corpus
    >>> with open("corpus.jsonl", "w", encoding="utf-8") as f:
    ...     print('{"id": 7, "text": "first document", "label": "a", "year": 2020}', file=f)
    ...     print('{"id": 8, "text": "second one"}', file=f)
    >>> for doc in read_corpus("corpus.jsonl"):
    ...     print(doc)
    {'key': '7', 'text': 'first document', 'label': 'a', 'fields': {'year': 2020}}
    {'key': '8', 'text': 'second one', 'label': None, 'fields': None}

    A CSV file whose columns have other names:

    >>> with open("notes.csv", "w", encoding="utf-8") as f:
    ...     print("name,body,topic", file=f)
    ...     print('n1,"one, two",x', file=f)
    >>> list(read_corpus("notes.csv", key_column="name", text_column="body",
    ...                  label_column="topic"))
    [{'key': 'n1', 'text': 'one, two', 'label': 'x', 'fields': None}]

    Plain text, one document per file or one per line:

    >>> with open("queries.txt", "w", encoding="utf-8") as f:
    ...     print("cheap flights", file=f)
    ...     print("hotels near the sea", file=f)
    >>> [doc["key"] for doc in read_corpus("queries.txt")]
    ['queries']
    >>> [(doc["key"], doc["text"]) for doc in read_corpus("queries.txt", plain="plain-lines")]
    [('queries-1', 'cheap flights'), ('queries-2', 'hotels near the sea')]
    """
    if format not in CORPUS_FORMATS:
        raise ValueError(f"format is {format!r}; expected one of {', '.join(CORPUS_FORMATS)}")
    if plain not in ("text", "plain-lines"):
        raise ValueError(f"plain is {plain!r}; expected 'text' or 'plain-lines'")
    check_encoding(encoding)
    columns = Columns(key_column, text_column, label_column)
    if isinstance(source, (list, tuple)):
        for item in source:
            yield from _read_source(item, format, plain, encoding, columns)
        return
    yield from _read_source(source, format, plain, encoding, columns)


def _read_source(source, format, plain, encoding, columns):
    source = os.fspath(source)
    if source == "-":
        name, stem = "<stdin>", "stdin"
    else:
        if not os.path.exists(source):
            raise CorpusError(f"{source} does not exist; expected a corpus file or directory")
        if os.path.isdir(source):
            if format not in ("auto", "dir"):
                raise CorpusError(f"{source} is a directory; format {format!r} needs a file")
            _check_columns_apply("dir", source, columns)
            yield from _read_directory(source, encoding)
            return
        if format == "dir":
            raise CorpusError(f"{source} is a file; format 'dir' needs a directory of .txt files")
        name = os.path.basename(source)
        stem = os.path.splitext(name)[0]
    sniffed = format == "auto"
    if sniffed and source != "-":
        format = format_by_name(name) or "auto"
    # One reading of the input, from its start: a pipe cannot be read twice.
    lines = text_lines(source, encoding)
    try:
        stream, delimiter, found = lines, None, []
        if format == "auto":
            # The first lines that are not blank tell the format (and whether
            # a text read whole looks like a table); they are read again
            # from memory.
            head = []
            for line in lines:
                head.append(line)
                if line.strip():
                    found.append(line)
                    if len(found) == _HEAD_LINES:
                        break
            format, delimiter = _format_by_content(found[0] if found else "", plain, columns)
            stream = itertools.chain(head, lines)
        _check_columns_apply(format, name, columns)
        if format == "jsonl":
            yield from _read_jsonl(stream, name, columns)
        elif format in ("csv", "tsv"):
            yield from _read_tabular(stream, name, format, columns, delimiter)
        elif format == "lines":
            yield from _read_lines(stream, name, stem)
        elif format == "plain-lines":
            yield from _read_plain_lines(stream, name, stem)
        else:
            text = "".join(stream)
            if text.strip():  # an empty or blank input holds no document
                yield _one_document(stem, text, name, sniffed, found)
    finally:
        lines.close()
