"""Child processes: the environment they run in and the scripts in ``children/``.

A child must import the very ``sobolev_index`` this process tests and the
test helpers (``_support``, ``reference``): :func:`child_env` puts the
directory of both on ``PYTHONPATH``, so no script edits ``sys.path``.
"""
import os
import subprocess
import sys
import tempfile

from _support import TESTS_DIR

CHILDREN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children")


def say(line):
    """One protocol line to the parent test, flushed at once: a SIGKILL may follow."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def child_script(name):
    """Path of a script in ``_support/children/``."""
    path = os.path.join(CHILDREN_DIR, name)
    assert os.path.isfile(path), path
    return path


def child_env(**extra):
    """os.environ with PYTHONPATH = tests/, the directory sobolev_index was
    imported from, then the inherited entries; OMP_NUM_THREADS=1 unless set;
    ``extra`` on top (values turned into strings)."""
    import sobolev_index

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(sobolev_index.__file__)))
    env = dict(os.environ)
    # No empty entry: it would mean the current directory, and from a source
    # checkout that imports the uncompiled package instead of the installed one.
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    entries = []
    for entry in [TESTS_DIR, package_parent] + inherited:
        if entry not in entries:
            entries.append(entry)
    env["PYTHONPATH"] = os.pathsep.join(entries)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(code_or_script, args=(), env=None, timeout=120, script=False, cwd=None):
    """Run ``python -c CODE`` (or ``python SCRIPT`` when ``script``) with ``args``;
    returns the CompletedProcess with text stdout and stderr."""
    cmd = [sys.executable]
    cmd += [code_or_script] if script else ["-c", code_or_script]
    cmd += [str(a) for a in args]
    # Not the current directory by default: from a source checkout, "-c"
    # would import its unbuilt package instead of the installed one.
    return subprocess.run(cmd, capture_output=True, text=True, env=env or child_env(),
                          timeout=timeout, cwd=cwd or tempfile.gettempdir())


SERIAL_THRESHOLD_ENV = "SOBOLEV_TEST_SERIAL_THRESHOLD"


def serial_threshold_from_env():
    """In a child: set the serial threshold of the compiled loops to
    $SOBOLEV_TEST_SERIAL_THRESHOLD when the parent set it (1: even small
    inputs run in parallel). Returns the threads the loops may use here."""
    from sobolev_index import _openmp_helpers

    if os.environ.get(SERIAL_THRESHOLD_ENV):
        _openmp_helpers.set_serial_threshold(int(os.environ[SERIAL_THRESHOLD_ENV]))
    return _openmp_helpers.effective_threads()


def stop_process(proc, timeout=20):
    """End a child process: SIGTERM, then SIGKILL if it is still there after
    ``timeout`` seconds; returns once it is gone."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
