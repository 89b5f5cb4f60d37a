"""Fixtures and hooks of the test-suite; the helpers live in ``_support/``."""
import pytest
from _support.index import small_text_index
from _support.settings import load_hypothesis_profile


def pytest_configure(config):
    load_hypothesis_profile()


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
    document), built once for the session: the SQL, web and sqlite-utils
    tests only read it. A test that writes copies it first."""
    return small_text_index(tmp_path_factory.mktemp("text-index"))
