"""A corpus and word vectors the package makes by itself, with no network.

The quickstart needs real text and word vectors that match it, without
downloading anything. The Python standard library ships both the text (its
docstrings and the pydoc topics) and, through it, the co-occurrence
statistics to learn vectors from: :func:`stdlib_documents` collects the text
and :func:`~sobolev_index.ingest.learn.ppmi_svd_vectors` learns the vectors
from it, as from any corpus.
"""
import ast
import os
import sysconfig
import time
import warnings

import numpy as np

from ..errors import CorpusError

# Re-exported: the quickstart and earlier releases found them here.
from .learn import nearest_words, ppmi_svd_vectors
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
