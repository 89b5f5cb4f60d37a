"""The benchmark code under ``bench/`` that tests check (``bench/paper``),
imported from its files: ``bench/`` is not a package on ``sys.path``."""
import importlib
import importlib.util
import os
import sys

import pytest

from _support import REPO_DIR

BENCH_DIR = os.path.join(REPO_DIR, "bench")


def bench_module(name):
    """Import ``bench/<a>/<b>.py`` as module ``a.b`` (e.g. "paper.baselines").

    The top-level package (``bench/paper``) is loaded from its directory and
    registered in ``sys.modules``, so the module's own imports of its package
    work. Skips the calling test module when ``bench/`` is not there (a tree
    without the benchmarks)."""
    package = name.split(".")[0]
    package_dir = os.path.join(BENCH_DIR, package)
    if not os.path.isfile(os.path.join(package_dir, "__init__.py")):
        pytest.skip(f"{package_dir} is not in this tree", allow_module_level=True)
    loaded = sys.modules.get(package)
    if loaded is None or os.path.dirname(getattr(loaded, "__file__", "") or "") != package_dir:
        spec = importlib.util.spec_from_file_location(
            package, os.path.join(package_dir, "__init__.py"),
            submodule_search_locations=[package_dir])
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        spec.loader.exec_module(module)
    return importlib.import_module(name)
