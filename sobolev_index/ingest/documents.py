"""Documents as measures: corpus files in, an index of bags of words out.

A document becomes a measure on the graph's nodes: its words are tokenized
(:mod:`sobolev_index.ingest.text`), weighted by normalised counts or tf-idf, and
each word sits at the node of its word vector's cluster. The word -> node
table is made when the index is built (farthest-point clustering of the
corpus's word vectors) and kept in the index's catalog, so that queries and
later additions need no vectors for words the index already knows. A word
first seen later goes to the node nearest its vector, when vectors are given.

Corpus files are read by :func:`~sobolev_index.ingest.corpus.read_corpus`
(JSON Lines, CSV and TSV, label<TAB>text lines, plain text, directories of
``.txt``), which this module re-exports.
"""
import math
import os
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import ADVICE, CorpusError, CorpusVectorsError, InvalidMeasureError, SkippedDocumentsWarning
from ..index.storage import require_new_directory
from .corpus import as_document, read_corpus
from .embeddings import WordVectors, load_vectors
from .fill import (
    TEXT_META,
    add_in_batches,
    build_graph,
    check_can_add,
    check_fields,
    check_input,
    check_new_keys,
    count_live,
    create_and_fill,
    drop_existing,
)
from .learn import LEARN_DEFAULTS, learn_vectors, write_vectors
from .recipes import (
    DEFAULT_RECIPE,
    RECIPE_META,
    check_recipe,
    create_roots,
    fit_to_graph,
    resolve,
)
from .text import (
    DEFAULT_TOKEN_PATTERN,
    ENGLISH_STOPWORDS,
    check_token_pattern,
    normalize_word,
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
    "vectors_learned",
    "text_info",
    "text_defaults",
    "text_settings",
]

WEIGHTINGS = ("count", "tfidf")
# vectors="learn" (--vectors learn): vectors learned from the corpus itself,
# kept in the index's directory under this name.
LEARN = "learn"
LEARNED_VECTORS = "learned-vectors.bin"


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

    def measure(self, text, unknown=None):
        """(nodes, masses) of one text, or None when none of its words has a
        node. Masses are the word weights summed per node (not normalised:
        the index normalises). ``unknown``, a Counter, counts the text's
        words without a node (stop words are not words here)."""
        tokens = self.settings.tokens(text)
        if unknown is not None:
            unknown.update(w for w in tokens if w not in self.word_nodes)
        counts = Counter(w for w in tokens if w in self.word_nodes)
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


def _learn_options(learn):
    options = dict(learn or {})
    unknown = sorted(set(options) - set(LEARN_DEFAULTS))
    if unknown:
        raise ValueError(f"learn has {', '.join(map(repr, unknown))}; expected options among "
                         f"{', '.join(LEARN_DEFAULTS)}")
    return options


def _vectors_name(vectors):
    """How messages name the vectors looked up: a file's path, or words."""
    if isinstance(vectors, WordVectors):
        return f"the {len(vectors):,} word vectors given"
    return os.fspath(vectors)


def _vectors_meta(vectors, fold_case):
    if isinstance(vectors, WordVectors):
        return {"path": None, "dim": vectors.dim, "fold_case": fold_case}
    return {"path": os.path.abspath(os.fspath(vectors)), "fold_case": fold_case}


# ------------------------------------------------------------------- build
def build_index(path, documents, vectors, *, recipe=DEFAULT_RECIPE, nodes=None, edges=None,
                k=None, roots=None, p=1, seed=0, settings=None, fold_case=False, skip_empty=False,
                store_text=True, batch_size=1000, progress=None, on_violation="perturb",
                learn=None):
    """Build a text index at ``path`` from ``documents`` and word vectors.

    ``documents``: dicts as from :func:`read_corpus` (or an iterable of
    them); ``vectors``: a :class:`WordVectors`, a vector file path (only
    the corpus's words are read), or ``"learn"``: vectors learned from
    these documents (:func:`~sobolev_index.ingest.learn.learn_vectors`,
    read with the index's token pattern; ``learn`` a dict of its options
    ``dim``, ``window`` and ``min_count``), written into the index's
    directory as ``learned-vectors.bin`` and recorded as the index's
    vector file (the report's ``learned`` says what was learned). Words
    seen fewer than ``min_count`` times get no vector, so they are not part
    of the documents; the report's coverage counts them. The graph is made from the vectors of the
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
    documents = [as_document(doc, i) for i, doc in enumerate(documents)]
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
                              f"{ADVICE['keep_stopwords']}")
        raise CorpusError(f"no document has a word matching the token pattern {settings.pattern!r}")
    vocabulary = sorted(frequency, key=lambda w: (-frequency[w], w))

    learned = None
    if isinstance(vectors, str) and vectors == LEARN:
        vectors, learned = learn_vectors(documents, pattern=settings.pattern,
                                         lowercase=settings.lowercase, seed=seed,
                                         progress=progress, **_learn_options(learn))
    elif learn is not None:
        raise ValueError("learn sets how vectors are learned; it needs vectors='learn'")
    found = _vectors_for(vectors, vocabulary, fold_case, progress=_vector_progress(vectors, _progress))
    if found is None or len(found) == 0:
        raise CorpusVectorsError(
            f"none of the corpus's {len(vocabulary):,} distinct words (besides stop words) has a "
            f"vector in {_vectors_name(vectors)}; check that the vectors match the corpus's "
            f"language and case {ADVICE['fold_case']}"
            + ("" if learned is None else f", or keep stop words {ADVICE['keep_stopwords']}"))
    chosen = resolve(recipe, len(found), nodes=nodes, edges=edges, k=k, roots=roots)
    graph = build_graph(found.vectors, nodes=chosen["nodes"], edges=chosen["edges"],
                        k=chosen["k"], seed=seed, progress=progress)
    fit_to_graph(chosen, graph)
    vectors_meta = _vectors_meta(vectors, fold_case)
    if learned is not None:
        # Relative to the index's directory, so that the index can move.
        vectors_meta = {"path": LEARNED_VECTORS, "fold_case": False, "dim": learned["dim"],
                        "learned": {name: learned[name] for name in
                                    ("documents", "words", "dim", "window", "min_count")}}
    settings = TextSettings(**{**settings.to_json(), "stopwords": settings.stopwords,
                               "n_documents": len(documents), "vectors": vectors_meta})
    chosen.update(weighting=settings.weighting, stopwords=len(settings.stopwords))
    if settings_given:
        chosen["given"].append("settings")

    def fill(index):
        if learned is not None:
            write_vectors(os.path.join(index.path, LEARNED_VECTORS), vectors)
        rows = [(w, int(graph.assignment[i]), document_frequency[w])
                for i, w in enumerate(found.words)]
        add_words(index.catalog, rows, meta={TEXT_META: settings.to_json(), RECIPE_META: chosen})
        # The build's words are the words with a vector: a document with
        # none of them is refused (or skipped) naming the vectors.
        missing = f"none of its words has a vector in {_vectors_name(vectors)}"
        if learned is not None:
            missing += (f" (learned from this corpus: words seen fewer than "
                        f"{learned['min_count']} times get none)")
        return _add_documents(index, documents, None, missing, skip_empty=skip_empty,
                              batch_size=batch_size, progress=progress, store_text=store_text)

    index, report = create_and_fill(path, graph, fill, roots=create_roots(chosen["roots"]), p=p,
                                    seed=seed, on_violation=on_violation)
    covered = sum(frequency[w] for w in found.words)
    report.update({
        "kind": "text",
        "vocabulary": len(vocabulary),
        "words_with_vectors": len(found),
        "token_coverage": covered / sum(frequency.values()),
        "recipe": chosen,
        "learned": learned,
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
    ``skipped`` (keys or positions), ``new_words`` (words placed by their
    vectors), ``read`` (the documents given), and the words that stayed
    unknown and were dropped from the documents: ``unknown_words`` (how
    many distinct), ``unknown_tokens`` (how many occurrences) and
    ``unknown_examples`` (the five most frequent).
    """
    if isinstance(vectors, str) and vectors == "stored":
        vectors = stored_vectors_path(index, placing=True)
    looked_up = (f"none of its words has a vector in {_vectors_name(vectors)}"
                 if vectors is not None else
                 f"no vectors were given to place new words {ADVICE['vectors']}")
    return _add_documents(index, documents, vectors, looked_up, skip_empty=skip_empty,
                          batch_size=batch_size, progress=progress, upsert=upsert,
                          store_text=store_text, skip_existing=skip_existing)


def _add_documents(index, documents, vectors, looked_up, *, skip_empty=False, batch_size=1000,
                   progress=None, upsert=False, store_text=True, skip_existing=False):
    """:func:`add_documents`; ``looked_up`` says, in the error for a
    document without a known word, where its words were looked for."""
    check_can_add(index, batch_size)
    encoder = TextEncoder.of_index(index)
    documents = [as_document(doc, i) for i, doc in enumerate(documents)]
    read = len(documents)
    existing = []
    if skip_existing:
        documents, existing = drop_existing(index, documents, lambda d: d["key"], upsert)
    _progress = progress or (lambda stage, done, total: None)
    new_rows = []
    if vectors is not None:
        new_rows = _place_words(index, encoder, encoder.unknown_words(d["text"] for d in documents),
                                vectors, _progress)
    # What is still unknown is dropped from the documents: counted (in the
    # same pass that measures them), not silent.
    unknown = Counter()

    measures, keys, labels, fields, names, skipped = [], [], [], [], [], []
    for position, doc in enumerate(documents):
        measure = encoder.measure(doc["text"], unknown)
        name = doc["key"] if doc["key"] is not None else f"document {position}"
        if measure is None:
            if not skip_empty:
                n_stopwords = encoder.only_stopwords(doc["text"])
                if n_stopwords:
                    raise CorpusError(
                        f"{name} has only stop words of this index "
                        f"({n_stopwords} token(s)); skip such documents "
                        f"{ADVICE['skip_empty']}, or build the index keeping stop "
                        f"words {ADVICE['keep_stopwords']}")
                n_tokens = len(encoder.settings.tokens(doc["text"]))
                raise CorpusError(
                    f"{name} has no word the index knows ({n_tokens} token(s)"
                    + (f"; {looked_up}" if n_tokens else "")
                    + f"); skip such documents {ADVICE['skip_empty']}")
            skipped.append(name)
            continue
        if store_text and "text" in (doc["fields"] or {}):
            raise CorpusError(
                f"{name} has a field 'text' besides the text it is indexed by; the index keeps "
                "each document's text as its field 'text': rename that field (column), or keep "
                f"no texts {ADVICE['no_text']}")
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
            "new_words": len(new_rows), "read": read, "unknown_words": len(unknown),
            "unknown_tokens": int(sum(unknown.values())),
            "unknown_examples": [w for w, _ in unknown.most_common(5)]}


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


def stored_vectors_path(index, placing=False):
    """The vector file a text index was built with, if it still exists
    (learned vectors are kept in the index's directory). With ``placing``:
    only a file that can place words the index does not know, so not the
    vectors learned from the build's corpus, whose every word the index
    knows already."""
    stored = _stored_vectors(index)
    if placing and stored.get("learned"):
        return None
    path = _stored_path(index, stored.get("path"))
    return path if path and os.path.exists(path) else None


def vectors_learned(index):
    """Whether a text index's vectors were learned from its build's corpus
    (``build_index(vectors="learn")``)."""
    return bool(_stored_vectors(index).get("learned"))


def _stored_vectors(index):
    return (index.catalog.meta_value(TEXT_META) or {}).get("vectors") or {}


def _stored_path(index, path, learned_only_if_there=False):
    # A relative path (learned vectors) is inside the index's directory; a
    # copy of the index made by shard or export has no such file.
    if not path or os.path.isabs(path):
        return path
    path = os.path.join(index.path, path)
    return path if os.path.exists(path) or not learned_only_if_there else None


def text_info(index):
    """What :meth:`SobolevIndex.info` leaves out for a text index: the word
    count, weighting and tokenizer; ``{"words": None}`` for other indexes."""
    stored = index.catalog.meta_value(TEXT_META)
    if stored is None:
        return {"words": None}
    settings = TextSettings.from_json(stored)
    return {"words": len(read_words(index.catalog)), "weighting": settings.weighting,
            "token_pattern": settings.pattern, "stopwords": len(settings.stopwords),
            "vectors": _stored_path(index, (settings.vectors or {}).get("path"),
                                    learned_only_if_there=True),
            "learned": (settings.vectors or {}).get("learned")}
