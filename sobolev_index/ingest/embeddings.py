"""Word vectors: the container shared by the readers and the pipeline, and
readers for the usual word-vector file formats.

Formats (``format=`` names):

- ``"word2vec-bin"``: the binary format of the original word2vec tool and of
  the GoogleNews vectors. A header line ``"<count> <dim>\\n"``, then per word
  its UTF-8 bytes, a space and ``dim`` little-endian float32 values. Writers
  differ on whitespace between records (word2vec writes a newline after each
  vector), so whitespace before a word is skipped.
- ``"word2vec-text"``: word2vec and fastText ``.vec`` text. A header line
  ``"<count> <dim>"``, then ``"word v1 ... vdim"`` per line.
- ``"glove"``: the same lines without a header; the first line gives the
  dimension.
- ``"npy"``: a 2-D ``.npy`` array and a vocabulary file with one word per line
  (row i of the array is line i; fields after the word, such as counts, are
  ignored).

Text files may be gzip-compressed. Given the words wanted, every reader streams
the file and keeps only their vectors, so memory grows with the words kept and
not with the file (the GoogleNews file is 3.6 GB).
"""
import contextlib
import gzip
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import VectorFileError
from .inputs import is_stream, regular_file
from .parsing import is_number

__all__ = [
    "VECTOR_FORMATS",
    "WordVectors",
    "load_vectors",
    "vector_file_info",
    "write_word2vec_binary",
    "write_word2vec_text",
]

VECTOR_FORMATS = ("word2vec-bin", "word2vec-text", "glove", "npy")


@dataclass(frozen=True)
class WordVectors:
    """Distinct words and their vectors, one row per word.

    The container every reader returns and every ``vectors=`` argument of
    the text pipeline takes. It is frozen; ``len(vectors)`` is the number of
    words and ``word in vectors`` tells whether a word has a vector.

    Parameters
    ----------
    words : sequence of str
        The words, distinct; kept as a list.
    vectors : array-like of shape (len(words), dim)
        Row i is the vector of ``words[i]``. Stored C-contiguous, as
        ``dtype``.
    dtype : floating dtype, default=np.float32
        The dtype of the stored vectors; integer and other non-floating
        dtypes are refused.

    Raises
    ------
    ValueError
        If ``dtype`` is not a floating-point dtype, ``vectors`` is not 2-D
        with one row per word, or the words are not distinct.

    See Also
    --------
    load_vectors : Word vectors from a file.
    write_word2vec_text : Word vectors to a text file.

    Examples
    --------
    >>> from sobolev_index.ingest.embeddings import WordVectors
    >>> vectors = WordVectors(["cat", "dog", "car"], [[0.0, 1.0], [0.25, 1.0], [1.0, 0.0]])
    >>> len(vectors), vectors.dim, "dog" in vectors, vectors.vectors.dtype
    (3, 2, True, dtype('float32'))
    >>> vectors.index_of("car"), vectors.index_of("bus")
    (2, -1)
    >>> WordVectors(["cat", "cat"], [[0.0, 1.0], [1.0, 0.0]])
    Traceback (most recent call last):
        ...
    ValueError: words are not distinct
    """

    words: list
    vectors: np.ndarray
    dtype: object = field(default=np.float32, repr=False, compare=False)
    _index: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        dtype = np.dtype(self.dtype)
        if dtype.kind != "f":
            raise ValueError(f"dtype is {dtype}; expected a floating-point dtype such as float32")
        vectors = np.ascontiguousarray(self.vectors, dtype=dtype)
        if vectors.ndim != 2 or vectors.shape[0] != len(self.words):
            raise ValueError(
                f"vectors have shape {vectors.shape}; expected ({len(self.words)}, dim)")
        index = {word: i for i, word in enumerate(self.words)}
        if len(index) != len(self.words):
            raise ValueError("words are not distinct")
        object.__setattr__(self, "vectors", vectors)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "words", list(self.words))
        object.__setattr__(self, "_index", index)

    def __len__(self):
        return len(self.words)

    def __contains__(self, word):
        return word in self._index

    @property
    def dim(self):
        """int: The dimension of the vectors (their number of columns)."""
        return self.vectors.shape[1]

    def index_of(self, word):
        """The row of ``word`` in :attr:`vectors`.

        Parameters
        ----------
        word : str
            The word looked up, exactly as stored.

        Returns
        -------
        int
            Its row, or -1 if it has no vector.
        """
        return self._index.get(word, -1)

    def subset(self, words):
        """The vectors of those of ``words`` that have one.

        Parameters
        ----------
        words : iterable of str
            The words wanted; those without a vector are left out.

        Returns
        -------
        WordVectors
            A new container of the words found, in the order of ``words``
            (a word given twice is refused as not distinct), with this one's
            dtype.

        Examples
        --------
        >>> from sobolev_index.ingest.embeddings import WordVectors
        >>> vectors = WordVectors(["cat", "dog", "car"], [[0.0, 1.0], [0.25, 1.0], [1.0, 0.0]])
        >>> some = vectors.subset(["car", "bus", "cat"])
        >>> some.words, some.vectors.tolist()
        (['car', 'cat'], [[1.0, 0.0], [0.0, 1.0]])
        """
        rows = [self._index[w] for w in words if w in self._index]
        return WordVectors([self.words[r] for r in rows], self.vectors[rows], dtype=self.dtype)


# Reads of 1 MB keep the per-call overhead negligible next to the copying, and
# the same step paces the progress callback.
_CHUNK = 1 << 20
_PROGRESS_STEP = 1 << 20
# A "word" longer than this is a misaligned or corrupt record, not a word.
_MAX_WORD_BYTES = 1 << 16
_MAX_HEADER_BYTES = 4096
_SNIFF_BYTES = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"
_NPY_MAGIC = b"\x93NUMPY"
_BOM = b"\xef\xbb\xbf"
# Control bytes that text files do not contain but float32 data nearly always
# does (a 300-d vector has 1200 bytes, each one of these with odds 1 in 9).
_BINARY_BYTES = frozenset(set(range(32)) - {9, 10, 13}) | {127}


def _decode(raw):
    # GoogleNews has a few words that are not valid UTF-8; latin-1 decodes any
    # bytes, so such words stay readable instead of failing the whole load.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _word(raw, fold_case):
    """A word of the file as matched against the words wanted."""
    word = _decode(raw)
    return word.lower() if fold_case else word


def _show(raw, limit=60):
    text = _decode(bytes(raw[:limit]))
    return repr(text) + ("..." if len(raw) > limit else "")


class _Source:
    """An open vector file, transparently gunzipped, that knows how far into
    the file on disk it has read (for progress bars sized by the file)."""

    def __init__(self, path):
        self.path = Path(path)
        if self.path.is_dir():
            raise IsADirectoryError(f"{self.path} is a directory; expected a word-vector file")
        try:
            self.raw = open(self.path, "rb")
        except FileNotFoundError:
            raise FileNotFoundError(f"word-vector file {self.path} does not exist") from None
        self.gzipped = self.raw.read(2) == _GZIP_MAGIC
        self.raw.seek(0)
        self.file = gzip.GzipFile(fileobj=self.raw, mode="rb") if self.gzipped else self.raw
        self.size = None if self.gzipped else os.fstat(self.raw.fileno()).st_size

    def disk_position(self, position):
        """Bytes of the file on disk behind ``position`` bytes of content."""
        return self.raw.tell() if self.gzipped else position

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.gzipped:
            self.file.close()
        self.raw.close()


def _header(line):
    """(count, dim) if ``line`` is exactly two non-negative integers, else None."""
    fields = line.split()
    if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
        return int(fields[0]), int(fields[1])
    return None


def _parse_header(line, path, where):
    parsed = _header(line)
    if parsed is None or parsed[1] < 1:
        raise VectorFileError(
            f"{path}: {where} the header is {_show(line)}; expected '<count> <dim>', two "
            f"integers with dim >= 1")
    return parsed


def _check_format(format):
    if format != "auto" and format not in VECTOR_FORMATS:
        choices = ", ".join(repr(f) for f in ("auto",) + VECTOR_FORMATS)
        raise ValueError(f"format {format!r} is not one of {choices}")


def _resolved_format(path, format):
    """``format``, or for "auto" the format of the file at ``path``."""
    if format != "auto":
        return format
    if not path.exists():
        raise FileNotFoundError(f"word-vector file {path} does not exist")
    return _detect_format(path)


def _detect_format(path):
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".npy"):
        return "npy"
    if name.endswith(".bin"):
        return "word2vec-bin"
    with _Source(path) as source:
        head = source.file.read(_SNIFF_BYTES)
    if not head:
        raise VectorFileError(f"{path} is empty; expected a word-vector file")
    if head.startswith(_NPY_MAGIC):
        return "npy"
    first, _, rest = head.partition(b"\n")
    if _header(first.removeprefix(_BOM)) is None:
        return "glove"
    if _BINARY_BYTES.intersection(rest[:4096]):
        return "word2vec-bin"
    return "word2vec-text"


def _npy_vocab(path, vocab):
    if vocab is not None:
        vocab = Path(vocab)
        if not vocab.is_file():
            raise FileNotFoundError(f"vocabulary file {vocab} for {path} does not exist")
        return vocab
    stem = path.with_suffix("")
    candidates = [stem.with_name(stem.name + suffix) for suffix in (".vocab", ".txt")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no vocabulary file for {path}: pass vocab=, or put one word per line (row i of "
        f"the array on line i) in {candidates[0]} or {candidates[1]}")


class _Rows:
    """Vectors appended one at a time into blocks of about 1 MB, so memory
    follows the rows kept without one big reallocation, and the finiteness
    check needs no array as large as the result."""

    def __init__(self, dim, dtype):
        self.dim = dim
        self.dtype = np.dtype(dtype)
        self.block_rows = max(1, _CHUNK // (dim * self.dtype.itemsize))
        self.blocks = []
        self.n = 0
        self._block = None
        self._i = self.block_rows

    def append(self, vector):
        if self._i == self.block_rows:
            self._block = np.empty((self.block_rows, self.dim), self.dtype)
            self.blocks.append(self._block)
            self._i = 0
        self._block[self._i] = vector
        self._i += 1
        self.n += 1

    def first_nonfinite(self):
        """Index of the first row with a nan or inf, or -1."""
        for b, block in enumerate(self.blocks):
            rows = self.block_rows if b < len(self.blocks) - 1 else self._i
            bad = np.flatnonzero(~np.isfinite(block[:rows]).all(axis=1))
            if len(bad):
                return b * self.block_rows + int(bad[0])
        return -1

    def array(self):
        if len(self.blocks) == 1:
            return self.blocks[0][: self.n]
        out = np.empty((self.n, self.dim), self.dtype)
        for b, block in enumerate(self.blocks):
            start = b * self.block_rows
            out[start:start + len(block)] = block[: self.n - start]
            self.blocks[b] = None  # free each block once copied
        return out


def _finish(path, words, rows, where, dtype):
    bad = rows.first_nonfinite()
    if bad >= 0:
        raise VectorFileError(
            f"{path}: {where(bad)} the vector of {words[bad]!r} has a non-finite value (nan "
            f"or inf); expected finite numbers")
    return WordVectors(words, rows.array(), dtype=dtype)


def _read_word2vec_binary(source, wanted, fold_case, dtype, progress):
    path, f = source.path, source.file
    buf = f.read(_MAX_HEADER_BYTES)
    if not buf:
        raise VectorFileError(f"{path} is empty; expected a word2vec binary file starting "
                              f"with a '<count> <dim>' header line")
    newline = buf.find(b"\n")
    if newline < 0:
        raise VectorFileError(f"{path}: at byte offset 0 there is no header line within "
                              f"{len(buf)} bytes; expected '<count> <dim>\\n'")
    count, dim = _parse_header(buf[:newline], path, "at byte offset 0")
    nbytes = 4 * dim
    rows = _Rows(dim, dtype)
    words, offsets, seen = [], array("q"), set()
    n_wanted = -1 if wanted is None else len(wanted)
    base, pos = 0, newline + 1  # buf[0] is byte `base` of the content
    next_report = _PROGRESS_STEP
    record = 0
    while record < count and len(words) != n_wanted:
        space = buf.find(b" ", pos)
        if space < 0:
            if len(buf) - pos > _MAX_WORD_BYTES:
                raise VectorFileError(
                    f"{path}: at byte offset {base + pos} (word {record + 1} of {count}) no "
                    f"space follows within {_MAX_WORD_BYTES} bytes; expected a word, a space "
                    f"and {nbytes} bytes of vector")
            chunk = f.read(_CHUNK)
            if not chunk:
                tail = buf[pos:]
                if tail.strip():
                    start = base + pos + len(tail) - len(tail.lstrip())
                    raise VectorFileError(
                        f"{path}: truncated record at byte offset {start} (word {record + 1} "
                        f"of {count}): expected a word, a space and {nbytes} bytes of vector; "
                        f"the file ends after {_show(tail.lstrip())}")
                raise VectorFileError(
                    f"{path}: the file ends at byte offset {base + len(buf)} after {record} "
                    f"words; expected {count} (the header says {count})")
            buf = buf[pos:] + chunk
            base += pos
            pos = 0
            if progress is not None and base >= next_report:
                progress(source.disk_position(base))
                next_report = base + _PROGRESS_STEP
            continue
        raw = buf[pos:space].lstrip()
        if not raw:  # whitespace (e.g. word2vec's newline) before the word
            pos = space + 1
            continue
        start = space + 1
        end = start + nbytes
        word = _word(raw, fold_case)
        keep = (wanted is None or word in wanted) and word not in seen
        if keep:
            seen.add(word)
            words.append(word)
            offsets.append(base + space - len(raw))
        if end <= len(buf):
            if keep:
                rows.append(np.frombuffer(buf, "<f4", dim, start))
            pos = end
        else:
            # The vector runs past the buffer: read just its rest, or seek past it.
            have = len(buf) - start
            if keep:
                data = buf[start:] + f.read(nbytes - have)
                found = len(data)
            else:
                f.seek(nbytes - have, os.SEEK_CUR)
                target = base + end
                found = nbytes - (target - (source.size if source.size is not None
                                            else f.tell()))
            if found < nbytes:
                raise VectorFileError(
                    f"{path}: truncated record at byte offset {base + space - len(raw)} (word "
                    f"{record + 1} of {count}, {_show(raw)}): expected {nbytes} bytes of "
                    f"vector after the word, found {max(found, 0)}")
            if keep:
                rows.append(np.frombuffer(data, "<f4", dim))
            base += end
            buf, pos = b"", 0
            if progress is not None and base >= next_report:
                progress(source.disk_position(base))
                next_report = base + _PROGRESS_STEP
        record += 1
    if record == count:
        tail = buf[pos:] + f.read(_MAX_HEADER_BYTES)
        if tail.strip():
            extra = base + pos + len(tail) - len(tail.lstrip())
            raise VectorFileError(
                f"{path}: more data follows the last of the {count} words at byte offset "
                f"{extra}; expected the end of the file (the header says {count} words)")
    if progress is not None:
        progress(source.disk_position(base + pos))
    return _finish(path, words, rows, lambda i: f"at byte offset {offsets[i]}", dtype)


def _parse_line(line, dim, path, line_no, note):
    """(word bytes, float64 values) of a text line with ``dim`` values."""
    # Splitting from the right keeps a word that contains spaces whole (GloVe
    # 840B has a few, such as ". . .").
    fields = line.rsplit(None, dim)
    n_values = len(fields) - 1
    if n_values == dim:
        head = fields[0].split()
        if len(head) > 1 and all(is_number(token) for token in head[1:]):
            n_values = dim + len(head) - 1
    if n_values != dim:
        raise VectorFileError(
            f"{path}: line {line_no} has {n_values} values; expected {dim} ({note})")
    word = fields[0].strip()
    try:
        values = np.array(fields[1:], dtype=np.float64)
    except ValueError:
        for i, token in enumerate(fields[1:]):
            if not is_number(token):
                raise VectorFileError(
                    f"{path}: line {line_no}: value {i + 1} of {_show(word)} is "
                    f"{_show(token)}; expected a number") from None
        raise
    return word, values


def _read_text(source, fmt, wanted, fold_case, dtype, progress):
    path, f = source.path, source.file
    count = dim = rows = None
    note = ""
    words, lines, seen = [], array("q"), set()
    n_wanted = -1 if wanted is None else len(wanted)
    line_no = records = consumed = 0
    next_report = _PROGRESS_STEP
    stopped = False
    for line in f:
        line_no += 1
        consumed += len(line)
        if progress is not None and consumed >= next_report:
            progress(source.disk_position(consumed))
            next_report = consumed + _PROGRESS_STEP
        if line_no == 1:
            line = line.removeprefix(_BOM)
            if fmt == "word2vec-text":
                count, dim = _parse_header(line, path, "line 1:")
                note = f"the header says {dim}"
                rows = _Rows(dim, dtype)
                continue
        first = line.split(None, 1)
        if not first:
            continue  # blank lines carry no vector
        if dim is None:
            dim = len(line.split()) - 1
            if dim < 1:
                raise VectorFileError(
                    f"{path}: line {line_no} has a word and no values; expected a word "
                    f"followed by its vector")
            note = f"line {line_no} has {dim}"
            rows = _Rows(dim, dtype)
        if len(words) == n_wanted:
            stopped = True
            break
        records += 1
        if count is not None and records > count:
            raise VectorFileError(
                f"{path}: line {line_no} is word {records}, but the header says {count} "
                f"words; expected the end of the file")
        if wanted is not None:
            # Only lines whose first field is wanted are parsed: this keeps a
            # pass over a large file to a split per line.
            if _word(first[0], fold_case) not in wanted:
                continue
        raw, values = _parse_line(line, dim, path, line_no, note)
        word = _word(raw, fold_case)
        if (wanted is None or word in wanted) and word not in seen:
            seen.add(word)
            words.append(word)
            lines.append(line_no)
            rows.append(values)
    if dim is None:
        raise VectorFileError(f"{path} has no vectors (it is empty or blank); expected "
                              f"'word v1 ... vdim' lines")
    if count is not None and not stopped and records != count:
        raise VectorFileError(
            f"{path}: the file ends at line {line_no} after {records} words; expected "
            f"{count} (the header says {count})")
    if progress is not None:
        progress(source.disk_position(consumed))
    return _finish(path, words, rows, lambda i: f"line {lines[i]}:", dtype)


def _load_npy(path):
    try:
        data = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise FileNotFoundError(f"word-vector file {path} does not exist") from None
    except (ValueError, OSError, EOFError) as exc:
        raise VectorFileError(f"{path} is not a readable .npy array: {exc}") from None
    if not isinstance(data, np.ndarray) or data.ndim != 2:
        shape = getattr(data, "shape", None)
        raise VectorFileError(f"{path} holds an array of shape {shape}; expected a 2-D "
                              f"(words, dim) array")
    if data.dtype.kind not in "fiu":
        raise VectorFileError(f"{path} holds {data.dtype} values; expected numbers")
    return data


def _read_npy(path, vocab, wanted, fold_case, dtype, progress):
    data = _load_npy(path)
    vocab = _npy_vocab(path, vocab)
    n_rows, dim = data.shape
    selected, words, seen = [], [], set()
    line_no = blank = 0
    with open(vocab, "rb") as handle:
        for line_no, line in enumerate(handle, 1):
            fields = (line.removeprefix(_BOM) if line_no == 1 else line).split(None, 1)
            if not fields:
                blank = blank or line_no
                continue
            if blank:
                # Rows are matched to lines by position, so an inner blank line
                # would shift every later word onto the wrong vector.
                raise VectorFileError(
                    f"{vocab}: line {blank} is blank; expected a word (row {blank - 1} of "
                    f"{path})")
            word = _word(fields[0], fold_case)
            if (wanted is None or word in wanted) and word not in seen:
                seen.add(word)
                words.append(word)
                selected.append(line_no - 1)
    n_words = (blank - 1) if blank else line_no
    if n_words != n_rows:
        raise VectorFileError(
            f"{vocab} has {n_words} words but {path} has {n_rows} rows (of dim {dim}); "
            f"expected one word per row")
    out = np.empty((len(selected), dim), dtype)
    row_bytes = dim * data.dtype.itemsize
    offset = getattr(data, "offset", 0)
    step = max(1, _PROGRESS_STEP // row_bytes)
    for start in range(0, len(selected), step):
        chunk = selected[start:start + step]
        # Fancy indexing a memory map reads only the rows asked for.
        block = out[start:start + len(chunk)]
        block[...] = data[chunk]
        bad = np.flatnonzero(~np.isfinite(block).all(axis=1))
        if len(bad):
            i = start + int(bad[0])
            raise VectorFileError(
                f"{path}: row {selected[i]} (line {selected[i] + 1} of {vocab}): the vector "
                f"of {words[i]!r} has a non-finite value (nan or inf); expected finite numbers")
        if progress is not None:
            progress(offset + (chunk[-1] + 1) * row_bytes)
    del data
    if progress is not None:
        progress(path.stat().st_size)
    return WordVectors(words, out, dtype=dtype)


def load_vectors(path, words=None, *, format="auto", vocab=None, fold_case=False,
                 dtype=np.float32, progress=None):
    r"""Read word vectors from a file, keeping only ``words`` if given.

    Parameters
    ----------
    path : str or path-like
        A word2vec binary, word2vec/fastText text, GloVe text or ``.npy``
        file. Text and binary files may be gzip-compressed.
    words : iterable of str, default=None
        The words wanted. The file is then streamed and only their vectors
        are kept, so memory follows the words kept, not the file size; the
        reading stops as soon as all are found. Words are matched exactly as
        given (pass them lowercased with ``fold_case=True``). None loads
        every word.
    format : {"auto", "word2vec-bin", "word2vec-text", "glove", "npy"}, default="auto"
        "auto" reads ``.bin`` files as word2vec binary and ``.npy`` files as
        arrays (``.gz`` suffixes aside); other files are word2vec text if
        their first line is two integers (binary if control bytes follow it),
        else GloVe.
    vocab : str or path-like, default=None
        With npy only: the vocabulary file, one word per line, row i of the
        array on line i (fields after the first are ignored). None looks for
        ``<stem>.vocab`` then ``<stem>.txt`` next to the array.
    fold_case : bool, default=False
        Lowercase the file's words before matching; the first occurrence in
        file order wins (word2vec files are sorted by frequency, so the most
        frequent casing does).
    dtype : floating dtype, default=np.float32
        The dtype of the vectors returned.
    progress : callable, default=None
        Called with the number of bytes of the file on disk read so far,
        about once per MB and once at the end, e.g. a click progress bar's
        ``update`` via a difference (its length being the file size).

    Returns
    -------
    vectors : WordVectors
        The words found and their vectors, in file order. Where a word occurs
        more than once, the first occurrence wins.

    Raises
    ------
    FileNotFoundError
        If the file (or the npy vocabulary) does not exist
        (:class:`IsADirectoryError` if ``path`` is a directory).
    ValueError
        If ``format``, ``words``, ``dtype`` or ``progress`` is invalid, or
        ``vocab`` is given for a file not read as npy.
    VectorFileError
        If the file is empty or malformed: a bad header, a truncated record,
        a line with the wrong number of values, a non-numeric value, npy rows
        that do not match the vocabulary, or a non-finite value in a vector
        kept. The message names the file and the line number (text) or byte
        offset (binary). With ``words`` given, text lines whose first field
        is not wanted are skipped without being checked.
        (:class:`~sobolev_index.errors.VectorFileError` is a ValueError.)

    See Also
    --------
    vector_file_info : A file's format, word count and dimension.
    write_word2vec_text : Write vectors as text.
    write_word2vec_binary : Write vectors in word2vec's binary format.

    Examples
    --------
    >>> from sobolev_index.ingest.embeddings import load_vectors, write_word2vec_binary
    >>> write_word2vec_binary("tiny.bin", ["cat", "dog", "car"],
    ...                       [[0.0, 1.0], [0.25, 1.0], [1.0, 0.0]])
    >>> found = load_vectors("tiny.bin", words=["car", "cat", "emu"])
    >>> found.words, found.vectors.tolist()
    (['cat', 'car'], [[0.0, 1.0], [1.0, 0.0]])

    A malformed file is an error that names the line:

    >>> with open("broken.vec", "w", encoding="utf-8") as f:
    ...     _ = f.write("2 2\ncat 0 1\ndog 0.25\n")
    >>> load_vectors("broken.vec")
    Traceback (most recent call last):
        ...
    sobolev_index.errors.VectorFileError: broken.vec: line 3 has 1 values; expected 2 (the header says 2)
    """
    _check_format(format)
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise ValueError(f"dtype is {dtype}; expected a floating-point dtype such as float32")
    if progress is not None and not callable(progress):
        raise ValueError(f"progress is {type(progress).__name__}; expected a callable or None")
    wanted = None
    if words is not None:
        if isinstance(words, (str, bytes)):
            raise ValueError(f"words is a {type(words).__name__}; expected an iterable of "
                             f"words such as a list")
        wanted = set(words)
        odd = next((w for w in wanted if not isinstance(w, str)), None)
        if odd is not None:
            raise ValueError(f"words contains {odd!r} ({type(odd).__name__}); expected str")
    # A pipe is read once, into a temporary file: the readers seek, and a
    # format told by content opens the file twice. An npy array's default
    # vocabulary is looked for beside the path given, not beside the copy.
    if vocab is None and is_stream(path) and (format == "npy"
                                              or os.fspath(path).lower().endswith(".npy")):
        with contextlib.suppress(FileNotFoundError):
            vocab = _npy_vocab(Path(path), None)
    with regular_file(path) as local, regular_file(vocab) if vocab is not None \
            else contextlib.nullcontext() as vocab:
        path = Path(local)
        format = _resolved_format(path, format)
        if vocab is not None and format != "npy":
            raise ValueError(f"vocab is only used with format 'npy'; {path} is read as {format!r}")
        if format == "npy":
            return _read_npy(path, vocab, wanted, fold_case, dtype, progress)
        with _Source(path) as source:
            if format == "word2vec-bin":
                return _read_word2vec_binary(source, wanted, fold_case, dtype, progress)
            return _read_text(source, format, wanted, fold_case, dtype, progress)


def vector_file_info(path, format="auto", vocab=None):
    """The format, word count and dimension of a word-vector file, from its
    header or first line only.

    Parameters
    ----------
    path : str or path-like
        A word-vector file, as for :func:`load_vectors`.
    format : {"auto", "word2vec-bin", "word2vec-text", "glove", "npy"}, default="auto"
        As in :func:`load_vectors`.
    vocab : str or path-like, default=None
        With npy only: the vocabulary file; None looks for ``<stem>.vocab``
        then ``<stem>.txt``. The vocabulary is located, not read.

    Returns
    -------
    info : dict
        ``format``, ``count`` (None for GloVe, which has no header) and
        ``dim``; for npy also ``vocab``, the vocabulary path or None if there
        is none.

    Raises
    ------
    FileNotFoundError
        If the file, or a ``vocab`` given, does not exist.
    ValueError
        If ``format`` is not one of the names above.
    VectorFileError
        If the header or first line is empty or malformed, or an npy file is
        not a 2-D array of numbers
        (:class:`~sobolev_index.errors.VectorFileError`).

    Examples
    --------
    >>> from sobolev_index.ingest.embeddings import vector_file_info, write_word2vec_text
    >>> words, rows = ["cat", "dog", "car"], [[0.0, 1.0], [0.25, 1.0], [1.0, 0.0]]
    >>> write_word2vec_text("tiny.vec", words, rows)
    >>> vector_file_info("tiny.vec")
    {'format': 'word2vec-text', 'count': 3, 'dim': 2}
    >>> write_word2vec_text("tiny-glove.txt", words, rows, header=False)
    >>> vector_file_info("tiny-glove.txt")
    {'format': 'glove', 'count': None, 'dim': 2}
    """
    _check_format(format)
    with regular_file(path) as local:
        return _file_info(Path(local), Path(path), format, vocab)


def _file_info(path, given, format, vocab):
    format = _resolved_format(path, format)
    if format == "npy":
        if vocab is None:
            with contextlib.suppress(FileNotFoundError):
                vocab = _npy_vocab(given, None)
        data = _load_npy(path)
        try:
            vocab_path = str(_npy_vocab(path, vocab))
        except FileNotFoundError:
            if vocab is not None:
                raise
            vocab_path = None
        return {"format": format, "count": int(data.shape[0]), "dim": int(data.shape[1]),
                "vocab": vocab_path}
    with _Source(path) as source:
        line = source.file.readline(_MAX_HEADER_BYTES if format == "word2vec-bin" else -1)
    line = line.removeprefix(_BOM)
    if not line.strip():
        raise VectorFileError(f"{path}: line 1 is empty; expected "
                              + ("a word and its vector" if format == "glove"
                                 else "a '<count> <dim>' header"))
    if format == "glove":
        dim = len(line.split()) - 1
        if dim < 1:
            raise VectorFileError(f"{path}: line 1 has a word and no values; expected a word "
                                  f"followed by its vector")
        return {"format": format, "count": None, "dim": dim}
    where = "at byte offset 0" if format == "word2vec-bin" else "line 1:"
    count, dim = _parse_header(line, path, where)
    return {"format": format, "count": count, "dim": dim}


def _check_for_writing(words, vectors):
    words = list(words)
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[0] != len(words) or vectors.shape[1] < 1:
        raise ValueError(f"vectors have shape {vectors.shape}; expected ({len(words)}, dim) "
                         f"with dim >= 1")
    for word in words:
        # Readers split on ASCII whitespace, so only that is forbidden in a word.
        if not isinstance(word, str) or len(word.encode("utf-8").split()) != 1 \
                or word.strip(" \t\n\r\v\f") != word:
            raise ValueError(f"word {word!r} cannot be written: expected a non-empty str "
                             f"without spaces, tabs or newlines")
    return words, vectors


def _open_for_writing(path):
    path = Path(path)
    return gzip.open(path, "wb") if path.name.lower().endswith(".gz") else open(path, "wb")


def write_word2vec_binary(path, words, vectors):
    """Write ``words`` and ``vectors`` in the word2vec binary format.

    A ``"<count> <dim>"`` header line, then per word its UTF-8 bytes, a
    space, its values as little-endian float32 and a newline (as word2vec
    itself writes). An existing file is overwritten.

    Parameters
    ----------
    path : str or path-like
        The file written; a name ending in ``.gz`` is gzip-compressed.
    words : sequence of str
        Non-empty words without ASCII whitespace (spaces, tabs, newlines).
    vectors : array-like of shape (len(words), dim)
        Row i is the vector of ``words[i]``; dim >= 1. Written as float32.

    Raises
    ------
    ValueError
        If ``vectors`` does not have that shape, or a word is not a
        non-empty str without whitespace.

    See Also
    --------
    load_vectors : Read the file back.
    sobolev_index.ingest.learn.write_vectors : Write a new file, atomically.

    Examples
    --------
    >>> from sobolev_index.ingest.embeddings import load_vectors, write_word2vec_binary
    >>> write_word2vec_binary("tiny.bin", ["cat", "dog"], [[0.0, 1.0], [0.25, 1.0]])
    >>> load_vectors("tiny.bin").vectors.tolist()
    [[0.0, 1.0], [0.25, 1.0]]
    """
    words, vectors = _check_for_writing(words, vectors)
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    with _open_for_writing(path) as handle:
        handle.write(f"{len(words)} {vectors.shape[1]}\n".encode("ascii"))
        for word, vector in zip(words, vectors):
            handle.write(word.encode("utf-8") + b" " + vector.tobytes() + b"\n")


def write_word2vec_text(path, words, vectors, header=True):
    """Write ``words`` and ``vectors`` as text lines ``"word v1 ... vdim"``.

    float64 values are written with 17 significant digits and any other
    values with 9 (float32's), enough for them to read back exactly. An
    existing file is overwritten.

    Parameters
    ----------
    path : str or path-like
        The file written; a name ending in ``.gz`` is gzip-compressed.
    words : sequence of str
        Non-empty words without ASCII whitespace (spaces, tabs, newlines).
    vectors : array-like of shape (len(words), dim)
        Row i is the vector of ``words[i]``; dim >= 1.
    header : bool, default=True
        Write a ``"<count> <dim>"`` header line first (word2vec and
        fastText text); False writes none (GloVe).

    Raises
    ------
    ValueError
        If ``vectors`` does not have that shape, or a word is not a
        non-empty str without whitespace.

    See Also
    --------
    load_vectors : Read the file back.
    write_word2vec_binary : The binary format.

    Examples
    --------
    >>> from sobolev_index.ingest.embeddings import write_word2vec_text
    >>> write_word2vec_text("tiny.vec", ["cat", "dog"], [[0.0, 1.0], [0.25, 1.0]])
    >>> print(open("tiny.vec", encoding="utf-8").read())
    2 2
    cat 0 1
    dog 0.25 1
    >>> write_word2vec_text("bad.vec", ["a cat"], [[0.0, 1.0]])
    Traceback (most recent call last):
        ...
    ValueError: word 'a cat' cannot be written: expected a non-empty str without spaces, tabs or newlines
    """
    words, vectors = _check_for_writing(words, vectors)
    digits = 17 if vectors.dtype == np.float64 else 9
    with _open_for_writing(path) as handle:
        if header:
            handle.write(f"{len(words)} {vectors.shape[1]}\n".encode("ascii"))
        for word, vector in zip(words, vectors):
            values = " ".join(f"{v:.{digits}g}" for v in vector.tolist())
            handle.write(f"{word} {values}\n".encode())
