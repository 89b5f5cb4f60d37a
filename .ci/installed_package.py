"""pytest plugin for CI (``-p installed_package``, with .ci on PYTHONPATH).

It stops the run before any test when ``sobolev_index`` or its CLI would be
imported from anywhere but this virtual environment's site-packages, e.g. the
uncompiled source package of a checkout or an unpacked sdist, and names the
package under test in the report header.
"""
import glob
import importlib.machinery
import os
import sysconfig

import pytest

_location = None


def _inside(path, directories):
    return any(path == d or path.startswith(d + os.sep) for d in directories)


def pytest_configure(config):
    global _location
    import sobolev_index
    import sobolev_index.cli

    site = {os.path.realpath(sysconfig.get_path(key)) for key in ("purelib", "platlib")}
    for module in (sobolev_index, sobolev_index.cli):
        path = os.path.realpath(module.__file__)
        if not _inside(path, site):
            raise pytest.UsageError(
                f"{module.__name__} was imported from {path}, not from the installed "
                f"package in {' or '.join(sorted(site))}")
    package = os.path.dirname(os.path.realpath(sobolev_index.__file__))
    compiled = {  # a set: the suffixes overlap (".cpython-311-x86_64-linux-gnu.so", ".so")
        name for suffix in importlib.machinery.EXTENSION_SUFFIXES
        for name in glob.glob(os.path.join(package, "**", "*" + suffix), recursive=True)
    }
    if not compiled:
        raise pytest.UsageError(f"the installed package in {package} has no compiled modules")
    _location = f"{package} ({len(compiled)} compiled modules)"


def pytest_report_header(config):
    return f"sobolev_index under test: {_location}"
