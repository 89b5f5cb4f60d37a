"""Documents as measures: corpus files in, an index of bags of words out.

A document becomes a measure on the graph's nodes: its words are tokenized
(:mod:`sobolev_index.ingest.text`), weighted by normalised counts or tf-idf, and
each word sits at the node of its word vector's cluster. The word -> node
table is made when the index is built (farthest-point clustering of the
corpus's word vectors) and kept in the index's catalog, so that queries and
later additions need no vectors for words the index already knows. A word
first seen later goes to the node nearest its vector, when vectors are given.

Corpus files (see :func:`read_corpus`): JSONL (``key``, ``text``, optional
``label`` and other fields), a directory of ``.txt`` files, a
``"label"<TAB>text`` line file (the TWITTER format), or one plain text file,
in UTF-8 or the encoding given.
"""
import itertools
import json
import math
import os
import re
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import CorpusError, CorpusVectorsError, InvalidMeasureError, SkippedDocumentsWarning
from ..index.storage import require_new_directory
from .embeddings import WordVectors, load_vectors
from .fill import (
    FIELDS_MAX_DEPTH,
    TEXT_META,
    add_in_batches,
    build_graph,
    check_can_add,
    check_fields,
    check_fields_depth,
    check_input,
    check_new_keys,
    check_storable,
    count_live,
    create_and_fill,
    drop_existing,
    label_text,
)
from .recipes import (
    DEFAULT_RECIPE,
    RECIPE_META,
    check_recipe,
    create_roots,
    fit_to_graph,
    resolve,
)
from .text import (
    DEFAULT_ENCODING,
    DEFAULT_TOKEN_PATTERN,
    ENGLISH_STOPWORDS,
    check_encoding,
    check_token_pattern,
    normalize_word,
    text_lines,
    tokenize,
)
from .words import add_words, read_words

__all__ = [
    "TextSettings",
    "TextEncoder",
    "read_corpus",
    "build_index",
    "add_documents",
    "text_measures",
    "stored_vectors_path",
    "text_info",
    "text_defaults",
    "text_settings",
]

WEIGHTINGS = ("count", "tfidf")
CORPUS_FORMATS = ("auto", "jsonl", "lines", "plain-lines", "text", "dir")
# A file read as one document with more words than this is most likely a
# corpus of one document per line in a format auto did not recognise.
ONE_DOCUMENT_WARN_WORDS = 10_000
# label<TAB>text, the label quoted ("news") or a single short word (news).
_LABELLED = re.compile(r'(?:"([^"\t]*)"|([^\s"]{1,64}))\t')


@dataclass(frozen=True)
class TextSettings:
    """How text becomes words and weights; stored with the index so that
    every later document and query is read the same way.

    ``pattern``: a name of :data:`~sobolev_index.ingest.text.TOKEN_PATTERNS`
    ("unicode", the default, or "ascii") or a regular expression; it is
    stored as given, so an index built with a regex (as every index of
    releases before "unicode" was) keeps reading text with that regex.
    ``stopwords`` are written as the pattern writes its words (for
    "unicode": lowercased, NFC, ASCII apostrophes).
    """

    pattern: str = DEFAULT_TOKEN_PATTERN
    lowercase: bool = True
    stopwords: tuple = ()
    weighting: str = "count"
    # Documents the idf was counted over (tf-idf only).
    n_documents: int = 0
    vectors: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting is {self.weighting!r}; expected one of {WEIGHTINGS}")
        check_token_pattern(self.pattern)  # a bad pattern fails here, before anything is written
        object.__setattr__(self, "stopwords", tuple(sorted(
            {normalize_word(w, self.pattern, self.lowercase) for w in self.stopwords})))

    def to_json(self):
        return asdict(self)

    @classmethod
    def from_json(cls, value):
        value = dict(value)
        value["stopwords"] = tuple(value.get("stopwords", ()))
        return cls(**value)

    def tokens(self, text):
        return tokenize(text, self.pattern, self.lowercase, frozenset(self.stopwords))


# ------------------------------------------------------------------ corpus
def _document(key, text, label, fields, where):
    """A document dict, checked: a key and a label UTF-8 can store (a number
    as key or label is kept as its text), fields no deeper than
    FIELDS_MAX_DEPTH. The point readers check labels and fields alike."""
    if not isinstance(text, str):
        raise CorpusError(f"{where}: 'text' is {type(text).__name__}; expected a string")
    if key is not None and (not isinstance(key, str) or not key):
        if isinstance(key, (int, float)) and not isinstance(key, bool):
            key = str(key)
        else:
            raise CorpusError(f"{where}: 'key' is {key!r}; expected a non-empty string")
    if key is not None:
        check_storable(key, "'key'", where)
    check_fields_depth(fields, where)
    return {"key": key, "text": text, "label": label_text(label, where), "fields": fields or None}


def _read_jsonl(handle, name):
    for lineno, line in enumerate(handle, 1):
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
        if "text" not in record:
            raise CorpusError(f"{where} has no 'text' field (it has {sorted(record)})")
        fields = {k: v for k, v in record.items() if k not in ("key", "text", "label")}
        yield _document(record.get("key"), record["text"], record.get("label"), fields, where)


def _as_document(doc, position):
    """A document dict in the shape :func:`read_corpus` makes: names other
    than key, text and label go into ``fields``."""
    if isinstance(doc, str):
        return _document(None, doc, None, None, f"document {position}")
    if not isinstance(doc, dict) or "text" not in doc:
        raise CorpusError(f"document {position} is {doc!r:.60}; expected a str or a dict with 'text'")
    if doc.get("fields") is not None and not isinstance(doc["fields"], dict):
        raise CorpusError(f"document {position}: 'fields' is {type(doc['fields']).__name__} "
                          f"{doc['fields']!r:.40}; expected a dict or None")
    fields = dict(doc.get("fields") or {})
    fields.update({k: v for k, v in doc.items() if k not in ("key", "text", "label", "fields")})
    return _document(doc.get("key"), doc["text"], doc.get("label"), fields, f"document {position}")


def _is_labelled_line(line):
    return _LABELLED.match(line) is not None


def _read_lines(handle, name, stem):
    """``"label"<TAB>text`` or ``label<TAB>text`` per line; key
    ``<stem>-<line number>``."""
    for lineno, line in enumerate(handle, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        found = _LABELLED.match(line)
        if found is None:
            raise CorpusError(f'{name} line {lineno} does not start with a label and a TAB '
                              f'("label"<TAB>text or label<TAB>text); got {line[:40]!r}')
        label = found.group(1) if found.group(1) is not None else found.group(2)
        yield _document(f"{stem}-{lineno}", line[found.end():], label, None,
                        f"{name} line {lineno}")


def _read_plain_lines(handle, name, stem):
    """Every non-empty line a document without a label; key ``<stem>-<line number>``."""
    for lineno, line in enumerate(handle, 1):
        line = line.rstrip("\r\n")
        if line.strip():
            yield _document(f"{stem}-{lineno}", line, None, None, f"{name} line {lineno}")


def _one_document(stem, text, name, sniffed):
    if sniffed and len(text.split()) > ONE_DOCUMENT_WARN_WORDS:
        warnings.warn(
            f"{name} is read as one document of {len(text.split()):,} words; if it holds one "
            "document per line, give its format (format 'lines', 'plain-lines' or 'jsonl'; "
            "--format on the command line)", UserWarning, stacklevel=3)
    return _document(stem, text, None, None, name)


def _sniff(path, plain="text", encoding=DEFAULT_ENCODING):
    """The corpus format of a file from its name and first line."""
    if path.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    # Decoded strictly: bytes that do not decode are the same clear error
    # here as when the file is read.
    lines = text_lines(path, encoding)
    try:
        first = next((line for line in lines if line.strip()), "")
    finally:
        lines.close()
    return _sniff_line(first, plain)


def _sniff_line(first, plain="text"):
    if first.lstrip("\ufeff").lstrip().startswith("{"):
        return "jsonl"
    if _is_labelled_line(first):
        return "lines"
    return plain


def read_corpus(source, format="auto", plain="text", encoding=DEFAULT_ENCODING):
    """Documents of a corpus file, directory or stream, one dict at a time:
    ``{"key", "text", "label", "fields"}`` (key None: the index names it).

    ``source``: a path, ``"-"`` for stdin, or a list of them. Formats:
    ``jsonl``; ``lines`` (``"label"<TAB>text`` or ``label<TAB>text``, keys
    ``<file stem>-<line>``); ``plain-lines`` (every line a document without
    a label, keys ``<file stem>-<line>``); ``text`` (the whole file is one
    document, key its stem); ``dir`` (every ``.txt`` below, key its relative
    path without ``.txt``, label its first folder). ``auto`` tells them
    apart by name and first line, and reads plain text as ``plain`` (one
    document, or with ``plain="plain-lines"`` one per line, as search
    queries are); a file read whole as one very long document gets a
    warning that names the formats.

    Files and stdin are decoded from ``encoding`` (any Python text codec;
    UTF-8 by default), a byte-order mark dropped. Bytes that do not decode
    are a :class:`CorpusError` naming the file, line and byte offset, and so
    is a NUL character (a binary file, or UTF-16 read as UTF-8): nothing is
    replaced silently.
    """
    if format not in CORPUS_FORMATS:
        raise ValueError(f"format is {format!r}; expected one of {', '.join(CORPUS_FORMATS)}")
    if plain not in ("text", "plain-lines"):
        raise ValueError(f"plain is {plain!r}; expected 'text' or 'plain-lines'")
    check_encoding(encoding)
    if isinstance(source, (list, tuple)):
        for item in source:
            yield from read_corpus(item, format, plain, encoding)
        return
    source = os.fspath(source)
    if source == "-":
        lines = text_lines("-", encoding)
        head = []  # up to the first line that is not blank: it tells the format
        for line in lines:
            head.append(line)
            if line.strip():
                break
        sniffed = format == "auto"
        if sniffed:
            format = _sniff_line(head[-1] if head else "", plain)
        yield from _read_format(itertools.chain(head, lines), format, "<stdin>", "stdin", sniffed)
        return
    if not os.path.exists(source):
        raise CorpusError(f"{source} does not exist; expected a corpus file or directory")
    if os.path.isdir(source):
        if format not in ("auto", "dir"):
            raise CorpusError(f"{source} is a directory; format {format!r} needs a file")
        yield from _read_directory(source, encoding)
        return
    if format == "dir":
        raise CorpusError(f"{source} is a file; format 'dir' needs a directory of .txt files")
    sniffed = format == "auto"
    if sniffed:
        format = _sniff(source, plain, encoding)
    name = os.path.basename(source)
    stem = os.path.splitext(name)[0]
    lines = text_lines(source, encoding)
    try:
        yield from _read_format(lines, format, name, stem, sniffed)
    finally:
        lines.close()


def _read_format(lines, format, name, stem, sniffed):
    if format == "jsonl":
        yield from _read_jsonl(lines, name)
    elif format == "lines":
        yield from _read_lines(lines, name, stem)
    elif format == "plain-lines":
        yield from _read_plain_lines(lines, name, stem)
    else:
        yield _one_document(stem, "".join(lines), name, sniffed)


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
        yield _document(relative[:-4], text, parts[0] if len(parts) > 1 else None, None, path)


def text_defaults(recipe):
    """The :class:`TextSettings` options of a build ``recipe``: English stop
    words and tf-idf weights (the same for both recipes)."""
    check_recipe(recipe)
    return {"stopwords": tuple(sorted(ENGLISH_STOPWORDS)), "weighting": "tfidf"}


def text_settings(recipe=DEFAULT_RECIPE, *, pattern=None, stopwords=None, weighting=None,
                  lowercase=True):
    """:class:`TextSettings` with each option left as None taken from
    ``recipe`` (:func:`text_defaults`; the token pattern from
    :class:`TextSettings`)."""
    options = text_defaults(recipe)
    if stopwords is not None:
        options["stopwords"] = tuple(stopwords)
    if weighting is not None:
        options["weighting"] = weighting
    if pattern is not None:
        options["pattern"] = pattern
    return TextSettings(lowercase=lowercase, **options)


# ----------------------------------------------------------------- encoder
class TextEncoder:
    """Turns texts into (nodes, masses) measures with a word -> node table."""

    def __init__(self, settings, word_nodes, document_frequency=None):
        self.settings = settings
        self.word_nodes = dict(word_nodes)
        self.document_frequency = dict(document_frequency or {})

    @classmethod
    def of_index(cls, index):
        """The encoder stored with a text index (see :func:`build_index`)."""
        stored = index.catalog.meta_value(TEXT_META)
        if stored is None:
            raise CorpusError(
                f"the index at {index.path} was not built from text (it has no word table); "
                "add measures through the Python API, or build a text index with "
                "`sobolev-index build`")
        words = read_words(index.catalog)
        return cls(TextSettings.from_json(stored), {w: n for w, (n, _) in words.items()},
                   {w: df for w, (_, df) in words.items()})

    def unknown_words(self, texts):
        """Words of ``texts`` without a node, in first-seen order."""
        seen = {}
        for text in texts:
            for word in self.settings.tokens(text):
                if word not in self.word_nodes:
                    seen.setdefault(word, None)
        return list(seen)

    def only_stopwords(self, text):
        """The number of tokens of ``text`` when every one is a stop word of
        the index (0 otherwise): why a text with tokens can still be empty."""
        settings = self.settings
        if not settings.stopwords or settings.tokens(text):
            return 0
        return len(tokenize(text, settings.pattern, settings.lowercase))

    def _weights(self, counts):
        words = list(counts)
        weights = np.array([counts[w] for w in words], dtype=np.float64)
        if self.settings.weighting == "tfidf":
            n = self.settings.n_documents
            idf = np.array([math.log((1 + n) / (1 + self.document_frequency.get(w, 0))) + 1.0
                            for w in words])
            weights *= idf
        return words, weights

    def measure(self, text):
        """(nodes, masses) of one text, or None when none of its words has a
        node. Masses are the word weights summed per node (not normalised:
        the index normalises)."""
        counts = Counter(w for w in self.settings.tokens(text) if w in self.word_nodes)
        if not counts:
            return None
        words, weights = self._weights(counts)
        nodes = np.fromiter((self.word_nodes[w] for w in words), dtype=np.int64, count=len(words))
        unique, inverse = np.unique(nodes, return_inverse=True)
        return unique, np.bincount(inverse, weights=weights, minlength=len(unique))


def _vectors_for(vectors, words, fold_case=False, progress=None):
    """The vectors of ``words``: from a WordVectors or read from a file."""
    if vectors is None:
        return None
    if isinstance(vectors, WordVectors):
        return vectors.subset(words)
    if not os.path.exists(os.fspath(vectors)):
        raise CorpusVectorsError(f"vector file {vectors} does not exist")
    return load_vectors(vectors, words=words, fold_case=fold_case, progress=progress)


def _vectors_meta(vectors, fold_case):
    if isinstance(vectors, WordVectors):
        return {"path": None, "dim": vectors.dim, "fold_case": fold_case}
    return {"path": os.path.abspath(os.fspath(vectors)), "fold_case": fold_case}


# ------------------------------------------------------------------- build
def build_index(path, documents, vectors, *, recipe=DEFAULT_RECIPE, nodes=None, edges=None,
                k=None, roots=None, p=1, seed=0, settings=None, fold_case=False, skip_empty=False,
                store_text=True, batch_size=1000, progress=None, on_violation="perturb"):
    """Build a text index at ``path`` from ``documents`` and word vectors.

    ``documents``: dicts as from :func:`read_corpus` (or an iterable of
    them); ``vectors``: a :class:`WordVectors` or a vector file path (only
    the corpus's words are read). The graph is made from the vectors of the
    corpus's words: farthest-point clustering into at most ``nodes`` nodes
    (every word its own node when there is room for all) and ``edges``
    "log", "sqrt" or "knn" (``k`` nearest nodes), see
    :meth:`Graph.from_points`. ``roots``: a count (1: the most central
    node; more: random nodes) or a list of nodes. ``settings``: a
    :class:`TextSettings`.

    ``recipe`` ("quality" or "fast", see :mod:`~sobolev_index.ingest.recipes`)
    fills in every one of ``nodes``, ``edges``, ``k``, ``roots`` and
    ``settings`` left as None: every word a node (at most 10,000), edges to
    the 5 nearest nodes, English stop words, tf-idf, and 10 roots
    ("quality") or one ("fast"). What was chosen is recorded in the catalog
    (``recipe`` in :func:`text_info`). ``progress(stage, done, total)`` is
    called as work advances. Returns (index open for writing, report dict).
    """
    check_recipe(recipe)
    settings_given = settings is not None
    if settings is None:
        settings = TextSettings(**text_defaults(recipe))
    elif not isinstance(settings, TextSettings):
        raise TypeError(f"settings is {type(settings).__name__}; expected a TextSettings")
    path = os.fspath(path)
    require_new_directory(path)
    documents = [_as_document(doc, i) for i, doc in enumerate(documents)]
    if not documents:
        raise CorpusError("the corpus has no documents")
    _progress = progress or (lambda stage, done, total: None)

    _progress("reading", 0, len(documents))
    tokens = [settings.tokens(doc["text"]) for doc in documents]
    frequency = Counter()
    document_frequency = Counter()
    for words in tokens:
        frequency.update(words)
        document_frequency.update(set(words))
    if not frequency:
        if settings.stopwords and any(tokenize(d["text"], settings.pattern, settings.lowercase)
                                      for d in documents):
            raise CorpusError("no document has a word besides stop words; keep stop words "
                              "(settings=text_settings(stopwords=()), --stopwords none)")
        raise CorpusError(f"no document has a word matching the token pattern {settings.pattern!r}")
    vocabulary = sorted(frequency, key=lambda w: (-frequency[w], w))

    found = _vectors_for(vectors, vocabulary, fold_case, progress=_vector_progress(vectors, _progress))
    if found is None or len(found) == 0:
        raise CorpusVectorsError(
            f"none of the corpus's {len(vocabulary):,} distinct words has a vector in {vectors}; "
            "check that the vectors match the corpus's language and case (try fold_case)")
    chosen = resolve(recipe, len(found), nodes=nodes, edges=edges, k=k, roots=roots)
    graph = build_graph(found.vectors, nodes=chosen["nodes"], edges=chosen["edges"],
                        k=chosen["k"], seed=seed, progress=progress)
    fit_to_graph(chosen, graph)
    settings = TextSettings(**{**settings.to_json(), "stopwords": settings.stopwords,
                               "n_documents": len(documents),
                               "vectors": _vectors_meta(vectors, fold_case)})
    chosen.update(weighting=settings.weighting, stopwords=len(settings.stopwords))
    if settings_given:
        chosen["given"].append("settings")

    def fill(index):
        rows = [(w, int(graph.assignment[i]), document_frequency[w])
                for i, w in enumerate(found.words)]
        add_words(index.catalog, rows, meta={TEXT_META: settings.to_json(), RECIPE_META: chosen})
        return add_documents(index, documents, skip_empty=skip_empty, batch_size=batch_size,
                             progress=progress, store_text=store_text)

    index, report = create_and_fill(path, graph, fill, roots=create_roots(chosen["roots"]), p=p,
                                    seed=seed, on_violation=on_violation)
    covered = sum(frequency[w] for w in found.words)
    report.update({
        "kind": "text",
        "vocabulary": len(vocabulary),
        "words_with_vectors": len(found),
        "token_coverage": covered / sum(frequency.values()),
        "recipe": chosen,
    })
    return index, report


def add_documents(index, documents, vectors=None, *, skip_empty=False, batch_size=1000,
                  progress=None, upsert=False, store_text=True, skip_existing=False):
    """Add documents to a text index, in committed batches of ``batch_size``.

    Words the index does not know go to the node nearest their vector when
    ``vectors`` (a WordVectors, a path, or ``"stored"`` for the file the
    index was built with, if it still exists) has one; the others are
    ignored. A document with no known word raises :class:`CorpusError`, or
    is skipped with a warning when ``skip_empty``. All input is checked
    before anything is written. Every batch is all-or-nothing, and the ones
    before an interruption stay committed (a KeyboardInterrupt carries their
    keys as ``added``). ``store_text`` keeps each text in its fields
    (``fields["text"]``). ``skip_existing`` leaves out documents whose keys
    are live already (to resume an interrupted add). Returns a report with
    ``added`` (keys), ``replaced`` (a count), ``existing`` (keys left out),
    ``skipped`` (keys or positions) and ``new_words``.
    """
    check_can_add(index, batch_size)
    encoder = TextEncoder.of_index(index)
    documents = [_as_document(doc, i) for i, doc in enumerate(documents)]
    existing = []
    if skip_existing:
        documents, existing = drop_existing(index, documents, lambda d: d["key"], upsert)
    _progress = progress or (lambda stage, done, total: None)
    if isinstance(vectors, str) and vectors == "stored":
        vectors = stored_vectors_path(index)
    new_rows = []
    if vectors is not None:
        new_rows = _place_words(index, encoder, encoder.unknown_words(d["text"] for d in documents),
                                vectors, _progress)

    measures, keys, labels, fields, names, skipped = [], [], [], [], [], []
    for position, doc in enumerate(documents):
        measure = encoder.measure(doc["text"])
        name = doc["key"] if doc["key"] is not None else f"document {position}"
        if measure is None:
            if not skip_empty:
                n_stopwords = encoder.only_stopwords(doc["text"])
                if n_stopwords:
                    raise CorpusError(
                        f"{name} has only stop words of this index "
                        f"({n_stopwords} token(s)); skip such documents "
                        "(skip_empty=True, --skip-empty), or build the index keeping stop "
                        "words (settings=text_settings(stopwords=()), --stopwords none)")
                raise CorpusError(
                    f"{name} has no word the index knows ({len(encoder.settings.tokens(doc['text']))} "
                    "tokens); pass vectors for new words, or skip such documents "
                    "(skip_empty=True, --skip-empty)")
            skipped.append(name)
            continue
        record = {**(doc["fields"] or {}), "text": doc["text"]} if store_text else doc["fields"]
        check_fields(record, name)
        measures.append(measure)
        keys.append(doc["key"])
        labels.append(doc["label"])
        fields.append(record)
        names.append(name)
    if skipped:
        warnings.warn(f"skipped {len(skipped)} document(s) with no known word (or stop words "
                      f"only), e.g. {skipped[0]!r}",
                      SkippedDocumentsWarning, stacklevel=2)
    if any(k is None for k in keys) and not all(k is None for k in keys):
        raise CorpusError("some documents have keys and some do not; give every document a key "
                          "or none")
    if upsert and keys and keys[0] is None:
        raise CorpusError("upsert needs a key on every document: the documents to replace are "
                          "found by key")
    check_new_keys(index, keys, upsert)

    # The measures are checked as a whole here (the fields were, above), so
    # that a bad one stops the add before the new words are written.
    batch = check_input(index, measures, names)

    replaced = count_live(index, keys) if upsert else 0
    # Only now, with the input known to be good, is anything written.
    if new_rows:
        add_words(index.catalog, new_rows)
    added = add_in_batches(index, batch, None if keys and keys[0] is None else keys, labels,
                           fields, batch_size=batch_size, upsert=upsert, progress=_progress)
    return {"added": added, "replaced": replaced, "existing": existing, "skipped": skipped,
            "new_words": len(new_rows)}


def _vector_progress(vectors, progress):
    """A :func:`load_vectors` progress callback that reports stage
    ``"vectors"`` against the file's size; None unless ``vectors`` is a file."""
    if not isinstance(vectors, (str, os.PathLike)) or not os.path.isfile(vectors):
        return None
    size = os.path.getsize(vectors)
    progress("vectors", 0, size)
    return lambda done: progress("vectors", done, size)


def _place_words(index, encoder, words, vectors, progress=lambda *a: None):
    """Nodes for unknown ``words`` (the node nearest each one's vector), as
    (word, node, 0) rows; the encoder learns them, nothing is stored."""
    if not words:
        return []
    stored = encoder.settings.vectors or {}
    found = _vectors_for(vectors, words, bool(stored.get("fold_case", False)),
                         progress=_vector_progress(vectors, progress))
    if found is None or len(found) == 0:
        return []
    if found.dim != index.graph.coords.shape[1]:
        raise CorpusError(
            f"the vectors in {vectors if not isinstance(vectors, WordVectors) else 'the given WordVectors'} "
            f"have dimension {found.dim}; this index was built with "
            f"{index.graph.coords.shape[1]}-dimensional vectors")
    nodes = index.graph.nearest_nodes(found.vectors).tolist()
    encoder.word_nodes.update(zip(found.words, nodes))
    return [(w, n, 0) for w, n in zip(found.words, nodes)]


def text_measures(index, texts, vectors=None):
    """Query measures for ``texts`` on a text index. Unknown words go to the
    node nearest their vector when ``vectors`` is given (nothing is stored),
    and are ignored otherwise. A text with no usable word raises
    :class:`CorpusError`."""
    encoder = TextEncoder.of_index(index)
    texts = [texts] if isinstance(texts, str) else list(texts)
    if vectors is not None:
        _place_words(index, encoder, encoder.unknown_words(texts), vectors)
    measures = []
    for i, text in enumerate(texts):
        measure = encoder.measure(text)
        if measure is None:
            tokens = encoder.settings.tokens(text)
            n_stopwords = encoder.only_stopwords(text)
            if n_stopwords:
                raise InvalidMeasureError(
                    f"query {i} ({text[:40]!r}) has only stop words of this index "
                    f"({n_stopwords} token(s)); use other words")
            raise InvalidMeasureError(
                f"query {i} ({text[:40]!r}) has no word the index knows "
                f"({len(tokens)} token(s)); try other words, or pass vectors for new ones")
        measures.append(measure)
    return measures


def stored_vectors_path(index):
    """The vector file a text index was built with, if it still exists."""
    stored = index.catalog.meta_value(TEXT_META) or {}
    path = (stored.get("vectors") or {}).get("path")
    return path if path and os.path.exists(path) else None


def text_info(index):
    """What :meth:`SobolevIndex.info` leaves out for a text index: the word
    count, weighting and tokenizer; ``{"words": None}`` for other indexes."""
    stored = index.catalog.meta_value(TEXT_META)
    if stored is None:
        return {"words": None}
    settings = TextSettings.from_json(stored)
    return {"words": len(read_words(index.catalog)), "weighting": settings.weighting,
            "token_pattern": settings.pattern, "stopwords": len(settings.stopwords),
            "vectors": (settings.vectors or {}).get("path")}
