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
    """How text becomes words and weights.

    The settings are stored with the index, so that every later document
    and query is read the same way. Their defaults keep every word and
    weigh words by counts; a build's recipe adds English stop words and
    tf-idf (:func:`text_settings` makes settings with the recipe's
    defaults). The settings are frozen.

    Parameters
    ----------
    pattern : str, default="unicode"
        A name of :data:`~sobolev_index.ingest.text.TOKEN_PATTERNS`
        ("unicode" or "ascii") or a regular expression; it is stored as
        given, so an index built with a regex (as every index of releases
        before "unicode" was) keeps reading text with that regex.
    lowercase : bool, default=True
        Lowercase the text before matching the pattern.
    stopwords : iterable of str, default=()
        Words left out of every document and query. They are written as the
        pattern writes its words (:func:`~sobolev_index.ingest.text.normalize_word`;
        for "unicode": lowercased, NFC, ASCII apostrophes), and kept as a
        sorted tuple without repeats.
    weighting : {"count", "tfidf"}, default="count"
        A word's weight in a document: its count, or its count times its
        smoothed idf ``log((1 + n) / (1 + df)) + 1``.
    n_documents : int, default=0
        The documents the idf was counted over (tf-idf only); set by
        :func:`build_index`.
    vectors : dict, default={}
        What the index's word vectors were (their file's path, dimension,
        ``fold_case``, what was learned); set by :func:`build_index`.

    Raises
    ------
    ValueError
        If ``weighting`` is not one of those names, or ``pattern`` is
        neither a pattern name nor a regular expression (so a bad pattern
        fails here, before anything is written).

    See Also
    --------
    text_settings : Settings with a recipe's defaults.
    sobolev_index.ingest.text.tokenize : How the pattern reads a text.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import TextSettings
    >>> settings = TextSettings(stopwords=["The", "A"], weighting="tfidf")
    >>> settings.stopwords
    ('a', 'the')
    >>> settings.tokens("The Cat and a dog")
    ['cat', 'and', 'dog']
    >>> TextSettings(weighting="bm25")
    Traceback (most recent call last):
        ...
    ValueError: weighting is 'bm25'; expected one of ('count', 'tfidf')
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
        """The settings as a dict of their fields, as the index's catalog stores them.

        Returns
        -------
        dict
            ``pattern``, ``lowercase``, ``stopwords`` (a tuple; JSON writes
            it as a list), ``weighting``, ``n_documents`` and ``vectors``.
        """
        return asdict(self)

    @classmethod
    def from_json(cls, value):
        """Settings from a dict as :meth:`to_json` makes it.

        Parameters
        ----------
        value : dict
            Fields of the settings, as read back from JSON (``stopwords`` a
            list or tuple); fields it lacks take their defaults.

        Returns
        -------
        TextSettings
            The settings.

        Raises
        ------
        TypeError
            If ``value`` has a name that is not a field.
        ValueError
            If a field's value is refused, as by the constructor.

        Examples
        --------
        >>> from sobolev_index.ingest.documents import TextSettings
        >>> settings = TextSettings(stopwords=["the"], weighting="tfidf")
        >>> TextSettings.from_json(settings.to_json()) == settings
        True
        """
        value = dict(value)
        value["stopwords"] = tuple(value.get("stopwords", ()))
        return cls(**value)

    def tokens(self, text):
        """The words of ``text`` as these settings read it, stop words left out.

        Parameters
        ----------
        text : str
            A document's or a query's text.

        Returns
        -------
        list of str
            Its words in order, as :func:`~sobolev_index.ingest.text.tokenize`
            gives them with this pattern, case and stop words.

        Raises
        ------
        ValueError
            If ``text`` is not a str.
        """
        return tokenize(text, self.pattern, self.lowercase, frozenset(self.stopwords))


def text_defaults(recipe):
    """The :class:`TextSettings` options of a build ``recipe``.

    English stop words and tf-idf weights, the same for both recipes.

    Parameters
    ----------
    recipe : {"quality", "fast"}
        A build recipe (see :mod:`~sobolev_index.ingest.recipes`).

    Returns
    -------
    dict
        ``stopwords`` (the sorted tuple of
        :data:`~sobolev_index.ingest.text.ENGLISH_STOPWORDS`) and
        ``weighting`` (``"tfidf"``), as keyword arguments of
        :class:`TextSettings`.

    Raises
    ------
    ValueError
        If ``recipe`` is not a recipe's name.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import text_defaults
    >>> options = text_defaults("fast")
    >>> options["weighting"], len(options["stopwords"]), options["stopwords"][:3]
    ('tfidf', 126, ('a', 'about', 'above'))
    """
    check_recipe(recipe)
    return {"stopwords": tuple(sorted(ENGLISH_STOPWORDS)), "weighting": "tfidf"}


def text_settings(recipe=DEFAULT_RECIPE, *, pattern=None, stopwords=None, weighting=None,
                  lowercase=True):
    """:class:`TextSettings` with a recipe's defaults for the options not given.

    Each option left as None is taken from ``recipe`` (:func:`text_defaults`),
    and the token pattern from :class:`TextSettings`. (``TextSettings(...)``
    alone drops the recipe's stop words and tf-idf.)

    Parameters
    ----------
    recipe : {"quality", "fast"}, default="quality"
        The build recipe whose text settings fill in the options not given.
    pattern : str, optional
        A token pattern name or a regular expression; None keeps
        ``"unicode"``.
    stopwords : iterable of str, optional
        The stop words; None keeps the recipe's English ones, an empty list
        has none.
    weighting : {"count", "tfidf"}, optional
        None keeps the recipe's ``"tfidf"``.
    lowercase : bool, default=True
        Lowercase text before matching the pattern.

    Returns
    -------
    TextSettings
        The settings, for ``build_index(settings=...)``.

    Raises
    ------
    ValueError
        If ``recipe``, ``pattern`` or ``weighting`` is refused.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import text_settings
    >>> settings = text_settings()
    >>> settings.pattern, settings.weighting, len(settings.stopwords)
    ('unicode', 'tfidf', 126)
    >>> settings = text_settings(pattern="ascii", stopwords=[], weighting="count")
    >>> settings.pattern, settings.weighting, settings.stopwords
    ('ascii', 'count', ())
    """
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
    """Turns texts into (nodes, masses) measures with a word -> node table.

    A word's weight (its count, or its tf-idf) goes to its node; words
    without a node are left out. The encoder of an index is
    :meth:`of_index`.

    Parameters
    ----------
    settings : TextSettings
        How texts become words and weights; kept as ``settings``.
    word_nodes : mapping of str to int
        The node of each known word; copied into the dict ``word_nodes``.
    document_frequency : mapping of str to int, optional
        The number of documents each word occurs in, for tf-idf weights (a
        word not in it counts 0); copied into the dict
        ``document_frequency``. None (the default) is empty.

    See Also
    --------
    text_measures : The measures of query texts on a text index.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import TextEncoder, TextSettings
    >>> encoder = TextEncoder(TextSettings(), {"cat": 0, "kitten": 0, "dog": 1})
    >>> nodes, masses = encoder.measure("The cat, the kitten and the dog")
    >>> nodes.tolist(), masses.tolist()
    ([0, 1], [2.0, 1.0])
    >>> encoder.unknown_words(["a zebra", "the cat and a yak"])
    ['a', 'zebra', 'the', 'and', 'yak']

    With tf-idf weights, over 3 documents:

    >>> encoder = TextEncoder(TextSettings(weighting="tfidf", n_documents=3),
    ...                       {"cat": 0, "kitten": 0, "dog": 1}, {"cat": 3, "kitten": 1, "dog": 1})
    >>> nodes, masses = encoder.measure("The cat, the kitten and the dog")
    >>> nodes.tolist(), masses.round(4).tolist()
    ([0, 1], [2.6931, 1.6931])
    """

    def __init__(self, settings, word_nodes, document_frequency=None):
        self.settings = settings
        self.word_nodes = dict(word_nodes)
        self.document_frequency = dict(document_frequency or {})

    @classmethod
    def of_index(cls, index):
        """The encoder stored with a text index (see :func:`build_index`).

        Parameters
        ----------
        index : SobolevIndex
            An open index.

        Returns
        -------
        TextEncoder
            The index's settings, its word -> node table and the document
            frequencies of its words.

        Raises
        ------
        CorpusError
            If the index was not built from text (it has no word table):
            :class:`~sobolev_index.errors.CorpusError`.
        """
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
        """The words of ``texts`` that have no node.

        Parameters
        ----------
        texts : iterable of str
            The texts, read with :attr:`settings` (stop words are not words
            here).

        Returns
        -------
        list of str
            Each word without a node once, in first-seen order.
        """
        seen = {}
        for text in texts:
            for word in self.settings.tokens(text):
                if word not in self.word_nodes:
                    seen.setdefault(word, None)
        return list(seen)

    def only_stopwords(self, text):
        """The number of tokens of ``text`` when every one is a stop word.

        It says why a text with tokens can still have no words.

        Parameters
        ----------
        text : str
            A document's or a query's text.

        Returns
        -------
        int
            Its number of tokens if it has some and all are stop words of
            :attr:`settings`, else 0.
        """
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
        """The measure of one text: its word weights on the words' nodes.

        Parameters
        ----------
        text : str
            A document's or a query's text.
        unknown : collections.Counter, optional
            If given, counts the text's words without a node, each
            occurrence (stop words are not words here).

        Returns
        -------
        tuple of (numpy.ndarray, numpy.ndarray) or None
            ``(nodes, masses)``: the nodes of its words (int64, ascending,
            distinct) and the word weights summed per node (float64, not
            normalised: the index normalises). None when none of its words
            has a node.
        """
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

    Each word of the documents (stop words aside) that has a vector
    becomes part of the graph: the graph is made from the vectors of the
    corpus's words, by farthest-point clustering into at most ``nodes``
    nodes (every word its own node when there is room for all) with
    ``edges`` between them, see :meth:`~sobolev_index.Graph.from_points`.
    The word -> node table, the document frequencies and the
    :class:`TextSettings` are kept in the index's catalog, so that
    :func:`add_documents` and :func:`text_measures` read text the same way
    later. A build is not incremental: if it fails, nothing is left at
    ``path`` (an empty folder given stays, empty).

    ``recipe`` fills in every one of ``nodes``, ``edges``, ``k``, ``roots``
    and ``settings`` left as None: every word a node (at most 10,000), edges
    to the 5 nearest nodes, English stop words, tf-idf, and 10 roots
    ("quality") or one ("fast"). What was chosen is recorded in the catalog
    (``recipe`` in :func:`~sobolev_index.ingest.recipes.recipe_info`) and
    in the report.

    Parameters
    ----------
    path : str or path-like
        A directory that does not exist yet, or an empty one.
    documents : iterable of dict or str
        Dicts as :func:`read_corpus` yields them (``text``, and optionally
        ``key``, ``label`` and ``fields``; other names become fields), or
        texts. A document without a key is named by the index; either every
        document has a key or none has.
    vectors : WordVectors, str or path-like
        A :class:`~sobolev_index.ingest.embeddings.WordVectors`, a vector
        file path (only the corpus's words are read, see
        :func:`~sobolev_index.ingest.embeddings.load_vectors`), or
        ``"learn"``: vectors learned from these documents
        (:func:`~sobolev_index.ingest.learn.learn_vectors`, read with the
        index's token pattern), written into the index's directory as
        ``learned-vectors.bin`` and recorded as the index's vector file.
        Words seen fewer than ``min_count`` times get no vector, so they
        are not part of the documents; the report's coverage counts them.
    recipe : {"quality", "fast"}, default="quality"
        See :mod:`~sobolev_index.ingest.recipes`.
    nodes : int, optional
        The most nodes the graph has (>= 1). None: the recipe's.
    edges : {"log", "sqrt", "knn"}, optional
        How the nodes are joined; None: the recipe's ``"knn"``.
    k : int, optional
        The nearest nodes each node is joined to, with ``edges="knn"`` only.
        None: the recipe's 5 (at most the nodes less one).
    roots : int or list of int, optional
        A count (1: the most central node; more: random nodes) or a list of
        nodes. None: the recipe's (cut to the graph's nodes).
    p : float or "inf", default=1
        The default p of the index's searches, as for
        :meth:`~sobolev_index.SobolevIndex.create`.
    seed : int, default=0
        Seeds the clustering, the random roots, any perturbation of lengths
        and learned vectors.
    settings : TextSettings, optional
        How text becomes words and weights. None: the recipe's
        (:func:`text_defaults`).
    fold_case : bool, default=False
        With a vector file: lowercase its words before matching them to the
        corpus's (as :func:`~sobolev_index.ingest.embeddings.load_vectors`
        does). Recorded, and used again when new words are placed.
    skip_empty : bool, default=False
        Skip documents with no word that has a vector (or only stop words),
        with a :class:`~sobolev_index.errors.SkippedDocumentsWarning`,
        instead of raising :class:`~sobolev_index.errors.CorpusError`.
    store_text : bool, default=True
        Keep each document's text as its field ``"text"`` (a document may
        then have no field of that name of its own).
    batch_size : int, default=1000
        Documents added per committed batch (>= 1).
    progress : callable, optional
        ``progress(stage, done, total)``, called as work advances, for the
        stages "reading" (documents), "vectors" (bytes of a vector file),
        "tokens", "pairs" and "svd" (learning vectors), "graph" (cluster
        centres) and "adding" (documents).
    on_violation : {"perturb", "raise"}, default="perturb"
        What a root with two equally short paths to some node does, as for
        :meth:`~sobolev_index.SobolevIndex.create` (whose default is
        "raise").
    learn : dict, optional
        With ``vectors="learn"`` only: options of
        :func:`~sobolev_index.ingest.learn.learn_vectors` among ``dim``,
        ``window`` and ``min_count``
        (:data:`~sobolev_index.ingest.learn.LEARN_DEFAULTS` otherwise).

    Returns
    -------
    index : SobolevIndex
        The new index, open for writing; close it when done.
    report : dict
        :func:`add_documents`'s report for the documents, and ``nodes``,
        ``edges`` (of the graph), ``roots`` (the root nodes), ``kind``
        (``"text"``), ``vocabulary`` (the corpus's distinct words, stop
        words aside), ``words_with_vectors``, ``token_coverage`` (the share
        of the corpus's tokens that have a vector), ``recipe`` (what was
        chosen) and ``learned`` (the report of
        :func:`~sobolev_index.ingest.learn.learn_vectors`, or None).

    Raises
    ------
    FileExistsError
        If ``path`` exists and is not an empty directory.
    TypeError
        If ``settings`` is not a :class:`TextSettings`.
    ValueError
        If ``recipe``, ``nodes``, ``edges``, ``k``, ``roots``, ``p`` or
        ``batch_size`` is refused, or ``learn`` is given without
        ``vectors="learn"`` or with other options.
    CorpusError
        If there are no documents, no document has a word (or has one
        besides stop words), a document has no word with a vector (unless
        ``skip_empty``), some documents have keys and others not, a key is
        repeated, or a document has a field ``"text"`` with ``store_text``
        (:class:`~sobolev_index.errors.CorpusError`).
    CorpusVectorsError
        If the vector file does not exist, or none of the corpus's words has
        a vector in it (:class:`~sobolev_index.errors.CorpusVectorsError`).
    VectorFileError
        If the vector file is malformed.

    See Also
    --------
    add_documents : Add documents to the index.
    text_measures : Query measures for texts.
    sobolev_index.ingest.pipelines.build_from_files : The command line's build, from files.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import build_index, text_measures
    >>> from sobolev_index.ingest.embeddings import WordVectors
    >>> vectors = WordVectors(["cat", "dog", "fish", "car", "bus", "train"],
    ...                       [[0.0, 1.0], [0.2, 1.0], [0.5, 0.8], [1.0, 0.0], [1.0, 0.2], [0.9, 0.3]])
    >>> docs = [{"key": "pets", "text": "The cat and the dog"},
    ...         {"key": "sea", "text": "A fish, a fish"},
    ...         {"key": "roads", "text": "A car and a bus", "label": "transport"}]
    >>> index, report = build_index("build.idx", docs, vectors)
    >>> len(index), report["added"], report["vocabulary"], report["words_with_vectors"]
    (3, ['pets', 'sea', 'roads'], 5, 5)
    >>> report["recipe"]["weighting"], report["nodes"]
    ('tfidf', 5)
    >>> found = index.search(text_measures(index, ["my dog", "a bus"]), k=2)
    >>> for hits in found.to_records():
    ...     print([(hit["key"], round(hit["distance"], 4)) for hit in hits])
    [('pets', 0.6406), ('sea', 1.1192)]
    [('roads', 0.7231), ('sea', 1.2033)]
    >>> index.close()

    From a vector file, with counts and every word kept, and one root:

    >>> from sobolev_index.ingest.documents import TextSettings
    >>> from sobolev_index.ingest.embeddings import write_word2vec_text
    >>> write_word2vec_text("tiny.vec", vectors.words, vectors.vectors)
    >>> index, report = build_index("counts.idx", ["a cat", "a dog", "a car"], "tiny.vec",
    ...                             recipe="fast", settings=TextSettings())
    >>> report["added"], report["vocabulary"], report["words_with_vectors"], len(index.roots)
    (['doc-1', 'doc-2', 'doc-3'], 4, 3, 1)
    >>> index.close()
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

    The documents are read with the index's :class:`TextSettings`. Words the
    index does not know go to the node nearest their vector when
    ``vectors`` has one (and are kept in the index's word table); the others
    are ignored. All input is checked before anything is written. Every
    batch is all-or-nothing, and the ones before an interruption stay
    committed (a KeyboardInterrupt carries their keys as ``added``).

    Parameters
    ----------
    index : SobolevIndex
        A text index (made by :func:`build_index`), open for writing.
    documents : iterable of dict or str
        As for :func:`build_index`.
    vectors : WordVectors, str or path-like, optional
        Vectors to place new words by: a
        :class:`~sobolev_index.ingest.embeddings.WordVectors`, a vector file
        path, or ``"stored"`` for the file the index was built with, if it
        still exists (not vectors learned from the build's corpus, which
        has every word of them already). None (the default) places no new
        words.
    skip_empty : bool, default=False
        Skip a document with no known word (or only stop words) with a
        :class:`~sobolev_index.errors.SkippedDocumentsWarning` instead of
        raising :class:`~sobolev_index.errors.CorpusError`.
    batch_size : int, default=1000
        Documents per committed batch (>= 1).
    progress : callable, optional
        ``progress(stage, done, total)``, for the stages "vectors" (bytes of
        a vector file) and "adding" (documents).
    upsert : bool, default=False
        Replace the live documents with the same keys (every document then
        needs a key) instead of refusing their keys.
    store_text : bool, default=True
        Keep each text in its fields (``fields["text"]``).
    skip_existing : bool, default=False
        Leave out documents whose keys are live already (to resume an
        interrupted add); not with ``upsert``.

    Returns
    -------
    dict
        ``added`` (keys), ``replaced`` (a count), ``existing`` (keys left
        out), ``skipped`` (keys or positions), ``new_words`` (words placed
        by their vectors), ``read`` (the documents given), and the words
        that stayed unknown and were dropped from the documents:
        ``unknown_words`` (how many distinct), ``unknown_tokens`` (how many
        occurrences) and ``unknown_examples`` (the five most frequent).

    Raises
    ------
    CorpusError
        If the index is open for reading or was not built from text, a
        document has no known word (unless ``skip_empty``), some documents
        have keys and others not, ``upsert`` is given without keys, a
        document has a field ``"text"`` with ``store_text``, or the vectors'
        dimension is not the index's
        (:class:`~sobolev_index.errors.CorpusError`).
    CorpusKeyError
        If a key is repeated, or (without ``upsert`` or ``skip_existing``)
        is live in the index already.
    CorpusVectorsError
        If the vector file does not exist.
    ValueError
        If ``batch_size`` is not an int >= 1, or ``skip_existing`` is given
        with ``upsert``.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import add_documents, build_index
    >>> from sobolev_index.ingest.embeddings import WordVectors
    >>> vectors = WordVectors(["cat", "dog", "fish", "car", "bus", "train"],
    ...                       [[0.0, 1.0], [0.2, 1.0], [0.5, 0.8], [1.0, 0.0], [1.0, 0.2], [0.9, 0.3]])
    >>> docs = [{"key": "pets", "text": "The cat and the dog"},
    ...         {"key": "sea", "text": "A fish, a fish"},
    ...         {"key": "roads", "text": "A car and a bus", "label": "transport"}]
    >>> index, _ = build_index("add.idx", docs, vectors)
    >>> report = add_documents(index, [{"key": "rails", "text": "The train, the bus"}], vectors)
    >>> report["added"], report["new_words"], len(index)
    (['rails'], 1, 4)
    >>> index.get("rails")["fields"]
    {'text': 'The train, the bus'}

    Without vectors, a word the index does not know is left out, and a
    document with none it knows is refused:

    >>> report = add_documents(index, ["a fish and a boat"])
    >>> report["unknown_words"], report["unknown_examples"]
    (1, ['boat'])
    >>> add_documents(index, ["a boat"])
    Traceback (most recent call last):
        ...
    sobolev_index.errors.CorpusError: document 0 has no word the index knows (1 token(s); ...
    >>> index.close()
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
    """Query measures for ``texts`` on a text index.

    The texts are read with the index's :class:`TextSettings` and weighted
    as its documents are. Unknown words go to the node nearest their vector
    when ``vectors`` is given (nothing is stored), and are ignored
    otherwise.

    Parameters
    ----------
    index : SobolevIndex
        A text index (made by :func:`build_index`), open for reading or
        writing.
    texts : str or iterable of str
        One query text, or several.
    vectors : WordVectors, str or path-like, optional
        A :class:`~sobolev_index.ingest.embeddings.WordVectors` or a vector
        file path, to place words the index does not know.

    Returns
    -------
    list of tuple of (numpy.ndarray, numpy.ndarray)
        One ``(nodes, masses)`` measure per text (one for a single str), as
        :meth:`~sobolev_index.SobolevIndex.search` takes them.

    Raises
    ------
    InvalidMeasureError
        If a text has no usable word: only stop words of the index, or no
        word it knows (:class:`~sobolev_index.errors.InvalidMeasureError`).
    CorpusError
        If the index was not built from text, or the vectors' dimension is
        not the index's.
    CorpusVectorsError
        If the vector file does not exist.
    ValueError
        If a text is not a str.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import build_index, text_measures
    >>> from sobolev_index.ingest.embeddings import WordVectors
    >>> vectors = WordVectors(["cat", "dog", "fish", "car", "bus", "train"],
    ...                       [[0.0, 1.0], [0.2, 1.0], [0.5, 0.8], [1.0, 0.0], [1.0, 0.2], [0.9, 0.3]])
    >>> docs = [{"key": "pets", "text": "The cat and the dog"},
    ...         {"key": "sea", "text": "A fish, a fish"},
    ...         {"key": "roads", "text": "A car and a bus", "label": "transport"}]
    >>> index, _ = build_index("measures.idx", docs, vectors)
    >>> [(nodes.tolist(), masses.round(4).tolist()) for nodes, masses in
    ...  text_measures(index, ["my dog", "a cat, a dog and a fish"])]
    [([1], [1.6931]), ([0, 1, 2], [1.6931, 1.6931, 1.6931])]
    >>> text_measures(index, "a train", vectors)[0][0].tolist()
    [4]
    >>> text_measures(index, "a train")
    Traceback (most recent call last):
        ...
    sobolev_index.errors.InvalidMeasureError: query 0 ('a train') has no word the index knows ...
    >>> index.close()
    """
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
    """The vector file a text index was built with, if it still exists.

    Learned vectors are kept in the index's directory; a file given to the
    build is recorded by its absolute path.

    Parameters
    ----------
    index : SobolevIndex
        An open index.
    placing : bool, default=False
        Only a file that can place words the index does not know, so not
        the vectors learned from the build's corpus, whose every word the
        index knows already.

    Returns
    -------
    str or None
        The file's path; None if it no longer exists, the build was given
        :class:`~sobolev_index.ingest.embeddings.WordVectors` rather than a
        file, the index is not a text index, or (with ``placing``) the
        vectors were learned.

    Examples
    --------
    >>> import os
    >>> from sobolev_index.ingest.documents import build_index, stored_vectors_path
    >>> from sobolev_index.ingest.embeddings import write_word2vec_text
    >>> write_word2vec_text("stored.vec", ["cat", "dog"], [[0.0, 1.0], [0.25, 1.0]])
    >>> index, _ = build_index("stored.idx", ["a cat", "a dog"], "stored.vec")
    >>> os.path.basename(stored_vectors_path(index))
    'stored.vec'
    >>> os.remove("stored.vec")
    >>> print(stored_vectors_path(index))
    None
    >>> index.close()
    """
    stored = _stored_vectors(index)
    if placing and stored.get("learned"):
        return None
    path = _stored_path(index, stored.get("path"))
    return path if path and os.path.exists(path) else None


def vectors_learned(index):
    """Whether a text index's vectors were learned from its build's corpus.

    That is, whether it was built with ``build_index(vectors="learn")``.

    Parameters
    ----------
    index : SobolevIndex
        An open index.

    Returns
    -------
    bool
        True for learned vectors; False otherwise, and for an index not
        built from text.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import build_index, vectors_learned
    >>> texts = ["the cat sat on the mat", "the dog sat on the rug",
    ...          "a cat and a dog played", "the cat saw the dog"]
    >>> index, report = build_index("learned.idx", texts, "learn", learn={"dim": 2, "window": 2})
    >>> vectors_learned(index), report["learned"]["words"], report["words_with_vectors"]
    (True, 6, 3)
    >>> index.close()
    """
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
    """What :meth:`~sobolev_index.SobolevIndex.info` leaves out for a text index.

    Parameters
    ----------
    index : SobolevIndex
        An open index.

    Returns
    -------
    dict
        ``words`` (how many words have a node), ``weighting``,
        ``token_pattern``, ``stopwords`` (how many), ``vectors`` (the path of
        the build's vector file, whether or not it still exists; for
        learned vectors the file in the index's directory, or None in a
        copy of the index without it; None when the build was given
        :class:`~sobolev_index.ingest.embeddings.WordVectors`) and
        ``learned`` (what was learned, or None); ``{"words": None}`` for an
        index not built from text.

    Examples
    --------
    >>> from sobolev_index.ingest.documents import build_index, text_info
    >>> from sobolev_index.ingest.embeddings import WordVectors
    >>> vectors = WordVectors(["cat", "dog", "fish", "car", "bus", "train"],
    ...                       [[0.0, 1.0], [0.2, 1.0], [0.5, 0.8], [1.0, 0.0], [1.0, 0.2], [0.9, 0.3]])
    >>> docs = [{"key": "pets", "text": "The cat and the dog"},
    ...         {"key": "sea", "text": "A fish, a fish"},
    ...         {"key": "roads", "text": "A car and a bus", "label": "transport"}]
    >>> index, _ = build_index("info.idx", docs, vectors)
    >>> text_info(index)
    {'words': 5, 'weighting': 'tfidf', 'token_pattern': 'unicode', 'stopwords': 126, 'vectors': None,
     'learned': None}
    >>> index.close()
    """
    stored = index.catalog.meta_value(TEXT_META)
    if stored is None:
        return {"words": None}
    settings = TextSettings.from_json(stored)
    return {"words": len(read_words(index.catalog)), "weighting": settings.weighting,
            "token_pattern": settings.pattern, "stopwords": len(settings.stopwords),
            "vectors": _stored_path(index, (settings.vectors or {}).get("path"),
                                    learned_only_if_there=True),
            "learned": (settings.vectors or {}).get("learned")}
