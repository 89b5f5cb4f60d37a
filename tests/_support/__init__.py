"""Shared helpers of the test-suite (not tests themselves).

``tests/`` has no ``__init__.py``, so pytest (rootdir-based ``prepend`` import
mode) puts ``tests/`` on ``sys.path`` before it imports ``conftest.py`` and the
test files, whatever the current directory: ``import _support`` and ``import
reference`` work without touching ``sys.path``. Child processes get the same
through ``PYTHONPATH`` from :func:`_support.processes.child_env`.

Nothing here imports ``sobolev_index`` at import time, so that
``test_reference.py`` can check the reference without the library, and the
scripts in ``_support/children/`` start quickly.

- ``graphs``: random graphs (``GraphSpec``), unique-path roots, hypothesis strategies;
- ``measures``: random measures, CSR batches, dense vectors, CSR comparisons;
- ``expected``: expected distances from ``reference.py`` and the tie-tolerant top-k checks;
- ``index``: deterministic batches, snapshots of an index directory, catalog edits;
- ``processes``: child processes (environment, scripts in ``children/``);
- ``corpus``: a small synthetic text corpus with word vectors, word2vec text files;
- ``cli``: running the click CLI in-process;
- ``bench``: importing the benchmark code in ``bench/`` that tests check;
- ``settings``: hypothesis profile and the example-count scale;
- ``data``: where the real data sets are (``$SOBOLEV_INDEX_DATA`` or ``../shared/data``).
"""
import os

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TESTS_DIR)
