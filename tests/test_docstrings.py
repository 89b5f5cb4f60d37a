"""The public API's docstrings are in numpydoc form, and their examples run.

Public: the names of ``sobolev_index.__all__`` (ShardedIndex among them),
the ``__all__`` of the modules ``sobolev_index.ingest.PUBLIC_MODULES``
names, and the public methods and properties of their classes. Each is
checked with numpydoc's own validator (not a parser of ours), for the
sections a user looks for:

- GL08: a docstring (a method may inherit the one of the method it
  overrides, IndexBase's contract for the single and sharded index);
- PR01 / PR02: a Parameters section naming exactly the signature's
  parameters;
- RT01 / YD01: a Returns (Yields) section where the function returns
  (yields) something;
- EX01: an Examples section, for the module-level functions and classes
  (exceptions excepted: raising one is their example).

The Examples are run by doctest, on the modules that hold them.
"""
import doctest
import importlib
import inspect

import pytest

numpydoc_validate = pytest.importorskip("numpydoc.validate", reason="numpydoc (the test extra)")

import sobolev_index  # noqa: E402
from sobolev_index import ingest  # noqa: E402

CODES = {"GL08", "PR01", "PR02", "RT01", "YD01"}


def _public_objects():
    """(import path, object, top level?) for every public name, once each."""
    seen = set()

    def with_members(path, obj):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        yield path, obj, True
        if not inspect.isclass(obj):
            return
        for name, member in vars(obj).items():
            if name.startswith("_"):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if inspect.isfunction(member) or isinstance(member, property):
                yield f"{path}.{name}", member, False

    def of(obj):
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and \
                obj.__module__.startswith("sobolev_index"):
            yield from with_members(f"{obj.__module__}.{obj.__qualname__}", obj)

    for name in sobolev_index.__all__:
        yield from of(getattr(sobolev_index, name))
    for module_name in ingest.PUBLIC_MODULES:
        module = importlib.import_module(f"sobolev_index.ingest.{module_name}")
        for name in module.__all__:
            yield from of(getattr(module, name))


PUBLIC = list(_public_objects())


def test_the_public_names_are_many_and_include_the_entry_points():
    paths = {path.rsplit(".", 1)[-1] for path, _, _ in PUBLIC}
    assert {"SobolevIndex", "ShardedIndex", "search", "build_index", "pairwise_sobolev",
            "read_point_clouds", "build_from_files"} <= paths
    assert len(PUBLIC) > 150


def _problems(path, obj, top):
    if isinstance(obj, property):
        # numpydoc cannot import a property by its path; a docstring is
        # what it would ask of one
        return [] if (obj.__doc__ or "").strip() else [("GL08", "no docstring")]
    codes = set(CODES)
    if obj.__doc__ is None and inspect.getdoc(obj):
        # A method without a docstring of its own is documented by the one
        # it overrides (IndexBase's contract), as help() and the API
        # reference show it; that one must still name its parameters.
        codes.discard("GL08")
    if top and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
        codes.add("EX01")
    return [(code, message) for code, message in numpydoc_validate.validate(path)["errors"]
            if code in codes]


@pytest.mark.parametrize("path,obj,top", PUBLIC, ids=[p for p, _, _ in PUBLIC])
def test_numpydoc_sections(path, obj, top):
    problems = _problems(path, obj, top)
    assert not problems, "\n".join(f"{path}: {code} {message}" for code, message in problems)


def test_the_check_finds_a_missing_parameter():
    # The validator itself, on a function of this file that leaves out a
    # parameter and its return value: the check above can fail.
    codes = {code for code, _ in _problems(f"{__name__}._undocumented", _undocumented, True)}
    assert {"PR01", "RT01", "EX01"} <= codes


def _undocumented(a, b):
    """Add two numbers.

    Parameters
    ----------
    a : int
        The first.
    """
    return a + b


def _modules_with_examples():
    names = sorted({obj.__module__ for _, obj, _ in PUBLIC if not isinstance(obj, property)})
    return [name for name in names if ">>>" in inspect.getsource(importlib.import_module(name))]


@pytest.mark.parametrize("module_name", _modules_with_examples())
def test_examples_run(module_name, tmp_path, monkeypatch):
    # Examples that write do so in the working directory: a new one each.
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, module_name) if t.examples]
    assert tests, f"{module_name} has '>>>' but no example doctest finds"
    report = []
    for test in tests:
        runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of " \
        f"{module_name} failed:\n" + "".join(report)
