"""The layer rule of the package, read from the source: ``cli -> ingest -> index
-> core``, never back up, and never sideways between the ingest modules of
different kinds.

Every ``.py`` module under ``sobolev_index/`` and ``cli/`` (the package
``sobolev_index.cli``) is parsed with ``ast``: module-level and function-local
imports, relative imports, and ``importlib.import_module`` / ``__import__``
with a literal name. Every ``.pyx`` / ``.pxd`` is read with a regular
expression (``import``, ``cimport``, ``cdef extern from`` and ``#include``).

A module's layer is decided by where it lives, lowest first:

- core: ``sobolev_index/*.py|pyx|pxd`` (not in a subpackage);
- index: ``sobolev_index/index/``;
- ingest, distributed, web, sqlite_plugin: ``sobolev_index/ingest/``,
  ``sobolev_index/distributed*``, ``sobolev_index/web*`` and the sqlite-utils
  plugin ``sobolev_index/sqlite_plugin.py``: all above index (and so never
  imported by index or core); this test does not order them among themselves;
- cli: ``cli/``, the package ``sobolev_index.cli``.

Within core and index, the compiled modules (``.pyx`` / ``.pxd``) sit below
the Python ones: a compiled module imports only compiled modules, of its own
package layer or a lower one, and nothing about files or databases ("the
Cython modules know nothing of files or SQLite"). The package root
(``sobolev_index/__init__.py``), ``__main__.py`` and the console script
``_console.py`` are the public facade, outside the layers: only the CLI may
import them.

Ingest modules have a kind, from the table ``INGEST_KINDS`` below; a module
that is not in it fails ``test_every_ingest_module_has_a_kind`` until it is
classified there.
"""
import ast
import os
import re
from dataclasses import dataclass, field

import pytest
from _support import REPO_DIR

PACKAGE = "sobolev_index"
# Source directory -> the package its files belong to (setuptools package-dir).
SOURCE_DIRS = {"sobolev_index": "sobolev_index", "cli": "sobolev_index.cli"}
SKIP_DIRS = {"__pycache__", "build"}

# The public facade: outside the layers, importable only from the CLI. (A
# module that only re-exports documented public names from their new homes,
# for old import paths, belongs here too.)
FACADE = {"sobolev_index", "sobolev_index.__main__", "sobolev_index._console"}

CORE, INDEX, UPPER, CLI = range(4)
LAYER_NAMES = {CORE: "core", INDEX: "index", CLI: "cli"}
# Top-level subpackages (or modules) and their layer; a name ending in "*"
# matches every name that starts with it. Other top-level modules are core.
SUBPACKAGE_LAYERS = {
    "index": INDEX,
    "ingest": UPPER,
    "distributed*": UPPER,
    "web*": UPPER,
    "sqlite_plugin": UPPER,
    "cli": CLI,
}

# The kind of every module of sobolev_index/ingest/ ("__init__" is the package).
# A module of one kind imports no module of another kind; "shared" modules may
# be imported by every kind and import no kind; "over both kinds" modules are
# entry points that dispatch to either pipeline: they may import both kinds,
# and no kind and no shared module imports them.
INGEST_KINDS = {
    "text": {"text", "embeddings", "corpus", "documents", "learn", "words", "stdlib_corpus",
             "quickstart"},
    "points": {"pointsets", "pointfiles", "pointindex"},
    "shared": {"__init__", "fill", "inputs", "parsing", "recipes"},
    "over both kinds": {"pipelines", "export"},
}
PIPELINE_KINDS = {"text", "points"}

# Libraries of the optional extras, and the only subpackages that may import
# them: the base install runs without them.
OPTIONAL_LIBRARIES = {"dask": "distributed", "distributed": "distributed", "zarr": "distributed",
                      "datasette": "web", "uvicorn": "web"}

# What a compiled module must not import: files and databases.
FILE_LIBRARIES = {"os", "io", "pathlib", "shutil", "tempfile", "glob", "h5py", "sqlite3",
                  "sqlite_utils", "libc.stdio", "posix"}
FILE_HEADERS = {"stdio.h", "fcntl.h", "unistd.h", "sqlite3.h", "hdf5.h"}


@dataclass(frozen=True)
class Source:
    module: str  # dotted name, e.g. sobolev_index.index.storage
    path: str  # relative to the repository, for messages
    text: str
    compiled: bool = False  # a .pyx or .pxd
    is_package: bool = False  # an __init__


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # absolute module as written ("from X import a" gives X)
    names: tuple = ()  # names imported from it ("from X import a, b")
    header: bool = False  # a C header (``cdef extern from`` / ``#include``)


@dataclass
class Violation:
    rule: str
    where: str  # path[:line]
    message: str  # what and why, after ``where``

    def __str__(self):
        return f"{self.where}: {self.message}"


@dataclass
class Tree:
    sources: list
    modules: dict = field(default_factory=dict)  # module -> [Source] (a .pyx and its .pxd)

    def __post_init__(self):
        for source in self.sources:
            self.modules.setdefault(source.module, []).append(source)

    def is_compiled(self, module):
        return any(s.compiled for s in self.modules.get(module, ()))


# --------------------------------------------------------------------------- reading
def discover(repo=REPO_DIR):
    """Every .py / .pyx / .pxd under the source directories, as Sources."""
    sources = []
    for directory, package in SOURCE_DIRS.items():
        top = os.path.join(repo, directory)
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
            for name in sorted(files):
                stem, ext = os.path.splitext(name)
                if ext not in (".py", ".pyx", ".pxd"):
                    continue
                rel_dir = os.path.relpath(root, top)
                parts = package.split(".") + ([] if rel_dir == "." else rel_dir.split(os.sep))
                is_package = stem == "__init__"
                module = ".".join(parts if is_package else parts + [stem])
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
                sources.append(Source(module, os.path.relpath(path, repo), text,
                                      compiled=ext != ".py", is_package=is_package))
    return sources


def _absolute(source, level, name):
    """The absolute module of a relative import ``from <level dots><name>``."""
    if level == 0:
        return name
    package = source.module.split(".")
    if not source.is_package:
        package = package[:-1]
    if level - 1 > len(package) - 1:
        raise ValueError(f"{source.path}: relative import beyond the top-level package")
    base = package[:len(package) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _dynamic_import(source, node):
    """Import for ``importlib.import_module("x", package)`` / ``__import__("x")``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    target = first.value
    if name == "import_module" and target.startswith("."):
        level = len(target) - len(target.lstrip("."))
        return Import(node.lineno, _absolute(source, level, target.lstrip(".")))
    return Import(node.lineno, target)


def python_imports(source):
    """Every import of a Python module, wherever it stands in the module."""
    tree = ast.parse(source.text, filename=source.path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(source, node.level, node.module or "")
            found.append(Import(node.lineno, module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Call):
            dynamic = _dynamic_import(source, node)
            if dynamic is not None:
                found.append(dynamic)
    return sorted(found, key=lambda i: i.line)


_STRING = re.compile(r'"""(?:.|\n)*?"""|\'\'\'(?:.|\n)*?\'\'\'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
_COMMENT = re.compile(r"#[^\n]*")
_CY_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+c?import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_CY_IMPORT = re.compile(r"^[ \t]*c?import[ \t]+([^\n]*)", re.M)
_CY_EXTERN = re.compile(r"^[ \t]*cdef[ \t]+extern[ \t]+from[ \t]+[\"']([^\"']+)[\"']", re.M)
_C_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]", re.M)


def _blank(match):
    """A string literal turned into spaces, keeping its newlines (line numbers)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def cython_imports(source):
    """Every ``import`` / ``cimport`` of a .pyx / .pxd, and the C headers it uses."""
    raw = source.text
    found = []
    for pattern in (_CY_EXTERN, _C_INCLUDE):  # headers are inside string literals
        for m in pattern.finditer(raw):
            found.append(Import(raw.count("\n", 0, m.start()) + 1, m.group(1), header=True))
    # Replace string literals, then comments, by blanks: what is left is code.
    code = _STRING.sub(_blank, raw)
    code = _COMMENT.sub(lambda m: " " * len(m.group(0)), code)
    for m in _CY_FROM.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        dots = len(m.group(1)) - len(m.group(1).lstrip("."))
        module = _absolute(source, dots, m.group(1)[dots:])
        names = tuple(n.split()[0] for n in m.group(2).strip("()").replace("\n", " ").split(",")
                      if n.strip())
        found.append(Import(line, module, names))
    for m in _CY_IMPORT.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        for part in m.group(1).split(","):
            if part.strip():
                found.append(Import(line, part.split()[0]))
    return sorted(found, key=lambda i: i.line)


def imports_of(source):
    return cython_imports(source) if source.compiled else python_imports(source)


def targets(tree, imp):
    """The modules an import names: ``from X import a`` is X.a when that is a
    module of the tree, else X."""
    if imp.header:
        return []
    if not imp.names:
        return [imp.module]
    out = []
    for name in imp.names:
        sub = f"{imp.module}.{name}"
        target = sub if sub in tree.modules else imp.module
        if target not in out:
            out.append(target)
    return out


# --------------------------------------------------------------------------- layers
def package_layer(module):
    """CORE / INDEX / UPPER / CLI, "facade", or None (not in the package, or a
    subpackage no layer claims)."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    if module in FACADE:
        return "facade"
    top = parts[1]
    for name, layer in SUBPACKAGE_LAYERS.items():
        if top == name or (name.endswith("*") and top.startswith(name[:-1])):
            return layer
    return CORE if len(parts) == 2 else None


def upper_name(module):
    return module.split(".")[1]


def layer_label(tree, module):
    layer = package_layer(module)
    if layer == "facade":
        return "the package root (facade)"
    name = upper_name(module) if layer == UPPER else LAYER_NAMES.get(layer, "?")
    if layer == UPPER and name == "ingest":
        kind = ingest_kind(module)
        name = f"ingest, {kind or 'unclassified'}"
    return f"{name}, compiled" if tree.is_compiled(module) else name


def ingest_stem(module):
    """'documents' for sobolev_index.ingest.documents[.x]; '__init__' for the package."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def ingest_kind(module):
    stem = ingest_stem(module)
    for kind, stems in INGEST_KINDS.items():
        if stem in stems:
            return kind
    return None


def is_ingest(module):
    parts = module.split(".")
    return parts[0] == PACKAGE and len(parts) > 1 and parts[1] == "ingest"


# --------------------------------------------------------------------------- rules
def _is_file_library(module):
    return any(module == lib or module.startswith(lib + ".") for lib in FILE_LIBRARIES)


def check(tree):
    """Every violation of the layer rule in ``tree``, as Violations with rules
    "parse", "unknown layer", "unclassified ingest module", "upward",
    "facade", "compiled", "files", "ingest kinds", "optional library"."""
    out = []
    for source in tree.sources:
        layer = package_layer(source.module)
        where = source.path
        if layer == "facade":
            # Outside the layers, but the first import of every user: it
            # must not need an optional extra either.
            try:
                out += [_optional_library(tree, source, imp) for imp in imports_of(source)
                        if _optional_library(tree, source, imp)]
            except (SyntaxError, ValueError) as exc:
                out.append(Violation("parse", where, f"cannot read its imports: {exc}"))
            continue
        if layer is None:
            out.append(Violation("unknown layer", where, (
                f"{source.module} is in no layer; add its subpackage to "
                f"SUBPACKAGE_LAYERS in tests/test_layers.py")))
            continue
        if is_ingest(source.module) and ingest_kind(source.module) is None:
            out.append(Violation("unclassified ingest module", where, (
                f"ingest module {ingest_stem(source.module)!r} has no kind: add it to "
                f"INGEST_KINDS in tests/test_layers.py (text, points, shared, or over both "
                f"kinds), and keep it from importing modules of another kind")))
        try:
            imports = imports_of(source)
        except (SyntaxError, ValueError) as exc:
            out.append(Violation("parse", where, f"cannot read its imports: {exc}"))
            continue
        for imp in imports:
            out += _check_import(tree, source, layer, imp)
    return out


def _optional_library(tree, source, imp):
    """A Violation if ``imp`` is a library of an optional extra imported
    outside the subpackage that extra serves, else None."""
    home = OPTIONAL_LIBRARIES.get(imp.module.split(".")[0])
    if not home or imp.header or (package_layer(source.module) not in ("facade", None)
                                  and upper_name(source.module).startswith(home)):
        return None
    return Violation("optional library", f"{source.path}:{imp.line}", (
        f"{source.module} imports {imp.module}, which only the [{home}] extra installs: only "
        f"sobolev_index/{home}/ may import it"))


def _check_import(tree, source, layer, imp):
    where = f"{source.path}:{imp.line}"
    me = f"{source.module} ({layer_label(tree, source.module)})"
    out = []
    if source.compiled:
        if imp.header and os.path.basename(imp.module) in FILE_HEADERS:
            out.append(Violation("files", where, (
                f"compiled module {source.module} uses the C header {imp.module}: "
                f"the Cython modules know nothing of files or SQLite")))
        elif not imp.header and _is_file_library(imp.module):
            out.append(Violation("files", where, (
                f"compiled module {source.module} imports {imp.module}: the Cython "
                f"modules know nothing of files or SQLite; do that in a Python module")))
    violation = _optional_library(tree, source, imp)
    if violation:
        out.append(violation)
    for target in targets(tree, imp):
        target_layer = package_layer(target)
        if target_layer is None and target.split(".")[0] == PACKAGE:
            out.append(Violation("unknown layer", where, (
                f"{me} imports {target}, which is in no layer")))
            continue
        if target_layer is None:
            continue  # outside the package
        them = f"{target} ({layer_label(tree, target)})"
        if target_layer == "facade":
            if layer != CLI:
                out.append(Violation("facade", where, (
                    f"{me} imports the package root {target}, which imports every "
                    f"layer: import from the module that defines the name")))
            continue
        if target_layer > layer:
            if upper_name(target).startswith(("distributed", "web", "sqlite_plugin")) \
                    and layer <= INDEX:
                why = ("nothing in index or below may import the distributed, web or "
                       "sqlite_plugin layers")
            else:
                why = "an import from a lower layer to a higher one"
            out.append(Violation("upward", where, f"{me} imports {them}: {why}"))
            continue
        if source.compiled and not tree.is_compiled(target):
            out.append(Violation("compiled", where, (
                f"compiled module {me} imports the Python module {them}: compiled "
                f"modules import only compiled ones")))
            continue
        if is_ingest(source.module) and is_ingest(target) and target != source.module:
            out += _check_kinds(where, me, them, source.module, target)
    return out


def _check_kinds(where, me, them, module, target):
    mine, theirs = ingest_kind(module), ingest_kind(target)
    if mine is None or theirs is None:
        if theirs is None and mine is not None:
            return [Violation("unclassified ingest module", where, (
                f"{me} imports {them}, which has no kind in INGEST_KINDS"))]
        return []  # the unclassified module is reported once, on its own
    if mine == theirs:
        return []
    if mine in PIPELINE_KINDS and theirs in PIPELINE_KINDS:
        why = ("ingest modules of different kinds must not import each other: move what "
               "both need into a shared ingest module")
    elif mine == "shared" and theirs != "shared":
        why = "a shared ingest module may be imported by every kind but imports no kind"
    elif theirs == "over both kinds":
        why = "the modules over both kinds import the pipelines, not the other way round"
    else:
        return []  # a kind importing a shared module, or over both kinds importing a kind
    return [Violation("ingest kinds", where, f"{me} imports {them}: {why}")]


# --------------------------------------------------------------------------- the tree
@pytest.fixture(scope="module")
def tree():
    if not os.path.isfile(os.path.join(REPO_DIR, PACKAGE, "__init__.py")):
        pytest.skip(f"no source tree next to tests/ (looked for {PACKAGE}/ in {REPO_DIR})")
    return Tree(discover())


@pytest.fixture(scope="module")
def violations(tree):
    return check(tree)


def _report(violations, *rules):
    found = [str(v) for v in violations if v.rule in rules]
    assert not found, f"{len(found)} offending import(s):\n" + "\n".join(found)


def test_every_module_can_be_read_and_has_a_layer(violations):
    _report(violations, "parse", "unknown layer")


def test_no_import_goes_up_a_layer(violations):
    _report(violations, "upward", "facade")


def test_compiled_modules_import_only_compiled_modules(violations):
    _report(violations, "compiled")


def test_compiled_modules_know_nothing_of_files_or_sqlite(violations):
    _report(violations, "files")


def test_every_ingest_module_has_a_kind(violations):
    _report(violations, "unclassified ingest module")


def test_ingest_kinds_do_not_import_each_other(violations):
    _report(violations, "ingest kinds")


def test_optional_libraries_stay_in_their_subpackages(violations):
    _report(violations, "optional library")


# --------------------------------------------------------------------------- self-checks
def _imported(tree, module):
    out = set()
    for source in tree.modules[module]:
        for imp in imports_of(source):
            out.update(targets(tree, imp))
    return out


def test_the_tree_has_every_layer(tree):
    """The walk found the package where it should: each layer has modules."""
    found = {(package_layer(s.module), s.compiled) for s in tree.sources}
    for layer, compiled in [(CORE, True), (CORE, False), (INDEX, True), (INDEX, False),
                            (UPPER, False), (CLI, False)]:
        assert (layer, compiled) in found, (layer, compiled, sorted(found, key=str))
    assert "sobolev_index.cli" in tree.modules, "cli/ was not read as sobolev_index.cli"
    kinds = {ingest_kind(s.module) for s in tree.sources if is_ingest(s.module)}
    assert {"text", "points"} <= kinds, kinds


def test_the_sqlite_plugin_sits_above_index(tree):
    """sqlite-utils loads the plugin in every process that uses it; the
    index's own catalog module imports sqlite_utils: nothing in index or
    below may import the plugin back."""
    plugin = "sobolev_index.sqlite_plugin"
    assert plugin in tree.modules and package_layer(plugin) == UPPER
    importers = sorted(s.module for s in tree.sources
                       if package_layer(s.module) in (CORE, INDEX)
                       and plugin in {t for imp in imports_of(s) for t in targets(tree, imp)})
    assert importers == []


def test_the_parser_finds_known_imports(tree):
    assert "sobolev_index.graph" in _imported(tree, "sobolev_index.index.sobolev_index")
    # a cimport of a .pxd from a .pyx, relative
    assert "sobolev_index._typedefs" in _imported(tree, "sobolev_index._pairwise")
    # function-local imports of the CLI
    assert any(is_ingest(t) for t in _imported(tree, "sobolev_index.cli.build"))


SYNTHETIC = {
    # core: an upward import inside a function, one through importlib, the facade
    "sobolev_index/measures.py": (
        "import numpy as np\n"
        "from . import _features\n"
        "def f():\n"
        "    from .index import SobolevIndex\n"
        "    import importlib\n"
        "    return importlib.import_module('sobolev_index.ingest.documents')\n"
        "def g():\n"
        "    from sobolev_index import SobolevIndex\n"),
    "sobolev_index/_features.pyx": (
        '"""A docstring that says: import os\n'
        'from h5py import File  (not code)\n"""\n'
        "# import sqlite3 (a comment)\n"
        "import numpy as np\n"
        "from ._typedefs cimport float64_t\n"
        "from libc.stdio cimport fopen\n"
        "import os.path\n"
        "from .errors import InvalidMeasureError\n"
        'cdef extern from "sqlite3.h":\n'
        "    pass\n"),
    "sobolev_index/_typedefs.pxd": "from libc.stdint cimport int64_t\n",
    "sobolev_index/errors.py": "class InvalidMeasureError(ValueError):\n    pass\n",
    "sobolev_index/index/__init__.py": "from .storage import open_index\n",
    "sobolev_index/index/storage.py": (
        "import sqlite3\n"
        "from .. import _features, errors\n"
        "from ..distributed.client import Client\n"
        "import dask.array as da\n"
        "from ..sqlite_plugin import register\n"),
    # the sqlite-utils plugin sits above index: its imports of index are fine
    "sobolev_index/sqlite_plugin.py": "def f():\n    from .index import sql\n",
    "sobolev_index/distributed/client.py": "import dask\nfrom distributed import Client\n",
    "sobolev_index/web/plugin.py": "from datasette import hookimpl\nimport zarr\n",
    "sobolev_index/_console.py": "import sys\nimport uvicorn\n",
    "sobolev_index/index/_scan.pyx": (
        "from .._typedefs cimport (\n    float64_t,\n    int64_t)\n"
        "from . import storage\n"),
    "sobolev_index/ingest/__init__.py": "",
    "sobolev_index/ingest/fill.py": "from ..index import storage\nfrom . import documents\n",
    "sobolev_index/ingest/documents.py": "from .fill import create_and_fill\nfrom .text import tokenize\n",
    "sobolev_index/ingest/text.py": "import re\n",
    "sobolev_index/ingest/pointindex.py": (
        "from .fill import create_and_fill\n"
        "from .documents import TEXT_META\n"
        "from . import pipelines\n"),
    "sobolev_index/ingest/pipelines.py": "from . import documents, pointindex\n",
    "sobolev_index/ingest/novel.py": "from .pointindex import x\n",
    "sobolev_index/__init__.py": "from .index import open_index\n",
    "cli/__init__.py": (
        "from .. import __version__\n"
        "def build():\n"
        "    from ..ingest.pipelines import build_from_files\n"),
}


def _synthetic_tree():
    sources = []
    for path, text in SYNTHETIC.items():
        directory, name = os.path.split(path)
        stem, ext = os.path.splitext(name)
        top, *rest = directory.split("/")
        parts = SOURCE_DIRS[top].split(".") + rest
        is_package = stem == "__init__"
        module = ".".join(parts if is_package else parts + [stem])
        sources.append(Source(module, path, text, compiled=ext != ".py", is_package=is_package))
    return Tree(sources)


def test_synthetic_violations_are_flagged():
    """The checker on a made-up tree: every kind of violation is found, at its
    line, and nothing that the rule allows is reported."""
    found = sorted((v.rule, v.where) for v in check(_synthetic_tree()))
    assert found == sorted([
        ("upward", "sobolev_index/measures.py:4"),  # function-local from .index
        ("upward", "sobolev_index/measures.py:6"),  # importlib.import_module
        ("facade", "sobolev_index/measures.py:8"),  # from sobolev_index import ...
        ("files", "sobolev_index/_features.pyx:7"),  # libc.stdio
        ("files", "sobolev_index/_features.pyx:8"),  # os.path
        ("compiled", "sobolev_index/_features.pyx:9"),  # .errors is Python
        ("files", "sobolev_index/_features.pyx:10"),  # sqlite3.h
        ("upward", "sobolev_index/index/storage.py:3"),  # distributed
        ("optional library", "sobolev_index/index/storage.py:4"),  # dask below distributed
        ("upward", "sobolev_index/index/storage.py:5"),  # the sqlite-utils plugin
        ("optional library", "sobolev_index/web/plugin.py:2"),  # zarr outside distributed
        ("optional library", "sobolev_index/_console.py:2"),  # the facade
        ("compiled", "sobolev_index/index/_scan.pyx:4"),  # from . import storage
        ("ingest kinds", "sobolev_index/ingest/fill.py:2"),  # shared imports text
        ("ingest kinds", "sobolev_index/ingest/pointindex.py:2"),  # points imports text
        ("ingest kinds", "sobolev_index/ingest/pointindex.py:3"),  # points imports pipelines
        ("unclassified ingest module", "sobolev_index/ingest/novel.py"),
    ]), found
    # the messages name both ends and what to do
    messages = {str(v) for v in check(_synthetic_tree())}
    assert any("distributed, web or sqlite_plugin" in m for m in messages)
    assert any("INGEST_KINDS in tests/test_layers.py" in m for m in messages)
    assert any("sobolev_index.ingest.pointindex (ingest, points) imports "
               "sobolev_index.ingest.documents (ingest, text)" in m for m in messages), messages


def test_synthetic_imports_are_parsed():
    tree = _synthetic_tree()
    # a parenthesised cimport over several lines, relative from a subpackage
    assert "sobolev_index._typedefs" in _imported(tree, "sobolev_index.index._scan")
    # the docstring and the comment of _features.pyx are not code
    features = _imported(tree, "sobolev_index._features")
    assert "h5py" not in features and "sqlite3" not in features
    assert "numpy" in features and "sobolev_index._typedefs" in features
    # from .. import <module> names the module, from .. import <name> the package
    assert _imported(tree, "sobolev_index.index.storage") == {
        "sqlite3", "sobolev_index._features", "sobolev_index.errors",
        "sobolev_index.distributed.client", "dask.array", "sobolev_index.sqlite_plugin"}
    assert _imported(tree, "sobolev_index.cli") == {"sobolev_index",
                                                    "sobolev_index.ingest.pipelines"}
