"""Child processes: the environment they run in, the scripts in ``children/``
and :class:`LineChild`, which follows a child's line protocol.

A child must import the very ``sobolev_index`` this process tests and the
test helpers (``_support``, ``reference``): :func:`child_env` puts the
directory of both on ``PYTHONPATH``, so no script edits ``sys.path``.

The reliability bench (``bench/reliability/``) runs the same children with
these helpers, so that a child exists once.
"""
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from _support import REPO_DIR, TESTS_DIR

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


def repo_child_env(**extra):
    """:func:`child_env` with the repository's root last on PYTHONPATH, so
    that a child can run ``python -m bench.reliability`` (the root holds
    ``bench/``) while ``sobolev_index`` still comes from where this process
    imported it (an entry before the root)."""
    env = child_env(**extra)
    entries = env["PYTHONPATH"].split(os.pathsep)
    if REPO_DIR not in entries:
        env["PYTHONPATH"] = os.pathsep.join(entries + [REPO_DIR])
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
# The delay file of the Dask worker preload children/delayed_shards.py.
SHARD_DELAY_ENV = "SOBOLEV_TEST_SHARD_DELAY"


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


class LineChild:
    """``python ARGV...`` whose stdout lines a thread collects, each with the
    time it arrived, so that a parent can wait for a protocol line and act
    right after it (kill the child, start a reader).

    stdin is a pipe: closing it (:meth:`finish`) ends children that wait on
    it, such as ``hold_writer.py`` with SECONDS < 0. stderr is collected by a
    second thread, so that a chatty child never blocks on a full pipe.
    ``lines`` holds (time, text) pairs and ends with "<EOF>" once stdout is
    closed.
    """

    def __init__(self, argv, env=None, cwd=None):
        self.proc = subprocess.Popen([sys.executable, *map(str, argv)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     errors="replace", env=env or child_env(), cwd=cwd)
        self.lines = []
        self.cond = threading.Condition()
        self._err = []
        threading.Thread(target=self._read, daemon=True).start()
        self._err_reader = threading.Thread(target=self._err.extend, args=(self.proc.stderr,),
                                            daemon=True)
        self._err_reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append((time.monotonic(), line.strip()))
                self.cond.notify_all()
        with self.cond:
            self.lines.append((time.monotonic(), "<EOF>"))
            self.cond.notify_all()

    def wait_for(self, prefix, timeout, after=0):
        """Index of the first line at position >= ``after`` that starts with
        ``prefix``; None after ``timeout`` seconds or at the end of stdout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i in range(after, len(self.lines)):
                    if self.lines[i][1].startswith(prefix):
                        return i
                    if self.lines[i][1] == "<EOF>":
                        return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def text(self):
        """The lines so far, without their times and the "<EOF>" mark."""
        with self.cond:
            return [text for _, text in self.lines if text != "<EOF>"]

    def ended(self):
        """Whether stdout has been read to its end."""
        with self.cond:
            return bool(self.lines) and self.lines[-1][1] == "<EOF>"

    def stderr(self):
        """What the child wrote to stderr (all of it once the child is gone)."""
        if self.proc.poll() is not None:
            self._err_reader.join(timeout=30)
        return "".join(self._err)

    def kill(self):
        """SIGKILL the child, wait for it and its stdout; returns its stderr."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self.wait_for("<EOF>", 30)
        return self.stderr()

    def finish(self, timeout=120):
        """Close stdin and wait for the child to end (killed after
        ``timeout`` seconds); returns its exit status."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.wait_for("<EOF>", 30)
        return self.proc.returncode
