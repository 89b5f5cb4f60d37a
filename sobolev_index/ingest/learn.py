"""Word vectors learned from a corpus itself, for users who have no vectors.

:func:`ppmi_svd_vectors` counts which words occur near each other, weights
the counts by positive pointwise mutual information (PPMI) and reduces them
to a few dimensions with a truncated SVD (Levy, Goldberg & Dagan 2015 found
this as good as word2vec on word similarity for corpora of this size).
:func:`learn_vectors` does it for a corpus of documents as the index reads
them (the same token pattern), with the BLAS threads bounded so that a
busy machine does not slow it down, and :func:`write_vectors` writes the
result in a format every ``vectors=`` argument and ``--vectors`` option
reads. ``sobolev-index vectors`` and ``build --vectors learn`` use them, as
the quickstart does.

Vectors learned from a small corpus are only as good as its statistics:
words seen fewer than ``min_count`` times get none (they are dropped from
the documents as words without a vector are), and docs/quality.md measures
what learned vectors cost in k-NN accuracy against pretrained ones.
"""
import os
import time
from collections import Counter

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

from .embeddings import WordVectors, write_word2vec_binary, write_word2vec_text
from .fill import check_new_output
from .text import DEFAULT_TOKEN_PATTERN, tokenize

__all__ = ["LEARN_DEFAULTS", "VECTOR_OUTPUTS", "check_vectors_output", "learn_vectors",
           "nearest_words", "ppmi_svd_vectors", "vector_output_format", "write_vectors"]


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}={value!r}; expected an int >= {minimum}")
    return int(value)


def _vocabulary(docs, min_count, max_words):
    """Words seen at least ``min_count`` times, by frequency desc then word."""
    counts = Counter()
    for tokens in docs:
        counts.update(tokens)
    bad = next((w for w in counts if not isinstance(w, str)), None)
    if bad is not None:
        raise ValueError(f"token {bad!r} is {type(bad).__name__}; expected str")
    words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    if max_words is not None:
        words = words[:max_words]
    return words


def _cooccurrences(docs, index, window, progress=None):
    """Symmetric counts of vocabulary pairs at most ``window`` tokens apart.

    Distances are measured in the original text: out-of-vocabulary tokens
    keep their positions, only the pairs they are part of are not counted.
    Windows never cross document boundaries. Every pair within the window
    counts 1 (no distance weighting).
    """
    n_words = len(index)
    lengths = np.fromiter((len(t) for t in docs), dtype=np.int64, count=len(docs))
    ids = np.fromiter((index.get(w, -1) for t in docs for w in t), dtype=np.int64,
                      count=int(lengths.sum()))
    doc_of = np.repeat(np.arange(len(docs), dtype=np.int64), lengths)
    counts = sp.csr_matrix((n_words, n_words), dtype=np.float64)
    for offset in range(1, window + 1):
        if offset >= len(ids):
            break
        left, right = ids[:-offset], ids[offset:]
        pair = (doc_of[:-offset] == doc_of[offset:]) & (left >= 0) & (right >= 0)
        left, right = left[pair], right[pair]
        # One matrix per offset keeps memory at one offset's pairs; the
        # conversion to CSR sums repeated pairs.
        counts = counts + sp.csr_matrix((np.ones(len(left)), (left, right)),
                                        shape=(n_words, n_words))
        if progress is not None:
            progress(offset)
    return (counts + counts.T).tocsr()


def _as_token_lists(token_lists):
    if isinstance(token_lists, str):
        raise ValueError("token_lists is a str; expected a list of token lists (one per document)")
    docs = list(token_lists)
    for i, tokens in enumerate(docs):
        if isinstance(tokens, str):
            raise ValueError(f"token_lists[{i}] is a str; expected a list of tokens "
                             "(tokenize the documents first)")
    return docs


def _ppmi_matrix(token_lists, window, min_count, alpha=0.75, max_words=None, progress=None):
    """The vocabulary and its sparse PPMI matrix (words x context words).

    ``PPMI(w, c) = max(0, log(P(w, c) / (P(w) P_alpha(c))))`` where
    ``P(w, c)`` is the share of co-occurring pairs that are ``(w, c)``,
    ``P(w)`` the share of pairs with ``w`` first and ``P_alpha(c)`` the
    context distribution raised to ``alpha`` and renormalised. Only pairs
    that co-occur are stored (PMI of unseen pairs is -inf, so PPMI 0).

    Returns
    -------
    words : list of str
    ppmi : scipy.sparse.csr_matrix of shape (len(words), len(words)), float64
    """
    window = _check_int("window", window, 1)
    min_count = _check_int("min_count", min_count, 1)
    if max_words is not None:
        max_words = _check_int("max_words", max_words, 1)
    if not (isinstance(alpha, (int, float, np.floating)) and 0 < alpha <= 1):
        raise ValueError(f"alpha={alpha!r}; expected a number in (0, 1]")
    docs = _as_token_lists(token_lists)
    words = _vocabulary(docs, min_count, max_words)
    if not words:
        raise ValueError(f"no word appears at least min_count={min_count} times")
    counts = _cooccurrences(docs, {w: i for i, w in enumerate(words)}, window, progress)
    counts.sum_duplicates()
    total = counts.data.sum()
    if total == 0:
        raise ValueError(f"no two words of the vocabulary occur within window={window} "
                         "of each other in one document")
    word_p = np.asarray(counts.sum(axis=1)).ravel() / total
    context = np.asarray(counts.sum(axis=0)).ravel() ** alpha
    context_p = context / context.sum()
    rows = np.repeat(np.arange(len(words)), np.diff(counts.indptr))
    pmi = np.log(counts.data / total) - np.log(word_p[rows]) - np.log(context_p[counts.indices])
    ppmi = sp.csr_matrix((np.maximum(pmi, 0.0), counts.indices.copy(), counts.indptr.copy()),
                         shape=counts.shape)
    ppmi.eliminate_zeros()
    return words, ppmi


def ppmi_svd_vectors(token_lists, dim=100, window=5, min_count=3, seed=0, max_words=None,
                     alpha=0.75):
    """Learn word vectors from tokenized documents with PPMI and truncated SVD.

    Co-occurrences are counted within a symmetric window inside each
    document, weighted by positive pointwise mutual information with the
    context distribution smoothed by ``alpha`` (0.75 by default, as in
    Levy, Goldberg & Dagan 2015; ``alpha=1`` is plain PPMI), and reduced to
    ``dim`` dimensions by a truncated SVD ``PPMI ~ U S V^T``. The vectors
    are ``U * sqrt(S)``: the symmetric weighting, which Levy et al. found
    better for word similarity than ``U * S``; rows are not normalised.

    Parameters
    ----------
    token_lists : iterable of list of str
        The tokens of each document, in order (e.g. from
        :func:`sobolev_index.ingest.text.tokenize`).
    dim : int, default=100
        Dimension of the vectors.
    window : int, default=5
        Two tokens co-occur if at most ``window`` positions apart in the
        same document. Out-of-vocabulary tokens keep their positions.
    min_count : int, default=3
        Only words appearing at least this many times get a vector (and
        serve as contexts).
    seed : int, default=0
        Seeds the starting vector of ARPACK, so results are deterministic.
    max_words : int, default=None
        Keep at most this many of the most frequent words.
    alpha : float, default=0.75
        Context-distribution smoothing exponent, in (0, 1].

    Returns
    -------
    vectors : WordVectors
        One float32 row per word with at least ``min_count`` occurrences,
        ordered by frequency (descending), then word. The sign of each
        dimension is fixed so that its largest-magnitude entry is positive.

    Raises
    ------
    ValueError
        If the parameters are invalid, a document is a str rather than a
        list of tokens (or a token is not a str), no word qualifies, no two
        words of the vocabulary co-occur, or fewer than ``dim + 1`` words
        qualify (the truncated SVD needs more words than dimensions).

    See Also
    --------
    learn_vectors : The same from texts, read as an index reads them.

    Examples
    --------
    >>> from sobolev_index.ingest.learn import ppmi_svd_vectors
    >>> from sobolev_index.ingest.text import tokenize
    >>> texts = ["the cat sat on the mat", "the dog sat on the rug",
    ...          "a cat and a dog played", "the cat saw the dog"]
    >>> vectors = ppmi_svd_vectors([tokenize(t) for t in texts], dim=2, window=2, min_count=2)
    >>> vectors.words, vectors.dim
    (['the', 'cat', 'dog', 'a', 'on', 'sat'], 2)
    >>> ppmi_svd_vectors([tokenize(t) for t in texts], dim=6, window=2, min_count=2)
    Traceback (most recent call last):
        ...
    ValueError: only 6 words appear at least min_count=2 times; dim=6 needs at least 7: ...
    """
    dim = _check_int("dim", dim, 1)
    words, ppmi = _ppmi_matrix(token_lists, window, min_count, alpha=alpha, max_words=max_words)
    if len(words) < dim + 1:
        raise ValueError(
            f"only {len(words)} words appear at least min_count={min_count} times"
            + ("" if max_words is None else f" (max_words={max_words})")
            + f"; dim={dim} needs at least {dim + 1}: lower dim or min_count, or give a larger corpus")
    return _svd_vectors(words, ppmi, dim, seed)


def _svd_vectors(words, ppmi, dim, seed):
    """``U sqrt(S)`` of the rank-``dim`` truncated SVD of ``ppmi``, signs fixed."""
    v0 = np.random.default_rng(seed).uniform(-1.0, 1.0, size=min(ppmi.shape))
    u, s, _ = svds(ppmi, k=dim, v0=v0, solver="arpack")
    order = np.argsort(-s, kind="stable")  # svds returns ascending singular values
    u, s = u[:, order], s[order]
    # Singular vectors are defined up to sign; fixing it makes the output
    # independent of the solver's internals.
    signs = np.sign(u[np.argmax(np.abs(u), axis=0), np.arange(dim)])
    signs[signs == 0] = 1.0
    vectors = u * signs * np.sqrt(np.maximum(s, 0.0))
    return WordVectors(words, vectors.astype(np.float32))


def nearest_words(vectors, word, n=5):
    """The ``n`` words most cosine-similar to ``word``, itself excluded.

    Parameters
    ----------
    vectors : WordVectors
        The vectors searched.
    word : str
        The word whose neighbours are wanted, exactly as in ``vectors``.
    n : int, default=5
        How many neighbours, at most; 0 gives none.

    Returns
    -------
    neighbours : list of (str, float)
        ``(word, cosine similarity)``, most similar first; ties in row
        order. Zero vectors have similarity 0 to everything.

    Raises
    ------
    KeyError
        If ``word`` has no vector.
    ValueError
        If ``vectors`` is not a :class:`~sobolev_index.ingest.embeddings.WordVectors`
        or ``n`` is not an int >= 0.

    Examples
    --------
    >>> from sobolev_index.ingest.embeddings import WordVectors
    >>> from sobolev_index.ingest.learn import nearest_words
    >>> vectors = WordVectors(["cat", "dog", "car", "bus"],
    ...                       [[0.0, 1.0], [0.25, 1.0], [1.0, 0.0], [1.0, 0.25]])
    >>> [(w, round(s, 4)) for w, s in nearest_words(vectors, "cat", n=2)]
    [('dog', 0.9701), ('bus', 0.2425)]
    """
    if not isinstance(vectors, WordVectors):
        raise ValueError(f"vectors is {type(vectors).__name__}; expected WordVectors")
    n = _check_int("n", n, 0)
    row = vectors.index_of(word)
    if row < 0:
        raise KeyError(f"{word!r} has no vector")
    matrix = vectors.vectors.astype(np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0  # zero vectors then score 0, not nan
    similarity = matrix @ matrix[row] / (norms * norms[row])
    order = np.argsort(-similarity, kind="stable")
    order = order[order != row][:n]
    return [(vectors.words[i], float(similarity[i])) for i in order]


# ------------------------------------------------------------ from a corpus
# The defaults of learn_vectors and of `sobolev-index vectors`. A user's
# corpus is often small, so words seen twice already get a vector (the
# quickstart's much larger corpus uses 3).
LEARN_DEFAULTS = {"dim": 100, "window": 5, "min_count": 2}


def _texts(documents):
    for position, doc in enumerate(documents):
        if isinstance(doc, str):
            yield doc
        elif isinstance(doc, dict) and isinstance(doc.get("text"), str):
            yield doc["text"]
        else:
            raise ValueError(f"document {position} is {doc!r:.60}; expected a str or a dict "
                             "with 'text' (as read_corpus yields)")


def learn_vectors(documents, *, dim=LEARN_DEFAULTS["dim"], window=LEARN_DEFAULTS["window"],
                  min_count=LEARN_DEFAULTS["min_count"], pattern=DEFAULT_TOKEN_PATTERN,
                  lowercase=True, seed=0, threads=1, progress=None):
    """Word vectors learned from ``documents``, with the text read as an index reads it.

    The vectors come from PPMI and a truncated SVD
    (:func:`ppmi_svd_vectors`, with its default ``alpha``). Stop words are
    kept: they are part of every word's context. The defaults are
    :data:`LEARN_DEFAULTS`, those of ``sobolev-index vectors``.

    Parameters
    ----------
    documents : iterable of str or dict
        Texts, or documents as :func:`~sobolev_index.ingest.documents.read_corpus`
        yields them (their ``"text"``).
    dim : int, default=100
        Dimension of the vectors, as for :func:`ppmi_svd_vectors`. When
        fewer than ``dim + 1`` words appear ``min_count`` times, ``dim`` is
        lowered to the number of such words minus one, and the report says
        so (``dim_asked``).
    window : int, default=5
        As for :func:`ppmi_svd_vectors`.
    min_count : int, default=2
        As for :func:`ppmi_svd_vectors`: words seen fewer times get no
        vector.
    pattern : str, default="unicode"
        How text becomes words (:func:`~sobolev_index.ingest.text.tokenize`):
        give the pattern the index will be built with (the default is the
        build's), or the vectors will not match its words.
    lowercase : bool, default=True
        As for :func:`~sobolev_index.ingest.text.tokenize`; like
        ``pattern``, give the index's.
    seed : int, default=0
        Seeds the SVD's start vector: the same corpus and seed give the
        same vectors.
    threads : int or None, default=1
        BLAS threads during the SVD (None: the library's own choice). Its
        many small dense products gain nothing from a second thread, and
        threads that wait for a busy core slow it several times over, so 1
        is the default.
    progress : callable, optional
        ``progress(stage, done, total)`` for the stages "tokens" (documents),
        "pairs" (window offsets) and "svd".

    Returns
    -------
    vectors : WordVectors
        One float32 row per word seen at least ``min_count`` times, the most
        frequent first.
    report : dict
        ``documents``, ``tokens``, ``distinct_words``, ``words`` (with a
        vector), ``dim``, ``dim_asked``, ``window``, ``min_count``,
        ``zero_vectors`` (words seen often enough whose vector came out zero:
        none of their contexts is in the kept dimensions; they get no
        vector) and ``seconds``.

    Raises
    ------
    ValueError
        If ``dim``, ``window``, ``min_count`` or ``threads`` is not an int
        >= 1, a document is neither a str nor a dict with a str ``"text"``,
        there are no documents, fewer than 2 words appear ``min_count``
        times, or no two of them occur within ``window`` of each other.

    See Also
    --------
    write_vectors : Write the vectors to a file.
    nearest_words : The words most similar to a word.

    Examples
    --------
    >>> from sobolev_index.ingest.learn import learn_vectors, nearest_words
    >>> texts = ["the cat sat on the mat", "the dog sat on the rug",
    ...          "a cat and a dog played", "the cat saw the dog"]
    >>> vectors, report = learn_vectors(texts, dim=10, window=2, min_count=2)
    >>> vectors.words
    ['the', 'cat', 'dog', 'a', 'on', 'sat']
    >>> report["dim"], report["dim_asked"], report["distinct_words"], report["tokens"]
    (5, 10, 11, 23)
    >>> [word for word, _ in nearest_words(vectors, "cat", n=1)]
    ['dog']
    """
    started = time.perf_counter()
    dim = _check_int("dim", dim, 1)
    window = _check_int("window", window, 1)
    min_count = _check_int("min_count", min_count, 1)
    if threads is not None:
        threads = _check_int("threads", threads, 1)
    _progress = progress or (lambda stage, done, total: None)
    texts = list(_texts(documents))
    if not texts:
        raise ValueError("the corpus has no documents to learn word vectors from")
    token_lists = []
    _progress("tokens", 0, len(texts))
    for i, text in enumerate(texts, 1):
        token_lists.append(tokenize(text, pattern, lowercase))
        if i % 1000 == 0:
            _progress("tokens", i, len(texts))
    _progress("tokens", len(texts), len(texts))
    counts = Counter()
    for tokens in token_lists:
        counts.update(tokens)
    frequent = sum(1 for c in counts.values() if c >= min_count)
    if frequent < 2:
        raise ValueError(
            f"only {frequent} of the corpus's {len(counts):,} distinct words appear at least "
            f"{min_count} times (min_count); learning vectors needs at least 2 such words, and "
            "many more to be useful: give a larger corpus, or learn with a lower min_count "
            "(--min-count of `sobolev-index vectors`)")
    _progress("pairs", 0, window)
    words, ppmi = _ppmi_matrix(token_lists, window, min_count,
                               progress=lambda offset: _progress("pairs", offset, window))
    _progress("pairs", window, window)
    used = min(dim, len(words) - 1)
    _progress("svd", 0, 1)
    with _blas_threads(threads):
        vectors = _svd_vectors(words, ppmi, used, seed)
    _progress("svd", 1, 1)
    # A word whose contexts the kept dimensions do not reach (all its PPMI
    # values 0, or only in directions the SVD drops) gets a zero vector up
    # to rounding: it says nothing of the word, and several such points a
    # rounding error apart would be a graph's nodes with ties in every
    # shortest path. Such words get no vector.
    norms = np.linalg.norm(vectors.vectors.astype(np.float64), axis=1)
    empty = norms <= _ZERO_VECTOR * norms.max(initial=0.0)
    if empty.any():
        vectors = WordVectors([w for w, e in zip(vectors.words, empty) if not e],
                              vectors.vectors[~empty])
    report = {"documents": len(texts), "tokens": int(sum(counts.values())),
              "distinct_words": len(counts), "words": len(vectors), "dim": used,
              "dim_asked": dim, "window": window, "min_count": min_count,
              "zero_vectors": int(empty.sum()),
              "seconds": round(time.perf_counter() - started, 3)}
    return vectors, report


# A learned vector this much shorter than the longest one is zero but for
# rounding (float32 vectors of norm about 1 round at 1e-7; such rows are
# 1e-16 or 0).
_ZERO_VECTOR = 1e-6


class _blas_threads:
    """At most ``threads`` BLAS threads inside the block (no limit for None)."""

    def __init__(self, threads):
        self.threads = threads
        self.limits = None

    def __enter__(self):
        if self.threads is not None:
            from threadpoolctl import threadpool_limits

            self.limits = threadpool_limits(limits=self.threads, user_api="blas")
        return self

    def __exit__(self, *exc):
        if self.limits is not None:
            self.limits.restore_original_limits()


# File names write_vectors takes, by the format it writes; each may end in
# ".gz" as well. Every one of them is a format load_vectors recognises.
VECTOR_OUTPUTS = {".bin": "word2vec-bin", ".vec": "word2vec-text", ".txt": "word2vec-text"}


def vector_output_format(path):
    """The format :func:`write_vectors` writes to ``path``, by its name.

    Parameters
    ----------
    path : str
        A file name ending in one of the suffixes of
        :data:`VECTOR_OUTPUTS`, perhaps followed by ``.gz``, with something
        before the suffix.

    Returns
    -------
    str
        ``"word2vec-bin"`` for ``.bin``, ``"word2vec-text"`` for ``.vec``
        and ``.txt``: a format name of
        :func:`~sobolev_index.ingest.embeddings.load_vectors`.

    Raises
    ------
    ValueError
        If the name has none of those endings.

    Examples
    --------
    >>> from sobolev_index.ingest.learn import vector_output_format
    >>> vector_output_format("vectors.bin"), vector_output_format("vectors.vec.gz")
    ('word2vec-bin', 'word2vec-text')
    >>> vector_output_format("vectors.npy")
    Traceback (most recent call last):
        ...
    ValueError: output is 'vectors.npy'; expected a file name ending in .bin or .bin.gz, ...
    """
    name = os.path.basename(path).lower().removesuffix(".gz")
    for suffix, fmt in VECTOR_OUTPUTS.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return fmt
    names = ", ".join(f"{s} or {s}.gz" for s in VECTOR_OUTPUTS)
    raise ValueError(f"output is {path!r}; expected a file name ending in {names} (word2vec "
                     "binary, or word2vec text with a header)")


def check_vectors_output(path):
    """Check ``path`` as an output of :func:`write_vectors`, before any work.

    It must be a name with a known ending (see :func:`vector_output_format`)
    that does not exist yet, in a folder that does.

    Parameters
    ----------
    path : str or path-like
        The file to be written.

    Returns
    -------
    str
        Its format, as :func:`vector_output_format` gives it.

    Raises
    ------
    ValueError
        If the name has no known ending, the file exists, or its folder
        does not.

    Examples
    --------
    >>> from sobolev_index.ingest.learn import check_vectors_output
    >>> check_vectors_output("learned.bin")
    'word2vec-bin'
    >>> with open("taken.vec", "w") as f:
    ...     _ = f.write("")
    >>> check_vectors_output("taken.vec")
    Traceback (most recent call last):
        ...
    ValueError: output 'taken.vec' exists; choose a new file name (writing vectors never overwrites a file)
    """
    fmt = vector_output_format(os.fspath(path))
    check_new_output(path, "writing vectors")
    return fmt


def write_vectors(path, vectors):
    """Write ``vectors`` to a new file ``path``, in the format its name says.

    Word2vec binary for ``.bin``, word2vec text with a header for ``.vec``
    and ``.txt``, gzip-compressed when the name also ends in ``.gz``: the
    formats :func:`~sobolev_index.ingest.embeddings.load_vectors` and
    ``--vectors`` recognise by name and content. The file is written under a
    temporary name in the same folder and renamed into place when complete,
    so a failed write leaves nothing; an existing ``path`` is refused.

    Parameters
    ----------
    path : str or path-like
        The new file: a name as :func:`vector_output_format` takes it, that
        does not exist yet, in a folder that does.
    vectors : WordVectors
        The words and vectors written.

    Returns
    -------
    str
        The absolute path of the file written.

    Raises
    ------
    ValueError
        If ``vectors`` is not a :class:`~sobolev_index.ingest.embeddings.WordVectors`,
        the name has no known ending, the file exists (also when it appears
        during the write), its folder does not exist, or a word cannot be
        written (it holds whitespace).

    Examples
    --------
    >>> import os
    >>> from sobolev_index.ingest.embeddings import WordVectors, load_vectors
    >>> from sobolev_index.ingest.learn import write_vectors
    >>> vectors = WordVectors(["cat", "dog"], [[0.0, 1.0], [0.25, 1.0]])
    >>> path = write_vectors("learned.vec.gz", vectors)
    >>> os.path.basename(path), load_vectors(path).words
    ('learned.vec.gz', ['cat', 'dog'])
    >>> write_vectors("learned.vec.gz", vectors)
    Traceback (most recent call last):
        ...
    ValueError: output 'learned.vec.gz' exists; choose a new file name (writing vectors never ...
    """
    if not isinstance(vectors, WordVectors):
        raise ValueError(f"vectors is {type(vectors).__name__}; expected WordVectors")
    path = os.fspath(path)
    fmt = check_vectors_output(path)
    folder, name = os.path.split(os.path.abspath(path))
    # The temporary name keeps the real one's endings: the writers compress
    # by the name.
    partial = os.path.join(folder, f".partial-{os.getpid()}-{name}")
    try:
        if fmt == "word2vec-bin":
            write_word2vec_binary(partial, vectors.words, vectors.vectors)
        else:
            write_word2vec_text(partial, vectors.words, vectors.vectors)
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        check_new_output(path, "writing vectors")  # made by someone else meanwhile?
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return os.path.abspath(path)
