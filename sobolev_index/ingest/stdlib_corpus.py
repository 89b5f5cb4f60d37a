"""A corpus and word vectors the package makes by itself, with no network.

The quickstart needs real text and word vectors that match it, without
downloading anything. The Python standard library ships both the text (its
docstrings and the pydoc topics) and, through it, the co-occurrence
statistics to learn vectors from: :func:`stdlib_documents` collects the text
and :func:`ppmi_svd_vectors` learns the vectors with positive pointwise
mutual information (PPMI) followed by a truncated SVD.
"""
import ast
import os
import sysconfig
import time
import warnings
from collections import Counter

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

from ..errors import CorpusError
from .embeddings import WordVectors
from .text import tokenize

__all__ = ["stdlib_documents", "ppmi_svd_vectors", "nearest_words"]

# Directories never searched for docstrings:
# - installed third-party packages are not the standard library;
# - test suites document tests, not the library, and would double the corpus;
# - idlelib is the IDLE application: its ~120 modules are internal GUI code
#   whose docstrings talk about editor widgets and would skew the vocabulary;
# - turtledemo holds demo scripts whose docstrings are instructions for the
#   demo viewer, not documentation;
# - pydoc_data is read separately, as topics (see _read_topics).
_SKIPPED_DIRS = frozenset({
    "site-packages", "dist-packages", "__pycache__", "lib-dynload",
    "test", "tests", "idle_test", "idlelib", "turtledemo", "pydoc_data",
})

_TOPICS_FILE = ("pydoc_data", "topics.py")

# Statements whose bodies are still module (or class) scope: the standard
# library often defines public functions under ``if sys.platform ...`` or
# ``try: ... except ImportError:``.
_SCOPE_BLOCKS = tuple(getattr(ast, name) for name in ("If", "Try", "TryStar", "With", "AsyncWith")
                      if hasattr(ast, name))


def _is_public_name(name):
    return name.isidentifier() and not name.startswith("_")


def _source_files(root):
    """Relative POSIX paths of the public modules under ``root``, sorted."""
    found = []
    for directory, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        rel_parts = () if rel_dir == os.curdir else tuple(rel_dir.split(os.sep))
        # A directory without __init__.py cannot be imported as part of a
        # package, so nothing below it is public API (this also drops data
        # directories such as config-3.x or venv/scripts).
        dirnames[:] = [d for d in dirnames
                       if d not in _SKIPPED_DIRS and _is_public_name(d)
                       and os.path.isfile(os.path.join(directory, d, "__init__.py"))]
        for name in filenames:
            if not name.endswith(".py"):
                continue
            stem = name[:-3]
            if stem == "__init__":
                if not rel_parts:  # the stdlib directory itself is no package
                    continue
            elif not _is_public_name(stem) or stem.startswith("test_"):
                continue
            found.append("/".join(rel_parts + (name,)))
    return sorted(found)


def _module_name(rel_path):
    parts = rel_path[:-3].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _parse(path):
    """The module's AST, or None if the file cannot be read, decoded or parsed."""
    try:
        with open(path, "rb") as handle:
            source = handle.read()
        # Parsing bytes lets Python honour PEP 263 coding cookies itself;
        # old-style escapes such as "\d" warn on newer Pythons, which is
        # noise for a reader that never runs the code.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source, filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _docstrings(body, prefix, found):
    """Append (dotted name, docstring) for the public definitions in ``body``."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if not _is_public_name(node.name):
                continue
            name = f"{prefix}.{node.name}"
            doc = ast.get_docstring(node)
            if doc:
                found.append((name, doc))
            # Functions nested in functions are not reachable API; classes
            # nested in classes are (e.g. Enum members' helpers, Struct.Field).
            if isinstance(node, ast.ClassDef):
                _docstrings(node.body, name, found)
        elif isinstance(node, _SCOPE_BLOCKS):
            for block in (node.body, getattr(node, "orelse", ()), getattr(node, "finalbody", ())):
                _docstrings(block, prefix, found)
            for handler in getattr(node, "handlers", ()):
                _docstrings(handler.body, prefix, found)


def _read_topics(path):
    """The ``topics`` dict of pydoc_data/topics.py, read without running it."""
    tree = _parse(path)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "topics" for t in targets):
            try:
                topics = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
            if isinstance(topics, dict):
                return {str(k): v for k, v in topics.items() if isinstance(v, str)}
            return None
    return None


def stdlib_documents(stdlib_dir=None, include_topics=True, min_words=5, return_stats=False):
    """Documents made of the Python standard library's own documentation.

    Docstrings are read from the ``.py`` sources with :mod:`ast`: no module
    is imported, so modules with import side effects (``this``,
    ``antigravity``) are safe. One document is made per public module,
    class, and function or method docstring (public: no component of the
    dotted name starts with ``_``; ``__init__.py`` stands for its package).
    Skipped: third-party ``site-packages``/``dist-packages``, test
    directories and ``test_*`` modules, ``__pycache__``, private modules
    and packages, directories without ``__init__.py``, ``idlelib`` (the
    IDLE application's internal GUI code) and ``turtledemo`` (demo
    scripts). Definitions under module-level ``if``/``try``/``with`` count;
    functions nested in functions do not. Files that cannot be read,
    decoded or parsed are skipped and counted.

    Parameters
    ----------
    stdlib_dir : str or path-like, default=None
        Directory of the standard library sources. ``None`` means
        ``sysconfig.get_paths()["stdlib"]`` of the running Python.
    include_topics : bool, default=True
        Also add the pydoc topics of ``pydoc_data/topics.py`` (the text of
        ``help("with")``), if that file exists.
    min_words : int, default=5
        Drop documents with fewer tokens than this, as counted by
        :func:`sobolev_index.ingest.text.tokenize`.
    return_stats : bool, default=False
        Also return a dict of counts and the time taken.

    Returns
    -------
    documents : list of dict
        Each with ``"key"`` (the dotted name, e.g. ``"json.dumps"`` or
        ``"socket.socket.makefile"``; ``"topic:with"`` for topics; unique),
        ``"text"`` (the cleaned docstring or topic text; the name itself is
        not added, so the text does not give the label away), ``"label"``
        (the top-level module, e.g. ``"json"``, or ``"topic"``) and
        ``"source"`` (the file, relative to ``stdlib_dir``, POSIX style).
        Ordered by source file path, then source order; topics last, sorted
        by name. When a name is defined twice (e.g. in both branches of an
        ``if``), the first definition that survives ``min_words`` is kept.
    stats : dict
        Only if ``return_stats``: ``files`` (parsed), ``skipped_files``
        (unreadable or unparsable), ``short_documents`` (dropped by
        ``min_words``), ``duplicate_keys`` (dropped), ``topics`` (kept),
        ``documents`` and ``seconds``.

    Raises
    ------
    CorpusError
        If ``stdlib_dir`` is not a directory (a ``ValueError``).
    """
    started = time.perf_counter()
    if isinstance(min_words, bool) or not isinstance(min_words, (int, np.integer)) or min_words < 0:
        raise ValueError(f"min_words={min_words!r}; expected an int >= 0")
    root = sysconfig.get_paths()["stdlib"] if stdlib_dir is None else os.fspath(stdlib_dir)
    if not os.path.isdir(root):
        raise CorpusError(f"stdlib_dir {root!r} is not a directory")

    stats = {"files": 0, "skipped_files": 0, "short_documents": 0, "duplicate_keys": 0,
             "topics": 0, "documents": 0}
    documents, seen = [], set()

    def keep(key, text, label, source):
        if len(tokenize(text)) < min_words:
            stats["short_documents"] += 1
        elif key in seen:
            stats["duplicate_keys"] += 1
        else:
            seen.add(key)
            documents.append({"key": key, "text": text, "label": label, "source": source})

    for rel_path in _source_files(root):
        tree = _parse(os.path.join(root, *rel_path.split("/")))
        if tree is None:
            stats["skipped_files"] += 1
            continue
        stats["files"] += 1
        module = _module_name(rel_path)
        label = module.split(".", 1)[0]
        found = []
        doc = ast.get_docstring(tree)
        if doc:
            found.append((module, doc))
        _docstrings(tree.body, module, found)
        for key, text in found:
            keep(key, text, label, rel_path)

    if include_topics:
        topics_path = os.path.join(root, *_TOPICS_FILE)
        topics = _read_topics(topics_path) if os.path.isfile(topics_path) else None
        if topics is not None:
            before = len(documents)
            for name in sorted(topics):
                keep(f"topic:{name}", topics[name], "topic", "/".join(_TOPICS_FILE))
            stats["topics"] = len(documents) - before

    stats["documents"] = len(documents)
    stats["seconds"] = round(time.perf_counter() - started, 4)
    return (documents, stats) if return_stats else documents


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


def _cooccurrences(docs, index, window):
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


def _ppmi_matrix(token_lists, window, min_count, alpha=0.75, max_words=None):
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
    counts = _cooccurrences(docs, {w: i for i, w in enumerate(words)}, window)
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
        list of tokens, or fewer than ``dim + 1`` words qualify (the
        truncated SVD needs more words than dimensions).
    """
    dim = _check_int("dim", dim, 1)
    words, ppmi = _ppmi_matrix(token_lists, window, min_count, alpha=alpha, max_words=max_words)
    if len(words) < dim + 1:
        raise ValueError(
            f"only {len(words)} words appear at least min_count={min_count} times"
            + ("" if max_words is None else f" (max_words={max_words})")
            + f"; dim={dim} needs at least {dim + 1}: lower dim or min_count, or give a larger corpus")
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
    word : str
    n : int, default=5

    Returns
    -------
    neighbours : list of (str, float)
        ``(word, cosine similarity)``, most similar first; ties in row
        order. Zero vectors have similarity 0 to everything.

    Raises
    ------
    KeyError
        If ``word`` has no vector.
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
