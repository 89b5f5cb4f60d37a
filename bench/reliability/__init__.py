"""Reliability trials: faults and bad input run against sobolev-index, and counted.

Each trial injects one fault or feeds one bad input to the installed package
(the Python API ``sobolev_index.SobolevIndex`` and the command line
``python -m sobolev_index``), then classifies what happened. Every table row
lists the outcome classes it expects; any other outcome is a failure, and
the run exits with status 1 after writing its results.

The promise under test:

- acknowledged data is never lost (a killed writer, a full disk, a lost
  SQLite log);
- rejected input leaves the index byte-identical, with one clear error
  (an exception the package raises on purpose, or one ``Error:`` line);
- a concurrent reader never sees a false "corrupt", nor a state that was
  never committed;
- damage to any file is reported (by opening or by ``verify()``), never
  passed off as ok, and never repaired by deleting committed data.

Trials that might crash the interpreter (damaged files, fault injection)
run in child processes (``python -m bench.reliability --role ...``, or the
test-suite's scripts in ``tests/_support/children/``); a child that dies is
counted as a "crash" and the next trial starts in a fresh child.

Usage, from the repository's root::

    python -m bench.reliability                 # every kind, ~11 minutes on 2 cores
    python -m bench.reliability --quick         # a few trials of each kind, ~35 s
    python -m bench.reliability --only byteflip,lost-wal --trials 50

Writes ``bench/results/reliability.json`` and generates ``docs/reliability.md``
from it (``--out-json``, ``--out-md`` to write elsewhere; ``--from-json`` to
regenerate the page only). ``--list`` names the kinds. Progress goes to stderr.
The real full-disk trials mount a tmpfs and so need root on Linux; elsewhere
their row is skipped, with the reason in the table.

Run from the root, ``-m`` puts the root first on ``sys.path``, so the bench
tests the tree's ``sobolev_index`` (built in place); to test an installed
package instead, run it from another folder with the root last on
PYTHONPATH, as ``tests/test_reliability_script.py`` does. The first progress
line names the package's folder.

The modules: ``harness`` (the run, its rows, child processes, timing),
``indexes`` (the index templates, copies and snapshots), ``faults`` (the
injections), ``kinds/`` (the trials, by kind), ``report`` (the JSON result
and the page), ``__main__`` (the command line).

The bench runs the test-suite's child scripts and helpers (``_support``: the
deterministic batches, index snapshots, :class:`LineChild`), so that each
exists once. ``tests/`` is not a package: this is the one place that puts it
on ``sys.path``, as pytest does for the tests; the test extra
(``pip install -e '.[test]'``) brings what ``_support`` imports.
"""
import os
import sys

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(BENCH_DIR)
TESTS_DIR = os.path.join(REPO_DIR, "tests")

if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
