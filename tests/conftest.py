"""Fixtures and hooks of the test-suite; the helpers live in ``_support/``."""
import pytest
from _support.index import small_text_index
from _support.settings import load_hypothesis_profile


def pytest_configure(config):
    load_hypothesis_profile()


def pytest_collection_modifyitems(config, items):
    """Leave the tests marked slow out of a plain run (``pytest``, or files
    and directories named): ``pytest -m slow`` runs them, and a test named
    by its node id (``path::name``) runs whatever its marks."""
    if config.option.markexpr or any("::" in arg for arg in config.args):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture
def parallel_everywhere():
    """Lower the one serial threshold so that small inputs really take the
    parallel loops; skip where fewer than 2 threads are available."""
    from sobolev_index import _openmp_helpers

    if _openmp_helpers.effective_threads(2) < 2:
        pytest.skip("fewer than 2 CPUs (or a build without OpenMP): the parallel "
                    "loops cannot run with 2 threads here")
    old = _openmp_helpers.set_serial_threshold(1)
    assert _openmp_helpers.effective_threads(2, work=1) == 2, "the threshold did not take"
    yield
    _openmp_helpers.set_serial_threshold(old)


@pytest.fixture(scope="session")
def text_index_path(tmp_path_factory):
    """The small text index of tests/_support/index.py (one deleted
    document), built once for the session: the SQL and web tests only read
    it. A test that writes, or opens it for writing, copies it first."""
    return small_text_index(tmp_path_factory.mktemp("text-index"))
