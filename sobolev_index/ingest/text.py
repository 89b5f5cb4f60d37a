"""Tokenizing text into words, and reading text files, shared by the document
pipeline and the quickstart corpus so that both see the same vocabulary.

**Token patterns.** A pattern is one of these names or a regular expression:

- ``"unicode"`` (the default): a word is a run of letters and digits of any
  script (what Python's ``re`` calls ``[^\\W_]``), together with the
  combining marks that follow them, so that "Café", "naïve", "Zürich",
  "straße", "Москва", "αλήθεια" and "हिन्दी" each stay one word. Before
  matching, the text is lowercased with ``str.lower``, put in Unicode
  normal form NFC (a decomposed "e" + U+0301 and a composed "é" give the
  same word) and its typographic apostrophes (U+2019) become ASCII ones.
  An apostrophe is part of a word only between two letters or digits:
  "don't", "l'homme" and "o'clock" are one word each, while the
  apostrophes of "'tis", "w'" and of 'quoted' words are dropped. Scripts
  written without spaces between words (Chinese, Japanese, Thai) give one
  word per run of letters; a regex such as ``[^\\W_]`` (one character per
  word) suits them better.
- ``"ascii"``: the pattern of earlier releases, ``[a-z0-9][a-z0-9']*`` on
  lowercased text with no other processing (accented words split:
  "café" gives "caf"). The shared TWITTER vectors were made with it.

Any other string is a regular expression, matched on the lowercased text as
it is (no normalisation), every whole non-empty match a word. An index
stores the pattern it was built with (the name, or the regex), and reads
every later document and query with it; the definition behind a name does
not change between releases (a different one would get a new name). What
counts as a letter or a mark is what the running Python's Unicode database
says: a character added to Unicode later is a letter only on a Python that
knows it.

Why ``str.lower`` and not ``str.casefold``: casefold turns "ß" into "ss",
so "straße" would never meet the "straße" of a word-vector file, and the
vector readers' ``fold_case`` lowercases with ``str.lower`` as well.

**Text files.** :func:`text_lines` reads the lines of a file or of stdin in
a given encoding (UTF-8 by default): a byte-order mark is dropped, ``\\r\\n``
and ``\\r`` end lines like ``\\n``, and bytes that do not decode are an error
that names the file, the line and the byte offset. Nothing is replaced
silently, and a NUL character (which no text file has, and nearly every
binary file, or UTF-16 text read as UTF-8, does) is an error too.
"""
import codecs
import io
import os
import re
import sys
import unicodedata

from ..errors import ADVICE, CorpusError

__all__ = [
    "DEFAULT_TOKEN_PATTERN",
    "TOKEN_PATTERNS",
    "ASCII_TOKEN_PATTERN",
    "DEFAULT_ENCODING",
    "ENGLISH_STOPWORDS",
    "check_token_pattern",
    "check_encoding",
    "normalize_word",
    "read_stopwords",
    "stopwords_from",
    "text_lines",
    "tokenize",
]

# Lowercase ASCII words and numbers with inner or trailing apostrophes
# ("don't", "o'clock", "w'"): the pattern of releases before "unicode", and
# the one the shared TWITTER vectors were made with.
ASCII_TOKEN_PATTERN = r"[a-z0-9][a-z0-9']*"
# The names a pattern may be given by (see the module docstring).
TOKEN_PATTERNS = ("unicode", "ascii")
DEFAULT_TOKEN_PATTERN = "unicode"
DEFAULT_ENCODING = "utf-8"

# U+2019 RIGHT SINGLE QUOTATION MARK, the apostrophe of typeset text.
_TYPOGRAPHIC_APOSTROPHE = "\u2019"
# Zero-width joiner and non-joiner: inside Persian and Indic words they are
# part of the spelling, so between two letters they do not end a word.
_JOINERS = "\u200c\u200d"


def _mark_class():
    """A regex character class of every combining mark (categories Mn, Mc,
    Me) of this Python's Unicode database. Python's ``\\w`` has no marks,
    so without them a word with a mark that has no precomposed form (most
    Indic vowel signs, a "q" with an accent) would be split at the mark."""
    ranges, start, previous = [], None, None
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code))[0] == "M":
            if start is None:
                start = code
            elif code != previous + 1:
                ranges.append((start, previous))
                start = code
            previous = code
    if start is not None:
        ranges.append((start, previous))
    escape = "\\U{:08x}".format
    return "[" + "".join(escape(a) if a == b else f"{escape(a)}-{escape(b)}"
                         for a, b in ranges) + "]"


def _unicode_regex():
    # A part: letters and digits, with marks after them and joiners that
    # stand between two letters (each inner step takes one mark or joiner,
    # then letters: the sets do not overlap, so matching never backtracks).
    # A word: parts joined by single apostrophes, so that an apostrophe at
    # either end is not kept.
    letter = r"[^\W_]"
    part = f"{letter}+(?:(?:{_mark_class()}|[{_JOINERS}](?={letter})){letter}*)*"
    return f"{part}(?:'{part})*"


class _Tokenizer:
    """A resolved pattern: its compiled regex and whether the text is
    normalised (the "unicode" pattern) or matched as it is."""

    __slots__ = ("regex", "normalise")

    def __init__(self, regex, normalise):
        self.regex = regex
        self.normalise = normalise

    def prepare(self, text, lowercase):
        if lowercase:
            text = text.lower()
        if self.normalise:
            # NFC after lowercasing, so that the words themselves are NFC.
            text = unicodedata.normalize("NFC", text).replace(_TYPOGRAPHIC_APOSTROPHE, "'")
        return text

    def words(self, text, lowercase):
        # Whole matches: findall would return the groups of a pattern that has
        # any, and empty matches are not words.
        return [m.group(0) for m in self.regex.finditer(self.prepare(text, lowercase))
                if m.end() > m.start()]


_tokenizers = {}


def _tokenizer(pattern):
    found = _tokenizers.get(pattern)
    if found is None:
        if not isinstance(pattern, str):
            raise ValueError(f"token pattern is {type(pattern).__name__} {pattern!r:.60}; expected "
                             f"one of the names {', '.join(map(repr, TOKEN_PATTERNS))} or a "
                             "regular expression")
        if pattern == "unicode":
            found = _Tokenizer(re.compile(_unicode_regex()), normalise=True)
        elif pattern == "ascii":
            found = _Tokenizer(re.compile(ASCII_TOKEN_PATTERN), normalise=False)
        else:
            try:
                found = _Tokenizer(re.compile(pattern), normalise=False)
            except re.error as exc:
                raise ValueError(
                    f"token pattern {pattern!r} is neither a pattern name "
                    f"({', '.join(map(repr, TOKEN_PATTERNS))}) nor a regular expression "
                    f"({exc})") from None
        _tokenizers[pattern] = found
    return found


def check_token_pattern(pattern):
    """Check that ``pattern`` is a token pattern name or a regular expression.

    The pattern is compiled (and kept for :func:`tokenize`), so a bad one
    fails here, before any text is read or anything is written.

    Parameters
    ----------
    pattern : str
        A name of :data:`TOKEN_PATTERNS` (``"unicode"`` or ``"ascii"``) or a
        regular expression.

    Raises
    ------
    ValueError
        If ``pattern`` is not a str, or is neither a name nor a regular
        expression that compiles; the message names it.

    See Also
    --------
    tokenize : The words of a text under a pattern.

    Examples
    --------
    >>> from sobolev_index.ingest.text import check_token_pattern
    >>> check_token_pattern("unicode")
    >>> check_token_pattern(r"[a-z]+")
    >>> check_token_pattern("[a-")
    Traceback (most recent call last):
        ...
    ValueError: token pattern '[a-' is neither a pattern name ('unicode', 'ascii') nor a regular ...
    """
    _tokenizer(pattern)


def tokenize(text, pattern=DEFAULT_TOKEN_PATTERN, lowercase=True, stopwords=None):
    r"""The words of ``text``, in order.

    Every whole, non-empty match of ``pattern`` in the text is a word; the
    text is lowercased first unless ``lowercase`` is False, and the
    ``"unicode"`` pattern also puts it in NFC with ASCII apostrophes (see
    the module docstring). An index reads its documents and queries with
    this function and the pattern it was built with.

    Parameters
    ----------
    text : str
        The text to split into words.
    pattern : str, default="unicode"
        A name of :data:`TOKEN_PATTERNS` or a regular expression.
    lowercase : bool, default=True
        Lowercase the text (``str.lower``) before matching.
    stopwords : set of str, optional
        Words left out of the result, written as the pattern writes its
        words (see :func:`normalize_word`). None (the default) leaves out
        none.

    Returns
    -------
    list of str
        The words, in the order they occur, repeats included.

    Raises
    ------
    ValueError
        If ``text`` is not a str, or ``pattern`` is not a pattern name or a
        regular expression.

    See Also
    --------
    normalize_word : A single word as the pattern writes it.

    Examples
    --------
    >>> from sobolev_index.ingest.text import ENGLISH_STOPWORDS, tokenize
    >>> tokenize("Don\u2019t panic: the Café in Zürich opens at 9!")
    ["don't", 'panic', 'the', 'café', 'in', 'zürich', 'opens', 'at', '9']
    >>> tokenize("Don\u2019t panic: the Café in Zürich opens at 9!", "ascii")
    ['don', 't', 'panic', 'the', 'caf', 'in', 'z', 'rich', 'opens', 'at', '9']
    >>> tokenize("The cat and THE dog", stopwords=ENGLISH_STOPWORDS)
    ['cat', 'dog']
    >>> tokenize("The cat and THE dog", lowercase=False)
    ['The', 'cat', 'and', 'THE', 'dog']
    """
    if not isinstance(text, str):
        raise ValueError(f"text is {type(text).__name__} {text!r:.60}; expected a str")
    words = _tokenizer(pattern).words(text, lowercase)
    if stopwords:
        words = [w for w in words if w not in stopwords]
    return words


def normalize_word(word, pattern=DEFAULT_TOKEN_PATTERN, lowercase=True):
    r"""``word`` as ``pattern`` would write it as a token.

    So that a stop word from a list meets the tokens of the text. For the
    ``"unicode"`` pattern that is the word lowercased (unless ``lowercase``
    is False), in NFC and with ASCII apostrophes. The ``"ascii"`` pattern
    and regular expressions leave the word as it is, not even lowercased.

    Parameters
    ----------
    word : str
        The word, e.g. a line of a stop-word list.
    pattern : str, default="unicode"
        A name of :data:`TOKEN_PATTERNS` or a regular expression.
    lowercase : bool, default=True
        Whether the pattern's text is lowercased (``"unicode"`` only).

    Returns
    -------
    str
        The word as a token of ``pattern``.

    Raises
    ------
    ValueError
        If ``pattern`` is not a pattern name or a regular expression.

    Examples
    --------
    >>> from sobolev_index.ingest.text import normalize_word
    >>> normalize_word("Don\u2019t")
    "don't"
    >>> normalize_word("Cafe\u0301") == "café"
    True
    >>> normalize_word("The", "ascii")
    'The'
    """
    tokenizer = _tokenizer(pattern)
    return tokenizer.prepare(word, lowercase) if tokenizer.normalise else word


# ------------------------------------------------------------- text files
_CHUNK = 1 << 16
# The advice every decoding error ends with.
ENCODING_ADVICE = f"give the file's encoding {ADVICE['encoding']}"


def check_encoding(encoding):
    """The codec name of the text encoding ``encoding``, checked.

    Parameters
    ----------
    encoding : str
        The name of a text encoding Python knows, in any of its spellings
        (``"UTF8"``, ``"latin-1"``, ``"cp1252"``).

    Returns
    -------
    str
        Python's own name of the codec, e.g. ``"utf-8"`` or ``"iso8859-1"``.

    Raises
    ------
    ValueError
        If ``encoding`` is not a non-blank str, is a name Python does not
        know, or names a codec that is not a text encoding (base64, zlib);
        the message names it.

    Examples
    --------
    >>> from sobolev_index.ingest.text import check_encoding
    >>> check_encoding("UTF8"), check_encoding("latin-1")
    ('utf-8', 'iso8859-1')
    >>> check_encoding("base64")
    Traceback (most recent call last):
        ...
    ValueError: encoding 'base64' is not a text encoding Python knows; ...
    """
    if not isinstance(encoding, str) or not encoding.strip():
        raise ValueError(f"encoding is {encoding!r}; expected the name of a text encoding such as "
                         "'utf-8', 'cp1252', 'latin-1' or 'utf-16'")
    try:
        info = codecs.lookup(encoding)
        # open() refuses bytes-to-bytes codecs with a LookupError; so does this.
        io.TextIOWrapper(io.BytesIO(), encoding=encoding).detach()
    except LookupError:
        raise ValueError(f"encoding {encoding!r} is not a text encoding Python knows; expected a "
                         "name such as 'utf-8', 'cp1252', 'latin-1' or 'utf-16' (see Python's "
                         "'Standard Encodings')") from None
    return info.name


def _source_name(source):
    return "<stdin>" if source == "-" else os.fspath(source)


def text_lines(source, encoding=DEFAULT_ENCODING):
    r"""The lines of a text file, decoded from ``encoding``.

    A byte-order mark at the start is dropped; ``"\r\n"`` and ``"\r"`` end
    lines as ``"\n"`` does. Nothing is replaced silently: bytes that do not
    decode, and NUL characters, are errors. The file is opened when the
    iteration starts and closed when the generator ends or is closed.

    Parameters
    ----------
    source : str or path-like
        A path, or ``"-"`` for stdin. The bytes of stdin are decoded here,
        whatever the locale says; a stdin that has no bytes, such as a
        StringIO, is read as the text it is.
    encoding : str, default="utf-8"
        Any Python text encoding (see :func:`check_encoding`).

    Yields
    ------
    str
        Each line, ending in ``"\n"`` (but perhaps the last).

    Raises
    ------
    ValueError
        If ``encoding`` is not a text encoding (when the iteration starts).
    FileNotFoundError
        If ``source`` does not exist (when the iteration starts).
    CorpusError
        When the reading reaches bytes that do not decode or a NUL
        character: :class:`~sobolev_index.errors.CorpusError`, naming the
        file, the line and (for bytes) the byte offset.

    Examples
    --------
    >>> from sobolev_index.ingest.text import text_lines
    >>> with open("notes.txt", "wb") as f:
    ...     _ = f.write(b"first\r\nsecond\rcaf\xe9")
    >>> list(text_lines("notes.txt", "latin-1"))
    ['first\n', 'second\n', 'café']
    >>> list(text_lines("notes.txt"))
    Traceback (most recent call last):
        ...
    sobolev_index.errors.CorpusError: notes.txt is not utf-8 text: line 3, byte offset 17 (0xe9): ...
    """
    codec = check_encoding(encoding)
    if codec == "utf-8-sig":
        codec = "utf-8"  # the mark is dropped below, for every encoding
    if source == "-":
        # Looked up at read time so that a replaced sys.stdin is honoured.
        raw = getattr(sys.stdin, "buffer", None)
        if raw is None:
            yield from _checked_text_lines(sys.stdin, "<stdin>", encoding)
        else:
            yield from _decoded_lines(raw, "<stdin>", codec, encoding)
        return
    path = os.fspath(source)
    with open(path, "rb") as raw:
        yield from _decoded_lines(raw, path, codec, encoding)


def _nul_error(name, line, encoding):
    wider = "" if codecs.lookup(encoding).name.startswith("utf-16") else " (UTF-16?)"
    return CorpusError(
        f"{name} line {line} holds a NUL character, which text does not have: it is a binary "
        f"file, or text in an encoding with wider characters{wider} read as {encoding}; "
        f"{ENCODING_ADVICE}")


def _checked_text_lines(lines, name, encoding):
    """Lines of a stream that is text already: the byte-order mark dropped
    and NULs refused, as for bytes."""
    for number, line in enumerate(lines, 1):
        if number == 1:
            line = line.removeprefix("\ufeff")
        if "\x00" in line:
            raise _nul_error(name, number, encoding)
        yield line


def _decoded_lines(raw, name, codec, encoding):
    """Lines of a binary stream, decoded chunk by chunk so that a bad byte is
    reported at its offset in the file (a decoder's own position is only
    the position inside its chunk)."""
    decoder = codecs.getincrementaldecoder(codec)(errors="strict")
    newlines = io.IncrementalNewlineDecoder(None, translate=True)
    fed = 0  # bytes given to the decoder before this chunk
    line = 1  # the number of the line being read
    rest = ""  # text after the last newline
    first = True
    while True:
        chunk = raw.read(_CHUNK)
        final = not chunk
        state = decoder.getstate()
        try:
            text = decoder.decode(chunk, final)
        except UnicodeDecodeError as exc:
            raise _decode_error(exc, name, encoding, decoder, state, chunk, fed,
                                line + rest.count("\n")) from None
        except UnicodeError as exc:  # a codec that decodes nothing ("undefined")
            raise CorpusError(f"{name} cannot be read as {encoding} ({exc}); "
                              f"{ENCODING_ADVICE}") from None
        fed += len(chunk)
        text = newlines.decode(text, final)
        if first and text:
            text = text.removeprefix("\ufeff")
            first = False
        text = rest + text
        nul = text.find("\x00")
        if nul >= 0:
            raise _nul_error(name, line + text.count("\n", 0, nul), encoding)
        parts = text.split("\n")
        rest = parts.pop()
        for part in parts:
            yield part + "\n"
            line += 1
        if final:
            break
    if rest:
        yield rest


def _decode_error(exc, name, encoding, decoder, state, chunk, fed, line):
    # A decoder keeps the bytes of an unfinished character from the chunk
    # before ("pending"); the error's start counts them in.
    pending = state[0] if isinstance(state[0], (bytes, bytearray)) else b""
    offset = max(0, fed - len(pending) + exc.start)
    # The line: the newlines of the text that did decode before the bad byte.
    try:
        decoder.setstate(state)
        before = decoder.decode(chunk[:max(0, exc.start - len(pending))])
        line += before.replace("\r\n", "\n").replace("\r", "\n").count("\n")
    except (UnicodeError, ValueError):
        pass
    bad = bytes(exc.object[exc.start:exc.end][:4]) if isinstance(exc.object, (bytes, bytearray)) \
        else b""
    shown = " ".join(f"0x{b:02x}" for b in bad)
    return CorpusError(
        f"{name} is not {encoding} text: line {line}, byte offset {offset:,}"
        + (f" ({shown})" if shown else "") + f": {exc.reason}; {ENCODING_ADVICE}")


# -------------------------------------------------------------- stop words
def read_stopwords(path, encoding=DEFAULT_ENCODING):
    r"""The stop words of a file.

    A line holds one or more words separated by whitespace; blank lines and
    lines starting with ``#`` are ignored. Words are lowercased
    (``str.lower``).

    Parameters
    ----------
    path : str or path-like
        The file, or ``"-"`` for stdin.
    encoding : str, default="utf-8"
        Its text encoding, as for :func:`text_lines`.

    Returns
    -------
    frozenset of str
        The words.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If ``encoding`` is not a text encoding.
    CorpusError
        If the file does not decode from ``encoding`` or holds a NUL
        character (:class:`~sobolev_index.errors.CorpusError`).

    See Also
    --------
    stopwords_from : Stop words by name or file.

    Examples
    --------
    >>> from sobolev_index.ingest.text import read_stopwords
    >>> with open("stop.txt", "w", encoding="utf-8") as f:
    ...     _ = f.write("# my list\nThe a\n\nOf\n")
    >>> sorted(read_stopwords("stop.txt"))
    ['a', 'of', 'the']
    """
    words = set()
    for line in text_lines(path, encoding):
        line = line.strip()
        if line and not line.startswith("#"):
            words.update(w.lower() for w in line.split())
    return frozenset(words)


# Common English function words: articles, pronouns, auxiliaries,
# prepositions and conjunctions. They carry little topic, and in short texts
# their mass would otherwise dominate the distance.
ENGLISH_STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been
before being below between both but by can could did do does doing down during
each few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just me more most my myself no
nor not now of off on once only or other our ours ourselves out over own same
she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what
when where which while who whom why will with would you your yours yourself
yourselves
""".split())


def stopwords_from(spec, encoding=DEFAULT_ENCODING):
    r"""Stop words from a spec as the command line's ``--stopwords`` takes it.

    Parameters
    ----------
    spec : str or None
        None or ``"none"`` (no stop words), ``"english"``
        (:data:`ENGLISH_STOPWORDS`), or the path of a file read by
        :func:`read_stopwords`.
    encoding : str, default="utf-8"
        The file's text encoding, as for :func:`text_lines`.

    Returns
    -------
    frozenset of str
        The stop words; empty for no list.

    Raises
    ------
    ValueError
        If the file does not exist, or ``encoding`` is not a text encoding.
    CorpusError
        If the file does not decode from ``encoding``
        (:class:`~sobolev_index.errors.CorpusError`).

    Examples
    --------
    >>> from sobolev_index.ingest.text import stopwords_from
    >>> len(stopwords_from("english")), stopwords_from("none")
    (126, frozenset())
    >>> with open("stop.txt", "w", encoding="utf-8") as f:
    ...     _ = f.write("the\nof\n")
    >>> sorted(stopwords_from("stop.txt"))
    ['of', 'the']
    >>> stopwords_from("missing.txt")
    Traceback (most recent call last):
        ...
    ValueError: stop-word file 'missing.txt' does not exist; give a file with one word per line, ...
    """
    if spec is None or spec == "none":
        return frozenset()
    if spec == "english":
        return ENGLISH_STOPWORDS
    try:
        return read_stopwords(spec, encoding)
    except FileNotFoundError:
        raise ValueError(f"stop-word file {spec!r} does not exist; give a file with one word "
                         "per line, 'english' or 'none'") from None
