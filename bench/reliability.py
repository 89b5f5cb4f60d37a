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
run in child processes of this script; a child that dies is counted as a
"crash" and the next trial starts in a fresh child.

Usage::

    python bench/reliability.py                 # every kind, ~5 minutes on 2 cores
    python bench/reliability.py --quick         # a few trials of each kind, ~35 s
    python bench/reliability.py --only byteflip,lost-wal --trials 50

Writes ``bench/results/reliability.json`` and generates ``docs/reliability.md``
from it (``--out-json``, ``--out-md`` to write elsewhere; ``--from-json`` to
regenerate the page only). ``--list`` names the kinds. Progress goes to stderr.
The real full-disk trials mount a tmpfs and so need root on Linux; elsewhere
their row is skipped, with the reason in the table.
"""
import argparse
import builtins
import contextlib
import datetime
import errno
import hashlib
import io
import json
import math
import os
import platform
import queue
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_facts, positive_int  # noqa: E402
from reliability_checks import kind_checked_open  # noqa: E402
from reliability_inputs import kind_input_rules, kind_pipes  # noqa: E402
from reliability_shards import kind_shard_waits  # noqa: E402
from reliability_sql import kind_sql_limits  # noqa: E402

SCRIPT = os.path.abspath(__file__)
BENCH_DIR = os.path.dirname(SCRIPT)
REPO_DIR = os.path.dirname(BENCH_DIR)
DEFAULT_JSON = os.path.join(BENCH_DIR, "results", "reliability.json")
DEFAULT_MD = os.path.join(REPO_DIR, "docs", "reliability.md")

# Random trials per kind scale with --trials (this is its default); kinds
# that try a fixed list of cases try all of them (a subset with --quick).
DEFAULT_TRIALS = 20
QUICK_TRIALS = 2
# Deterministic batch contents: a child process rebuilds batch b from b alone.
BATCH_SEED = 20_26_11
# A raw write() of the fault-injected file layer writes at most this much
# (a short write is legal), so that a segment write has several positions.
WRITE_CAP = 16 << 10
# A trial of a child process that prints nothing for this long is a hang.
TRIAL_TIMEOUT = 120.0
# The run's work directory, shown as $WORK in the recorded details.
WORKDIR = [None]


# ============================================================== results
@dataclass
class Row:
    """One line of the table: a fault or input kind, its trials and outcomes."""

    id: str
    group: str
    fault: str
    injection: str
    expected: str
    ok_outcomes: tuple
    outcomes: Counter = field(default_factory=Counter)
    examples: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    skipped: str = None
    seconds: float = 0.0

    def add(self, outcome, detail=""):
        """Count one trial; keep the first two details of each unexpected outcome."""
        self.outcomes[outcome] += 1
        if outcome in self.ok_outcomes or self.outcomes[outcome] > 2 or len(self.examples) >= 14:
            return
        text = f"{outcome}: {detail}" if detail else outcome
        if WORKDIR[0]:
            text = text.replace(WORKDIR[0], "$WORK")
        self.examples.append(text[:600])

    @property
    def trials(self):
        return sum(self.outcomes.values())

    @property
    def unexpected(self):
        return {k: v for k, v in self.outcomes.items() if k not in self.ok_outcomes}

    @property
    def passed(self):
        if self.skipped:
            return None
        return self.trials > 0 and not self.unexpected

    def as_json(self):
        return {
            "id": self.id, "group": self.group, "fault": self.fault, "injection": self.injection,
            "expected": self.expected, "expected_outcomes": list(self.ok_outcomes),
            "trials": self.trials, "outcomes": dict(self.outcomes.most_common()),
            "unexpected": self.unexpected, "passed": self.passed, "skipped": self.skipped,
            "examples": self.examples, "notes": self.notes, "kind_seconds": round(self.seconds, 1),
        }


class Run:
    """What every kind gets: options, a work directory, the rows, progress."""

    def __init__(self, args, workdir):
        self.args = args
        self.quick = args.quick
        self.trials = args.trials
        self.rng = random.Random(args.seed)
        self.seed = args.seed
        self.workdir = workdir
        self.rows = []
        self.started = time.monotonic()
        self._templates = {}

    def log(self, message):
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)

    def row(self, id, group, fault, injection, expected, ok_outcomes):
        row = Row(id, group, fault, injection, expected, tuple(ok_outcomes))
        self.rows.append(row)
        return row

    def dir(self, name):
        path = os.path.join(self.workdir, name)
        os.makedirs(path, exist_ok=True)
        return path

    def template(self, name):
        """A closed index built once per run, to be copied by trials."""
        if name not in self._templates:
            path = os.path.join(self.dir("templates"), name)
            TEMPLATES[name](path, self.seed)
            self._templates[name] = path
        return self._templates[name]

    def finish(self, rows, started):
        """Log the rows of a kind that began at ``started`` (time.monotonic())."""
        finish_rows(self, rows, started)

    def env(self):
        """The environment of a child process that must import the package
        this run tests (see child_env)."""
        return child_env()

    def cli(self, args, timeout=120, stdin=None):
        """``python -m sobolev_index ARGS`` in the work directory: (status,
        stdout, stderr, seconds)."""
        return run_cli(args, cwd=self.workdir, timeout=timeout, stdin=stdin)

    def subset(self, items, quick_count):
        """All items, or with --quick an evenly spread subset of quick_count."""
        items = list(items)
        if not self.quick or len(items) <= quick_count:
            return items
        step = len(items) / quick_count
        return [items[int(i * step)] for i in range(quick_count)]


def finish_rows(run, rows, started):
    seconds = time.monotonic() - started
    for row in rows:
        row.seconds = seconds  # of the whole kind, shared by its rows
        state = {True: "pass", False: "FAIL", None: "skipped"}[row.passed]
        counts = ", ".join(f"{k} {v}" for k, v in row.outcomes.most_common())
        run.log(f"  [{state}] {row.id}: {row.trials} trials ({counts or row.skipped})")


# ============================================================== helpers
def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_hashes(path, with_wal=True):
    """{relative path: sha256} of every file under ``path``, and its folders.

    SQLite's -shm is left out (readers write their marks there), and so is
    an empty -wal (any connection leaves one); ``with_wal=False`` leaves out
    the -wal too, whose committed content the catalog dump compares.
    """
    out = {}
    folders = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        folders += [os.path.relpath(os.path.join(root, d), path) for d in dirs]
        for name in sorted(files):
            full = os.path.join(root, name)
            if name.endswith("-shm"):
                continue
            if name.endswith("-wal") and (not with_wal or os.path.getsize(full) == 0):
                continue
            out[os.path.relpath(full, path)] = sha256_of(full)
    out["<folders>"] = "|".join(sorted(folders))
    return out


def catalog_dump(path):
    """The catalog's content as an SQL dump, read from a copy of the catalog
    and its log (so that reading cannot fold the log in or touch the index)."""
    source = os.path.join(path, "catalog.sqlite")
    if not os.path.exists(source):
        return "<no catalog>"
    with tempfile.TemporaryDirectory(prefix="dump-") as tmp:
        for suffix in ("", "-wal"):
            if os.path.exists(source + suffix):
                shutil.copyfile(source + suffix, os.path.join(tmp, "catalog.sqlite" + suffix))
        try:
            con = sqlite3.connect(os.path.join(tmp, "catalog.sqlite"))
            try:
                return "\n".join(con.iterdump())
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            return f"<unreadable: {exc}>"


def snapshot(path, strict=True):
    """Every file's sha256 and the catalog dump. ``strict=False`` compares
    the SQLite log through the dump only (a failed commit may leave
    uncommitted frames in it, which SQLite ignores)."""
    return {"files": file_hashes(path, with_wal=strict), "catalog": catalog_dump(path)}


def differences(before, after):
    """What changed between two snapshots, as short text ([] if nothing)."""
    out = []
    if before["catalog"] != after["catalog"]:
        out.append("catalog content")
    fb, fa = before["files"], after["files"]
    out += sorted(k for k in set(fb) | set(fa) if fb.get(k) != fa.get(k))
    return out


def copy_index(src, dst, without=()):
    """Copy an index directory, leaving out files whose names end with ``without``."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n.endswith(tuple(without))]
                    if without else [])
    return dst


def describe(exc):
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:240]}"


_PACKAGE_DIRS = None


def package_dirs():
    global _PACKAGE_DIRS
    if _PACKAGE_DIRS is None:
        import sobolev_index
        import sobolev_index.cli as cli

        _PACKAGE_DIRS = tuple({os.path.dirname(os.path.abspath(sobolev_index.__file__)) + os.sep,
                               os.path.dirname(os.path.abspath(cli.__file__)) + os.sep})
    return _PACKAGE_DIRS


def raised_on_purpose(exc):
    """Whether ``exc`` came from a ``raise`` statement of the package: a check
    that names the problem, rather than an error of Python, NumPy or SQLite
    surfacing from code that did not expect the input."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    last = frames[-1]
    return (os.path.abspath(last.filename).startswith(package_dirs())
            and (last.line or "").lstrip().startswith("raise"))


def where_raised(exc):
    """The innermost line of the package in the exception's traceback (or
    the innermost line at all, when the package has none)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(package_dirs())]
    last = ours[-1] if ours else frames[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno} `{(last.line or '').strip()[:80]}`"


def child_env():
    """The environment of child processes: the package this process imported
    first on PYTHONPATH, one OpenMP thread each (they share the cores)."""
    import sobolev_index

    parent = os.path.dirname(os.path.dirname(os.path.abspath(sobolev_index.__file__)))
    env = dict(os.environ)
    entries = [parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(entries))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_cli(args, cwd, timeout=120, stdin=None):
    """``python -m sobolev_index ARGS``; returns (status, stdout, stderr, seconds)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "sobolev_index", *map(str, args)], cwd=cwd,
                          env=child_env(), capture_output=True, timeout=timeout, input=stdin)
    return (done.returncode, done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"), time.monotonic() - started)


def cli_error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def git_facts():
    """The commit of the package under test: of its source tree when it was
    imported from a git checkout, else of this script's repository."""
    import sobolev_index

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(sobolev_index.__file__)))

    def git(where, *args):
        try:
            done = subprocess.run(["git", "-C", where, *args], capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git(package_root, "rev-parse", "--show-toplevel")
    where = package_root if top and os.path.samefile(top, package_root) else REPO_DIR
    commit = git(where, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "uncommitted_changes": None, "package": package_root}
    dirty = git(where, "status", "--porcelain", "--untracked-files=no", "--",
                "sobolev_index", "cli", "setup.py")
    return {"commit": commit, "uncommitted_changes": bool(dirty), "package": package_root}


# ============================================================== data
def random_measure(rng, n_nodes, max_support=12):
    k = int(rng.integers(1, max_support + 1))
    return rng.integers(n_nodes, size=k).astype(np.int64), rng.uniform(0.05, 1.0, size=k)


def batch_size(b, max_size):
    return int(np.random.default_rng([BATCH_SEED, int(b), 1]).integers(1, max_size + 1))


def batch_keys(b, max_size):
    return [f"b{b:06d}-{i:03d}" for i in range(batch_size(b, max_size))]


def batch_measures(b, n_nodes, max_size):
    rng = np.random.default_rng([BATCH_SEED, int(b), 2])
    return [random_measure(rng, n_nodes) for _ in range(batch_size(b, max_size))]


def make_graph(n_nodes, seed):
    from sobolev_index import Graph

    rng = np.random.default_rng([seed, n_nodes])
    return Graph.from_points(rng.normal(size=(n_nodes * 6, 3)), n_nodes=n_nodes, edges="log",
                             seed=seed)


def build_small(path, seed):
    """60 nodes, 2 roots, four segments (12 + 9 + 7 + 80 documents; the
    last big enough to have a dense block and group norms), labels, fields
    and one tombstone: the index most trials damage a copy of."""
    from sobolev_index import SobolevIndex

    graph = make_graph(60, seed)
    rng = np.random.default_rng([seed, 1])
    with SobolevIndex.create(path, graph, roots=2, seed=seed) as index:
        index.add([random_measure(rng, 60) for _ in range(12)], keys=[f"a{i}" for i in range(12)],
                  labels=["x"] * 12, fields=[{"i": i} for i in range(12)])
        index.add([random_measure(rng, 60) for _ in range(9)], keys=[f"b{i}" for i in range(9)],
                  labels=["y"] * 9)
        index.add([random_measure(rng, 60) for _ in range(7)], keys=[f"c{i}" for i in range(7)])
        index.add([random_measure(rng, 60) for _ in range(80)], keys=[f"d{i}" for i in range(80)])
        index.delete(["a3"])


def build_sql(path, seed):
    """3,000 documents on 200 nodes: big enough that SQL over it runs long."""
    from sobolev_index import SobolevIndex

    graph = make_graph(200, seed)
    rng = np.random.default_rng([seed, 2])
    with SobolevIndex.create(path, graph, roots=2, seed=seed) as index:
        for part in range(3):
            index.add([random_measure(rng, 200, 20) for _ in range(1000)],
                      keys=[f"s{part}-{i}" for i in range(1000)])


TEMPLATES = {"small": build_small, "sql": build_sql}


def segment_files(path):
    return sorted(n for n in os.listdir(os.path.join(path, "segments")) if n.endswith(".h5"))


def committed_files(path):
    """Segment file names the catalog lists, read with plain sqlite3."""
    con = sqlite3.connect(f"file:{os.path.join(path, 'catalog.sqlite')}?mode=ro", uri=True)
    try:
        return sorted(row[0] for row in con.execute("SELECT file FROM segments"))
    finally:
        con.close()


def all_hashes(path):
    """sha256 of every file under ``path`` (any folder), as a set."""
    return {sha256_of(os.path.join(root, name))
            for root, _, files in os.walk(path) for name in files}


# ============================================================== child protocol
class TrialRunner:
    """Runs trials of one task in child processes of this script.

    The child prints ``BEGIN i`` before trial i and ``RESULT {...}`` after
    it. A child that dies or stops printing during a trial costs that trial
    ("crash" or "hang"); the next trial starts in a fresh child.
    """

    def __init__(self, run):
        self.run = run

    def __call__(self, task, specs, context=None, timeout=TRIAL_TIMEOUT, progress=None):
        results = [None] * len(specs)
        job_dir = self.run.dir("jobs")
        start = 0
        while start < len(specs):
            job = os.path.join(job_dir, f"{task}-{start}-{time.monotonic_ns()}.json")
            with open(job, "w") as handle:
                json.dump({"task": task, "specs": specs, "context": context or {}, "start": start,
                           "workdir": self.run.dir(f"child-{task}")}, handle)
            err_path = job + ".stderr"
            with open(err_path, "w") as err:
                proc = subprocess.Popen([sys.executable, SCRIPT, "--role", "trials", job],
                                        stdout=subprocess.PIPE, stderr=err, text=True,
                                        env=child_env(), cwd=self.run.workdir)
            lines = queue.Queue()
            threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
            current, hung = None, False
            while True:
                try:
                    line = lines.get(timeout=timeout)
                except queue.Empty:
                    hung = True
                    proc.kill()
                    break
                if line is None:
                    break
                if line.startswith("BEGIN "):
                    current = int(line.split()[1])
                elif line.startswith("RESULT "):
                    result = json.loads(line[len("RESULT "):])
                    results[result["i"]] = result
                    current = None
                    if progress:
                        progress(result)
            status = proc.wait()
            with open(err_path, errors="replace") as handle:
                tail = handle.read()[-800:]
            lost = current if current is not None else next(
                (i for i in range(start, len(specs)) if results[i] is None), None)
            if lost is None:
                break
            if hung:
                outcome = "hang"
                detail = f"no output for {timeout:.0f} s during trial {lost}"
            else:
                outcome = "crash"
                signame = signal.Signals(-status).name if status < 0 else f"exit status {status}"
                detail = f"child died ({signame}) during trial {lost} ({specs[lost]}): {tail}"
            results[lost] = {"i": lost, "row": specs[lost]["row"], "outcome": outcome,
                             "detail": detail}
            if progress:
                progress(results[lost])
            start = lost + 1
        return results


def _pump(stream, lines):
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def role_trials(job_path):
    with open(job_path) as handle:
        job = json.load(handle)
    task = TRIAL_TASKS[job["task"]]
    ctx = dict(job["context"])
    ctx["workdir"] = job["workdir"]
    ctx["cache"] = {}
    warnings.simplefilter("ignore")
    for i in range(job["start"], len(job["specs"])):
        spec = job["specs"][i]
        print(f"BEGIN {i}", flush=True)
        try:
            outcome, detail = task(spec, ctx)
        except Exception as exc:  # the trial did not expect this: a failure, reported as such
            outcome = f"uncaught {type(exc).__name__}"
            detail = f"{describe(exc)} at {where_raised(exc)}"
        print("RESULT " + json.dumps({"i": i, "row": spec["row"], "outcome": outcome,
                                      "detail": str(detail)[:1500]}), flush=True)


def run_task(run, task, specs, rows, context=None, timeout=TRIAL_TIMEOUT):
    """Run ``specs`` in children and add each result to its row."""
    by_id = {row.id: row for row in rows}
    done = [0]
    last = [time.monotonic()]

    def progress(result):
        by_id[result["row"]].add(result["outcome"], result.get("detail", ""))
        done[0] += 1
        if time.monotonic() - last[0] > 5 or done[0] == len(specs):
            last[0] = time.monotonic()
            run.log(f"    {task}: {done[0]}/{len(specs)} trials")

    TrialRunner(run)(task, specs, context, timeout=timeout, progress=progress)


class LineChild:
    """A child process of this script in one of its roles, whose stdout lines
    are collected (with their arrival times) by a thread."""

    def __init__(self, run, role, *args):
        self.err_path = os.path.join(run.dir("jobs"), f"{role}-{time.monotonic_ns()}.stderr")
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([sys.executable, SCRIPT, "--role", role, *map(str, args)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, env=child_env(), cwd=run.workdir)
        self.lines = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append((time.monotonic(), line.strip()))
                self.cond.notify_all()
        with self.cond:
            self.lines.append((time.monotonic(), "<EOF>"))
            self.cond.notify_all()

    def wait_for(self, prefix, timeout, after=0):
        """Index of the first line at position >= after starting with prefix."""
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
        with self.cond:
            return [text for _, text in self.lines if text != "<EOF>"]

    def stderr(self):
        with open(self.err_path, errors="replace") as handle:
            return handle.read()

    def kill(self):
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self.wait_for("<EOF>", 30)
        return self.stderr()

    def finish(self, timeout=120):
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.wait_for("<EOF>", 30)
        return self.proc.returncode


# ============================================================== damage checks
def damaged_index_outcome(path, originals, harmless_dump=None):
    """Open, search and verify a damaged index, then let a writer open it and
    verify(repair=True). Returns (outcome, detail).

    ``originals``: {segment file name: sha256} of the committed segments
    before the damage; every one of them must still be somewhere in the
    index directory afterwards (a repair that deletes committed data is a
    failure). ``harmless_dump``: the catalog dump before the damage, when a
    damage can be harmless (the catalog: a flip in free space).
    """
    from sobolev_index import CorruptIndexError, SobolevIndex

    detected = None
    try:
        reader = SobolevIndex.open(path, "r")
    except CorruptIndexError as exc:
        detected, detail = "detected at open", describe(exc)
        reader = None
    except Exception as exc:
        return f"wrong error at open: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
    if reader is not None:
        with reader:
            try:
                query = [(np.array([1, 5, 9]), np.array([0.2, 0.3, 0.5]))]
                reader.search(query, k=5, p=1)
                reader.search(query, k=5, p="inf")
                for key in list(reader)[:5]:
                    reader.get(key)
            except CorruptIndexError:
                pass  # found while reading: fine
            except Exception as exc:
                return (f"wrong error while reading: {type(exc).__name__}",
                        f"{describe(exc)} at {where_raised(exc)}")
            try:
                report = reader.verify()
            except Exception as exc:
                return f"verify raised {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
            if not report["ok"]:
                detected, detail = "detected by verify", "; ".join(report["problems"])[:300]
    # A writer: opening removes leftovers and repair may move or remove files;
    # neither may touch committed data.
    try:
        with SobolevIndex.open(path, "a") as writer:
            writer.verify(repair=True)
    except CorruptIndexError:
        pass
    except Exception as exc:
        return f"wrong error from a writer: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
    present = all_hashes(path)
    lost = [name for name, digest in originals.items()
            if digest not in present and not _exists_anywhere(path, name)]
    if lost:
        return "a writer deleted committed data", f"segment file(s) {lost} are gone"
    if detected:
        return detected, detail
    if harmless_dump is not None:
        now = catalog_dump(path)
        if now == harmless_dump:
            return "harmless (catalog content unchanged)", ""
        return "missed (verify ok, content changed)", _dump_difference(harmless_dump, now)
    return "missed (verify ok)", ""


def _exists_anywhere(path, name):
    return any(name in files for _, _, files in os.walk(path))


def _dump_difference(before, after):
    a, b = before.splitlines(), after.splitlines()
    changed = [line for line in b if line not in set(a)]
    return ("changed rows: " + " | ".join(changed[:3]))[:400] if changed else "dump differs"


def flip_byte(path, offset, xor):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([value ^ xor]))


def trial_damage(spec, ctx):
    """Byte flips, truncations and missing files (task "damage")."""
    template = ctx["template"]
    cache = ctx["cache"]
    if "originals" not in cache:
        cache["originals"] = {name: sha256_of(os.path.join(template, "segments", name))
                              for name in committed_files(template)}
        cache["dump"] = catalog_dump(template)
    path = copy_index(template, os.path.join(ctx["workdir"], "ix"))
    target = os.path.join(path, spec["target"])
    kind = spec["kind"]
    if kind == "flip":
        flip_byte(target, spec["offset"], spec["xor"])
    elif kind == "truncate":
        with open(target, "r+b") as handle:
            handle.truncate(spec["length"])
    elif kind == "remove":
        os.remove(target)
    elif kind == "replace":
        with open(target, "r+b") as handle:
            handle.seek(spec["offset"])
            handle.write(spec["byte"].encode("latin-1"))
    if kind == "remove":
        # Opening must refuse with a clear error and change nothing.
        from sobolev_index import CorruptIndexError, SobolevIndex

        before = snapshot(path)
        for mode in ("r", "a"):
            try:
                SobolevIndex.open(path, mode).close()
            except CorruptIndexError as exc:
                message = str(exc)
            except Exception as exc:
                return f"wrong error at open: {type(exc).__name__}", describe(exc)
            else:
                return "opened without the file", f"mode {mode!r}"
            stem = os.path.basename(spec["target"]).split(".")[0]
            if stem not in message:
                return "error does not name the file", message[:200]
        changed = differences(before, snapshot(path))
        if changed:
            return "index changed", f"{changed}"
        return "refused at open, unchanged", ""
    harmless = cache["dump"] if spec["target"] == "catalog.sqlite" else None
    outcome, detail = damaged_index_outcome(path, cache["originals"], harmless)
    return outcome, f"{spec['target']} {kind} at {spec.get('offset', spec.get('length'))}: {detail}"


# ---- arrays of a segment damaged and resealed (the checksum then agrees)
ARRAY_DAMAGE = {
    "measure node 10**6": ("measures/nodes", 3, 10**6),
    "measure node -5": ("measures/nodes", 3, -5),
    "measure mass NaN": ("measures/masses", 3, float("nan")),
    "measure row pointer past the end": ("measures/indptr", -1, 10**6),
    "normalising factor 0": ("measures/row_scale", 3, 0.0),
    "a document id repeated": ("doc_ids", 3, None),
    "posting value 7.5 (outside [0, 1])": ("inverted/post_values", 3, 7.5),
    "posting value NaN": ("inverted/post_values", 3, float("nan")),
    "posting row offset 65535": ("inverted/post_rows", 3, 65535),
    "posting list pointer past the end": ("inverted/ptr", 3, 10**6),
    "dense row of 7.5 (outside [0, 1])": ("inverted/dense", 3, 7.5),
    "row norms NaN": ("inverted/norm_low", 0, float("nan")),
    "group norms NaN": ("inverted/norm_group", 3, float("nan")),
}
ARRAY_OPERATIONS = {
    "search p=1": lambda ix: ix.search([([1, 2, 7], None)], k=3, p=1),
    "search p=inf": lambda ix: ix.search([([1, 2, 7], None)], k=3, p="inf"),
    "search p=2 by key": lambda ix: ix.search("b1", k=3, p=2),
    "gram": lambda ix: ix.gram(keys=["a0", "a4", "b2", "c1"], p=1),
    "compact": lambda ix: ix.compact(),
    "verify": lambda ix: ix.verify(),
}


def trial_arrays(spec, ctx):
    import h5py

    from sobolev_index import SobolevIndex

    cache = ctx["cache"]
    op = spec["op"]
    if op != "verify" and ("reference", op) not in cache:
        # The same operation on the undamaged index: a damage that does not
        # change the result of an operation is harmless to it.
        with SobolevIndex.open(ctx["template"]) as index:
            cache[("reference", op)] = (_whole_index_results(index) if op == "compact" else
                                        _comparable(ARRAY_OPERATIONS[op](index)))
    path = copy_index(ctx["template"], os.path.join(ctx["workdir"], "ix"))
    dataset, at, value = ARRAY_DAMAGE[spec["damage"]]
    # The first segment that has the array (small ones have no dense block).
    for name in committed_files(path):
        segment = os.path.join(path, "segments", name)
        with h5py.File(segment, "r") as f:
            if f[dataset].size:
                break
    with h5py.File(segment, "r+") as f:
        if value is None:
            f[dataset][at] = f[dataset][at - 1]
        else:
            f[dataset][at] = value
    with sqlite3.connect(os.path.join(path, "catalog.sqlite")) as db:
        db.execute("UPDATE segments SET checksum = ? WHERE file = ?", (sha256_of(segment), name))
    db.close()
    outcome, detail = _array_operation(path, op, cache.get(("reference", op)))
    return outcome, f"{spec['damage']}, {op}: {detail}"


def _comparable(result):
    """A search result or gram matrix as arrays, to compare with another."""
    if isinstance(result, tuple):  # gram: (matrix, keys, labels)
        return [np.asarray(result[0], dtype=np.float64), list(result[1])]
    return [np.asarray(result.distances, dtype=np.float64), result.keys]


def _array_operation(path, op, reference):
    from sobolev_index import CorruptIndexError, SobolevIndex

    try:
        with SobolevIndex.open(path, "a" if op == "compact" else "r") as index:
            result = ARRAY_OPERATIONS[op](index)
    except CorruptIndexError as exc:
        return "CorruptIndexError", describe(exc)
    except Exception as exc:
        return f"wrong error: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
    if op == "verify":
        return ("reported by verify", "") if not result["ok"] else ("missed (verify ok)", "")
    if op == "compact":
        # The merged segment got a fresh checksum: the damage must not pass silently into it.
        with SobolevIndex.open(path) as index:
            report = index.verify()
            if report["ok"]:
                # Fine only if the damage is gone: derived arrays (the inverted
                # file) are rebuilt from intact ones by a merge.
                now = _whole_index_results(index)
        if report["ok"]:
            if _same_results(now, reference):
                return "compacted; the damage is gone (rebuilt from intact arrays)", ""
            return "damage merged into a new segment that verifies ok", ""
        return "compacted; verify reports the damage", "; ".join(report["problems"])[:200]
    values, names = _comparable(result)
    if _same_results([[values, names]], [reference]):
        return "unaffected (same result as undamaged)", ""
    return "wrong result, no error", f"got {values.ravel()[:4].tolist()} for {str(names)[:80]}, " \
        f"undamaged {reference[0].ravel()[:4].tolist()}"


def _whole_index_results(index):
    """Results that read every array of every segment: the distance matrix of
    all live documents, and searches that use the inverted files."""
    rng = np.random.default_rng(3)
    queries = [random_measure(rng, index.graph.n_nodes) for _ in range(8)]
    return [_comparable(index.gram(keys=list(index), p=1)),
            _comparable(index.search(queries, k=len(index), p=1)),
            _comparable(index.search(queries, k=len(index), p=2))]


def _same_results(a, b):
    return len(a) == len(b) and all(
        x[1] == y[1] and x[0].shape == y[0].shape and np.allclose(x[0], y[0], rtol=1e-12, atol=1e-15)
        for x, y in zip(a, b))


# ---- the catalog edited with SQL: damage that SQLite's own checks cannot see
CATALOG_EDITS = {
    "a key's bytes not UTF-8":
        "UPDATE documents SET key = CAST(X'62ff7461' AS TEXT) WHERE key = 'b1'",
    "a document row deleted": "DELETE FROM documents WHERE key = 'b2'",
    "a document in an unlisted segment": "UPDATE documents SET segment = 99 WHERE key = 'c1'",
    "a segment's row count + 1": "UPDATE segments SET rows = rows + 1 WHERE id = 1",
    "next_doc_id behind the ids in use": "UPDATE meta SET value = '2' WHERE name = 'next_doc_id'",
    "a segment checksum changed": "UPDATE segments SET checksum = 'ab' || substr(checksum, 3) WHERE id = 2",
    "the graph checksum changed": "UPDATE meta SET value = '\"00\"' WHERE name = 'graph_checksum'",
    "a root's node changed": "UPDATE roots SET node = node + 1 WHERE position = 0",
    "meta p 1 -> 0 (one bit)": "UPDATE meta SET value = '0' WHERE name = 'p'",
    "meta p not a number": "UPDATE meta SET value = '\"abc\"' WHERE name = 'p'",
    "meta p null": "UPDATE meta SET value = 'null' WHERE name = 'p'",
    "meta p not JSON": "UPDATE meta SET value = '{' WHERE name = 'p'",
    "meta created_at not JSON": "UPDATE meta SET value = '\"2026' WHERE name = 'created_at'",
    "meta next_doc_id not a number": "UPDATE meta SET value = '\"x\"' WHERE name = 'next_doc_id'",
    "a root's eta not a number": "UPDATE roots SET eta = 'abc' WHERE position = 0",
    "a root's eta negative": "UPDATE roots SET eta = -1 WHERE position = 0",
    "a deleted flag 7": "UPDATE documents SET deleted = 7 WHERE key = 'a0'",
    "a document's fields not JSON": "UPDATE documents SET fields = '{' WHERE key = 'a1'",
    "two live documents with one key":
        "DROP INDEX documents_live_key; UPDATE documents SET key = 'a1' WHERE key = 'a2'",
    "a segment renamed to an unused name": "UPDATE segments SET file = '000099.h5' WHERE id = 2",
    "a segment renamed to another segment's name":
        "UPDATE segments SET file = '000001.h5' WHERE id = 2",
}


def trial_catalog_edit(spec, ctx):
    template = ctx["template"]
    originals = {name: sha256_of(os.path.join(template, "segments", name))
                 for name in committed_files(template)}
    path = copy_index(template, os.path.join(ctx["workdir"], "ix"))
    con = sqlite3.connect(os.path.join(path, "catalog.sqlite"))
    con.executescript(CATALOG_EDITS[spec["edit"]])
    con.commit()
    con.close()
    outcome, detail = damaged_index_outcome(path, originals)
    return outcome, f"{spec['edit']}: {detail}" if detail else spec["edit"]


# ---- paths that are not an index, and an unknown format
def trial_foreign(spec, ctx):
    from sobolev_index import CorruptIndexError, SobolevIndex, UnsupportedFormatError

    base = os.path.join(ctx["workdir"], "foreign")
    if os.path.exists(base):
        shutil.rmtree(base)
    os.makedirs(base)
    p = os.path.join(base, "thing")
    kind = spec["kind"]
    expected = CorruptIndexError
    if kind == "a regular file":
        with open(p, "w") as handle:
            handle.write("hello")
    elif kind == "an empty directory":
        os.mkdir(p)
    elif kind == "a directory of other files":
        os.mkdir(p)
        with open(os.path.join(p, "notes.txt"), "w") as handle:
            handle.write("x")
        with open(os.path.join(p, "graph.h5"), "wb") as handle:
            handle.write(b"\x89HDF\r\n\x1a\n" + bytes(100))
    elif kind == "another SQLite database":
        os.mkdir(p)
        con = sqlite3.connect(os.path.join(p, "catalog.sqlite"))
        con.execute("CREATE TABLE people (name TEXT)")
        con.commit()
        con.close()
    elif kind == "random bytes as catalog":
        os.mkdir(p)
        with open(os.path.join(p, "catalog.sqlite"), "wb") as handle:
            handle.write(np.random.default_rng(0).bytes(4096))
    elif kind == "an HDF5 file":
        import h5py

        with h5py.File(p, "w") as f:
            f["x"] = np.arange(5)
    elif kind == "a path that does not exist":
        pass
    elif kind in ("format version 999", "another format name"):
        copy_index(ctx["template"], p)
        con = sqlite3.connect(os.path.join(p, "catalog.sqlite"))
        value, name = ("999", "format_version") if kind == "format version 999" else \
            ('"other-index"', "format")
        con.execute("UPDATE meta SET value = ? WHERE name = ?", (value, name))
        con.commit()
        con.close()
        if kind == "format version 999":
            expected = UnsupportedFormatError
    before = file_hashes(base)
    try:
        SobolevIndex.open(p, spec["mode"]).close()
    except expected as exc:
        if not str(exc):
            return "error without a message", type(exc).__name__
    except Exception as exc:
        return f"wrong error: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
    else:
        return "opened", kind
    changed = differences({"files": before, "catalog": ""}, {"files": file_hashes(base), "catalog": ""})
    if changed:
        return "files changed or created", f"{changed}"
    return "refused, nothing touched", ""


# ---- bad input through the Python API
def _bad_measure_items(n):
    """Measures that must be refused: name -> a (nodes, masses) item."""
    a = np.array
    return {
        "negative mass": (a([1, 2, 3]), a([0.5, -0.25, 1.0])),
        "NaN mass": (a([1, 2]), a([0.5, np.nan])),
        "+inf mass": (a([1, 2]), a([0.5, np.inf])),
        "-inf mass": (a([1, 2]), a([0.5, -np.inf])),
        "all masses zero": (a([4, 5]), a([0.0, 0.0])),
        "subnormal masses (1e-320)": (a([0, 1]), a([1e-320, 1e-320])),
        "total below 1e-300": (a([4, 5]), a([3e-301, 3e-301])),
        "total overflows float64": (a([4, 5]), a([1e308, 1e308])),
        "node id = number of nodes": (a([1, n]), a([0.5, 0.5])),
        "node id -1": (a([-1, 2]), a([0.5, 0.5])),
        "node id 2**40": (a([2**40]), a([1.0])),
        "node id at int64 max": (a([2**63 - 1]), a([1.0])),
        "node id 1.5": (a([1.5, 2.0]), a([0.5, 0.5])),
        "node id NaN": (a([np.nan, 2.0]), a([0.5, 0.5])),
        "node ids as text": (a(["a", "b"]), a([0.5, 0.5])),
        "node ids as booleans": (a([True, False]), None),
        "empty measure": (a([], dtype=np.int64), a([])),
        "empty measure, masses None": (a([], dtype=np.int64), None),
        "more nodes than masses": (a([1, 2, 3]), a([0.5, 0.5])),
        "masses as text": (a([1, 2]), a(["a", "b"])),
        "masses complex": (a([1, 2]), a([1 + 1j, 2])),
        "a mass None": (a([1, 2]), [None, 1.0]),
        "nodes 2-D": (a([[1, 2]]), None),
        "masses 2-D": (a([1, 2]), a([[0.5, 0.5]])),
        "ragged nodes": ([1, [2, 3]], None),
        "not a pair (a triple)": (1, 2, 3),
        "not a pair (a str)": "abc",
        "not a pair (None)": None,
        "not a pair (an int)": 5,
    }


def _bad_measure_batches(n):
    """Whole ``measures`` arguments that must be refused."""
    import scipy.sparse as sp

    wide = np.zeros((2, n + 1))
    wide[:, 1] = 1.0
    negative = np.zeros((2, n))
    negative[0, 1], negative[1, 2], negative[1, 3] = 1.0, 1.0, -2.0
    empty_row = sp.csr_matrix(([1.0], ([0], [4])), shape=(2, n))
    return {
        "measures is an int": 5,
        "measures is None": None,
        "dense matrix with one column too many": wide,
        "dense matrix with a negative mass": negative,
        "sparse matrix with an empty row": empty_row,
        "3-D array": np.ones((2, n, 1)),
    }


def _deep_fields(depth):
    fields = {}
    inner = fields
    for _ in range(depth):
        inner["a"] = {}
        inner = inner["a"]
    return fields


# name -> (entries, expected exception classes by name, call(index, good measures))
def _bad_key_cases():
    two = ["k1", "k2"]
    return {
        "a key repeated in the batch": (["add"], ("DuplicateKeyError",),
                                        lambda ix, m: ix.add(m[:2], keys=["k1", "k1"])),
        "a key already live": (["add"], ("DuplicateKeyError",),
                               lambda ix, m: ix.add(m[:2], keys=["k1", "a0"])),
        "a key that is an int": (["add", "upsert"], ("ValueError", "TypeError"),
                                 lambda ix, m, e: getattr(ix, e)(m[:2], keys=["k1", 7])),
        "a key None": (["add", "upsert"], ("ValueError", "TypeError"),
                       lambda ix, m, e: getattr(ix, e)(m[:2], keys=["k1", None])),
        "an empty key": (["add", "upsert"], ("ValueError",),
                         lambda ix, m, e: getattr(ix, e)(m[:2], keys=["k1", ""])),
        "keys as one str": (["add"], ("TypeError", "ValueError"),
                            lambda ix, m: ix.add(m[:2], keys="k1")),
        "fewer keys than measures": (["add", "upsert"], ("ValueError",),
                                     lambda ix, m, e: getattr(ix, e)(m[:3], keys=two)),
        "a key with a lone surrogate": (["add", "upsert"], ("ValueError",),
                                        lambda ix, m, e: getattr(ix, e)(m[:2], keys=["k1", "k\udcff"])),
        "a label that is an int": (["add"], ("ValueError", "TypeError"),
                                   lambda ix, m: ix.add(m[:2], keys=two, labels=["x", 3])),
        "labels as one str": (["add"], ("ValueError", "TypeError"),
                              lambda ix, m: ix.add(m[:2], keys=two, labels="x")),
        "more labels than measures": (["add"], ("ValueError",),
                                      lambda ix, m: ix.add(m[:2], keys=two, labels=["x"] * 3)),
        "a label with a lone surrogate": (["add"], ("ValueError",),
                                          lambda ix, m: ix.add(m[:2], keys=two, labels=["x", "\ud800"])),
        "NaN in fields": (["add", "upsert"], ("ValueError",),
                          lambda ix, m, e: getattr(ix, e)(m[:2], keys=two,
                                                          fields=[{"v": 1}, {"v": float("nan")}])),
        "inf in fields": (["add", "upsert"], ("ValueError",),
                          lambda ix, m, e: getattr(ix, e)(m[:2], keys=two,
                                                          fields=[None, {"v": [1, float("inf")]}])),
        "fields holding an object": (["add"], ("ValueError", "TypeError"),
                                     lambda ix, m: ix.add(m[:2], keys=two, fields=[{"v": object()}, None])),
        "fields holding a NumPy array": (["add"], ("ValueError", "TypeError"),
                                         lambda ix, m: ix.add(m[:2], keys=two,
                                                              fields=[{"v": np.arange(3)}, None])),
        "fields not a dict": (["add"], ("ValueError", "TypeError"),
                              lambda ix, m: ix.add(m[:2], keys=two, fields=[[1, 2], None])),
        "fewer fields than measures": (["add"], ("ValueError",),
                                       lambda ix, m: ix.add(m[:2], keys=two, fields=[{}])),
        "fields nested 5,000 deep": (["add"], ("ValueError",),
                                     lambda ix, m: ix.add(m[:2], keys=two,
                                                          fields=[_deep_fields(5000), None])),
        "upsert without keys": (["upsert"], ("ValueError",), lambda ix, m: ix.upsert(m[:2], keys=None)),
    }


def _bad_arg_cases():
    from sobolev_index.index.sql import run_query

    q = [(np.array([1, 2, 3]), None)]
    cases = {}
    for value in (0, -1, 2.5, "3", True, 10**30, float("nan")):
        cases[f"k = {value!r}"] = (("ValueError",), lambda ix, v=value: ix.search(q, k=v))
    for value in (0.5, 0, -1, float("nan"), float("-inf"), "abc", 1j, [1]):
        cases[f"p = {value!r} (search)"] = (("ValueError",), lambda ix, v=value: ix.search(q, k=3, p=v))
        cases[f"p = {value!r} (distance)"] = (("ValueError",),
                                              lambda ix, v=value: ix.distance("a0", "b0", p=v))
    cases["p = 0 (gram)"] = (("ValueError",), lambda ix: ix.gram(["a0", "b0"], p=0))
    for value in ([7], [-1], [], [0, 0], [0.5]):
        cases[f"roots = {value!r}"] = (("ValueError",), lambda ix, v=value: ix.search(q, k=3, roots=v))
    cases["where with an unknown name"] = (("ValueError",), lambda ix: ix.search(q, where={"nope": 1}))
    cases["where as a str"] = (("ValueError",), lambda ix: ix.search(q, where="x"))
    cases["search by an unknown key"] = (("KeyNotFoundError",), lambda ix: ix.search("nope"))
    cases["distance to an unknown key"] = (("KeyNotFoundError",), lambda ix: ix.distance("a0", "nope"))
    cases["distance to a deleted key"] = (("KeyNotFoundError",), lambda ix: ix.distance("a0", "a3"))
    cases["get of an int"] = (("TypeError",), lambda ix: ix.get(3))
    cases["delete of unknown keys"] = (("KeyNotFoundError",), lambda ix: ix.delete(["a0", "nope"]))
    cases["delete(None)"] = (("TypeError", "ValueError"), lambda ix: ix.delete(None))
    cases["gram with t = NaN"] = (("ValueError",), lambda ix: ix.gram(["a0", "b0"], t=float("nan")))
    cases["gram with t = -1"] = (("ValueError",), lambda ix: ix.gram(["a0", "b0"], t=-1))
    cases["verify(sample=0)"] = (("ValueError",), lambda ix: ix.verify(sample=0))
    cases["open with mode 'w'"] = (("ValueError",), lambda ix: type(ix).open(ix.path, "w"))
    cases["SQL on a writer"] = (("SobolevIndexError",), lambda ix: run_query(ix, "SELECT 1"))
    cases["features for root 9"] = (("ValueError",), lambda ix: ix.features(["a0"], root=9))
    return cases


def trial_bad_api(spec, ctx):
    """One bad input through the API: one clear error, nothing written,
    the index byte-identical."""
    import sobolev_index.errors as errors_module
    from sobolev_index import SobolevIndex
    from sobolev_index.index import storage

    cache = ctx["cache"]
    if cache.get("index") is None:
        path = copy_index(ctx["template"], os.path.join(ctx["workdir"], "ix"))
        cache["index"] = SobolevIndex.open(path, "a")
    index = cache["index"]
    n = index.graph.n_nodes
    rng = np.random.default_rng(spec["seed"])
    good = [random_measure(rng, n) for _ in range(int(rng.integers(3, 8)))]
    row, case, entry = spec["row"], spec["case"], spec["entry"]
    if row == "bad-measures-api":
        if spec["whole"]:
            bad_batch = _bad_measure_batches(n)[case]
            expected = ("InvalidMeasureError", "TypeError")
        else:
            bad = _bad_measure_items(n)[case]
            at = int(rng.integers(0, len(good) + 1))
            bad_batch = good[:at] + [bad] + good[at:]
            expected = ("InvalidMeasureError",)
        count = (bad_batch.shape[0] if getattr(bad_batch, "ndim", 0) >= 1 else
                 len(bad_batch) if isinstance(bad_batch, list) else 3)
        keys = [f"new{i}" for i in range(count)]

        def call():
            if entry == "add":
                return index.add(bad_batch, keys=keys)
            if entry == "add (generated keys)":
                return index.add(bad_batch)
            if entry == "upsert":
                return index.upsert(bad_batch, keys=["a0"] + keys[1:])
            if entry == "search":
                return index.search(bad_batch, k=3)
            return index.distance(bad if not spec["whole"] else bad_batch, good[0])
    elif row == "bad-keys-api":
        entries, expected, fn = _bad_key_cases()[case]

        def call():
            return fn(index, good, entry) if fn.__code__.co_argcount == 3 else fn(index, good)
    else:
        expected, fn = _bad_arg_cases()[case]

        def call():
            return fn(index)
    expected_classes = tuple(getattr(errors_module, name, None) or getattr(builtins, name)
                             for name in expected)
    before = snapshot(index.path)
    written = []
    real_write = storage.write_segment

    def counting(*args, **kwargs):
        written.append(args[1])
        return real_write(*args, **kwargs)

    storage.write_segment = counting
    try:
        call()
        error = None
    except Exception as exc:
        error = exc
    finally:
        storage.write_segment = real_write
    changed = differences(before, snapshot(index.path))
    if changed:
        index.close()
        cache["index"] = None
        return "index changed", f"{case} via {entry}: {changed}; error: {error and describe(error)}"
    if error is None:
        return "accepted", f"{case} via {entry}"
    if written:
        return ("refused only after writing a segment",
                f"{case} via {entry}: {describe(error)} at {where_raised(error)}")
    if not isinstance(error, expected_classes):
        return (f"wrong error: {type(error).__name__}",
                f"{case} via {entry}: {describe(error)} at {where_raised(error)}")
    if not raised_on_purpose(error) or not str(error):
        return ("error not raised by the package's checks",
                f"{case} via {entry}: {describe(error)} at {where_raised(error)}")
    return "one clear error, unchanged", ""


# ---- S_p for large p against an independent computation
def _subtree_masses(tree, nodes, masses):
    """Edge masses of a measure on a tree, computed here from the parent
    pointers (a reference independent of the package's feature code)."""
    n = len(tree.parent)
    acc = np.zeros(n)
    masses = np.ones(len(nodes)) if masses is None else np.asarray(masses, dtype=np.float64)
    np.add.at(acc, np.asarray(nodes, dtype=np.int64), masses / masses.sum())
    for v in np.argsort(-tree.depth, kind="stable"):
        if tree.parent[v] >= 0:
            acc[tree.parent[v]] += acc[v]
    acc[tree.parent < 0] = 0.0
    return acc


def _reference_sp(alpha, beta, weights, p):
    diff = np.abs(alpha - beta)
    top = diff.max()
    if top == 0:
        return 0.0
    if math.isinf(p):
        return float(top)
    # Relative to the largest difference, so that no power underflows to 0.
    return float(top * np.sum(weights * (diff / top) ** p) ** (1.0 / p))


def trial_large_p(spec, ctx):
    from sobolev_index import SobolevIndex

    cache = ctx["cache"]
    if "reader" not in cache:
        index = SobolevIndex.open(ctx["template"])
        eta = np.asarray(index.eta) / np.sum(index.eta)
        stored = {}
        for key in index:
            doc = index.get(key)
            stored[key] = [_subtree_masses(t, doc["nodes"], doc["masses"]) for t in index.trees]
        cache.update(reader=index, eta=eta, stored=stored)
    index, eta, stored = cache["reader"], cache["eta"], cache["stored"]
    p = math.inf if spec["p"] == "inf" else float(spec["p"])
    rng = np.random.default_rng(spec["seed"])
    query = random_measure(rng, index.graph.n_nodes)
    q = [_subtree_masses(t, *query) for t in index.trees]
    reference = {key: sum(e * _reference_sp(q[r], alpha[r], t.length, p)
                          for r, (e, t) in enumerate(zip(eta, index.trees)))
                 for key, alpha in stored.items()}
    s_inf = {key: sum(e * _reference_sp(q[r], alpha[r], t.length, math.inf)
                      for r, (e, t) in enumerate(zip(eta, index.trees)))
             for key, alpha in stored.items()}
    k = 5
    try:
        found = index.search([query], k=k, p=p)
        direct = index.distance(query, found.keys[0][0], p=p)
    except Exception as exc:
        return f"error: {type(exc).__name__}", describe(exc)
    got = np.asarray(found.distances[0], dtype=np.float64)
    want = np.array([reference[key] for key in found.keys[0]])
    tol = 1e-9 * np.maximum(np.abs(want), 1e-300) + 1e-15
    if np.any((got == 0) & (np.array([s_inf[key] for key in found.keys[0]]) > 0)):
        return "0 where S_inf > 0 (underflow)", f"p={p}: {got.tolist()}"
    if np.any(np.abs(got - want) > tol) or abs(direct - want[0]) > tol[0]:
        return "differs from the reference", f"p={p}: got {got.tolist()}, reference {want.tolist()}"
    kth = np.sort(list(reference.values()))[k - 1]
    if got[-1] > kth * (1 + 1e-9) + 1e-15:
        return "not the k nearest", f"p={p}: k-th found {got[-1]}, reference k-th {kth}"
    return "matches the reference", ""


# ---- disk full, injected in the file calls and in the catalog's statements
class FaultPlan:
    """Counts the calls that can allocate space and fails the ``fail_at``-th
    (0-based) and, the disk being full from then on, every later one."""

    def __init__(self, fail_at=None):
        self.fail_at = fail_at
        self.calls = []
        self.fault = None

    def hit(self, label):
        position = len(self.calls)
        self.calls.append(label)
        if self.fault is not None or (self.fail_at is not None and position == self.fail_at):
            if self.fault is None:
                self.fault = f"call {position} ({label})"
            return True
        return False


def _enospc(what):
    return OSError(errno.ENOSPC, "No space left on device (injected)", what)


class _FaultyRaw(io.FileIO):
    """A file whose write() may fail with ENOSPC and otherwise writes at most
    WRITE_CAP bytes (a short write, which buffered files complete)."""

    def __init__(self, file, mode, plan):
        super().__init__(file, mode)
        self._plan = plan

    def write(self, data):
        if self._plan.hit(f"write {os.path.basename(str(self.name))}"):
            raise _enospc(self.name)
        return super().write(memoryview(data).cast("B")[:WRITE_CAP])


class _OsProxy:
    """``os`` for the storage module, with fsync and rename counted (and failed)."""

    def __init__(self, real, plan):
        self._real = real
        self._plan = plan

    def __getattr__(self, name):
        return getattr(self._real, name)

    def fsync(self, fd):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = str(fd)
        kind = "directory" if os.path.isdir(target) else os.path.basename(target)
        if self._plan.hit(f"fsync {kind}"):
            raise _enospc(target)
        return self._real.fsync(fd)

    def replace(self, src, dst):
        if self._plan.hit(f"rename {os.path.basename(str(src))}"):
            raise _enospc(src)
        return self._real.replace(src, dst)

    def rename(self, src, dst):
        if self._plan.hit(f"rename {os.path.basename(str(src))}"):
            raise _enospc(src)
        return self._real.rename(src, dst)


_MISSING = object()


@contextlib.contextmanager
def file_faults(plan):
    """Inject into the storage module's own file calls: creating a file,
    each raw write, fsync, rename (the names it looks up in its globals)."""
    from sobolev_index.index import storage

    assert hasattr(storage, "os"), "storage no longer uses os: the injection must follow it"

    def faulty_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            if plan.hit(f"create {os.path.basename(str(file))}"):
                raise _enospc(file)
            if "b" in mode and "+" not in mode:
                return io.BufferedWriter(_FaultyRaw(file, mode.replace("b", ""), plan))
        return builtins.open(file, mode, *args, **kwargs)

    saved_open = storage.__dict__.get("open", _MISSING)
    saved_os = storage.os
    storage.open = faulty_open
    storage.os = _OsProxy(saved_os, plan)
    try:
        yield
    finally:
        storage.os = saved_os
        if saved_open is _MISSING:
            del storage.open
        else:
            storage.open = saved_open


class _FailingConnection:
    """The catalog's sqlite3 connection, whose writing statements may fail
    as SQLite fails on a full disk (SQLITE_FULL)."""

    WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "COMMIT")

    def __init__(self, real, plan):
        self._real = real
        self._plan = plan

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _check(self, sql):
        words = " ".join(sql.split()[:3])
        if words.upper().startswith(self.WRITES) and self._plan.hit(words):
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorcode = sqlite3.SQLITE_FULL
            exc.sqlite_errorname = "SQLITE_FULL"
            raise exc

    def execute(self, sql, params=()):
        self._check(sql)
        return self._real.execute(sql, params)

    def executemany(self, sql, rows):
        self._check(sql)
        return self._real.executemany(sql, rows)


@contextlib.contextmanager
def sql_faults(index, plan):
    catalog = index._catalog
    real = catalog.conn
    catalog.conn = _FailingConnection(real, plan)
    try:
        yield
    finally:
        catalog.conn = real


@contextlib.contextmanager
def free_space_faults(free):
    """The storage module sees a file system with ``free`` bytes free."""
    from sobolev_index.index import storage

    real = storage.shutil.disk_usage
    storage.shutil.disk_usage = lambda path: real(path)._replace(free=free)
    try:
        yield
    finally:
        storage.shutil.disk_usage = real


def _disk_operation(index, op, seed):
    rng = np.random.default_rng([seed, 77])
    n = index.graph.n_nodes
    batch = [random_measure(rng, n) for _ in range(int(rng.integers(4, 12)))]
    if op == "add":
        return index.add(batch, keys=[f"df{i}" for i in range(len(batch))])
    if op == "upsert":
        return index.upsert(batch[:3], keys=["a0", "new-u1", "b4"])
    if op == "delete":
        return index.delete(["b1", "c2"])
    if op == "compact":
        return index.compact()
    raise ValueError(op)


def trial_diskfull(spec, ctx):
    """A fault injected at one position of one operation (task "diskfull")."""
    from sobolev_index import SobolevIndex
    from sobolev_index.errors import DiskFullError

    path = copy_index(ctx["template"], os.path.join(ctx["workdir"], "ix"))
    plan = FaultPlan(spec.get("position"))
    index = SobolevIndex.open(path, "a")
    op = spec["op"]
    try:
        before = snapshot(path)
        layer = spec["layer"]
        injector = (file_faults(plan) if layer == "file" else sql_faults(index, plan)
                    if layer == "sql" else free_space_faults(1000))
        error = None
        with injector:
            try:
                _disk_operation(index, op, spec["seed"])
            except Exception as exc:
                error = exc
        if spec.get("position") is None and layer != "precheck":
            return "counted", json.dumps(plan.calls)
        if layer != "precheck" and plan.fault is None:
            return "fault not reached", f"{op}: {plan.calls}"
        where = f"{op} at {plan.fault}"
        if error is None:
            # Only a fault after the operation's commit point may pass
            # silently (clean-up that a later writer redoes); then the
            # operation must be durable.
            index.close()
            problem = _operation_durable(path, op)
            if problem:
                return "no error, but the operation is not durable", f"{where}: {problem}"
            return "fault after the commit: tolerated, durable", where
        changed = differences(before, snapshot(path))
        if not isinstance(error, DiskFullError):
            return (f"{type(error).__name__} instead of DiskFullError",
                    f"{where}: {describe(error)} at {where_raised(error)}; files changed: {changed}")
        if changed:
            return "index changed", f"{where}: {changed}"
        try:
            keys = index.add([random_measure(np.random.default_rng(5), index.graph.n_nodes)],
                             keys=["after-the-fault"])
            assert keys == ["after-the-fault"] and "after-the-fault" in index
        except Exception as exc:
            return "the handle is unusable afterwards", f"{where}: {describe(exc)}"
    finally:
        index.close()
    with SobolevIndex.open(path) as reader:
        report = reader.verify()
        if not report["ok"] or "after-the-fault" not in reader:
            return "verify not ok afterwards", f"{where}: {report['problems']}"
    return "DiskFullError, unchanged", ""


def _operation_durable(path, op):
    """None if ``op`` of _disk_operation took effect and the index verifies; else what is wrong."""
    from sobolev_index import SobolevIndex

    with SobolevIndex.open(path) as reader:
        report = reader.verify()
        if not report["ok"]:
            return f"verify: {report['problems'][:2]}"
        if op == "add" and "df0" not in reader:
            return "the added documents are missing"
        if op == "upsert" and "new-u1" not in reader:
            return "the upserted documents are missing"
        if op == "delete" and "b1" in reader:
            return "the deleted document is still there"
        if op == "compact" and (len(reader.segments) != 1 or reader.info()["deleted"]):
            return f"not compacted: {reader.segments}"
    return None


def fill_to(mount, free, filler):
    """Leave ``free`` bytes free on the file system of ``mount``."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(filler)
    stats = os.statvfs(mount)
    available = stats.f_bavail * stats.f_frsize
    size = available - free
    if size > 0:
        fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    stats = os.statvfs(mount)
    return stats.f_bavail * stats.f_frsize


def trial_real_disk(spec, ctx):
    """An operation on a real tmpfs left with ``free`` bytes (task "realdisk").

    ``fill_at``: "start" fills the disk before the operation; "after-check"
    fills it right after the package's free-space check (another process
    taking the space meanwhile), so that the segment write itself runs out;
    "commit" fills it after the segment is written, so that SQLite runs out
    while committing.
    """
    from sobolev_index import SobolevIndex
    from sobolev_index.errors import DiskFullError
    from sobolev_index.index import storage

    mount = ctx["mount"]
    path = copy_index(ctx["template"], os.path.join(mount, "ix"))
    filler = os.path.join(mount, "filler")
    index = SobolevIndex.open(path, "a")
    fill_at, free = spec["fill_at"], [None]

    def fill():
        free[0] = fill_to(mount, spec["free"], filler)

    restore = []
    if fill_at == "after-check":
        real_check = storage.check_free_space

        def check_then_fill(directory, needed):
            real_check(directory, needed)
            fill()

        storage.check_free_space = check_then_fill
        restore.append(lambda: setattr(storage, "check_free_space", real_check))
    elif fill_at == "commit":
        catalog = index._catalog
        method = "commit_segment" if spec["op"] == "add" else "replace_segments"
        real_commit = getattr(catalog, method)

        def fill_then_commit(*args, **kwargs):
            fill()
            return real_commit(*args, **kwargs)

        setattr(catalog, method, fill_then_commit)
        restore.append(lambda: delattr(catalog, method))
    try:
        before = snapshot(path, strict=False)
        if fill_at == "start":
            fill()
        error = None
        try:
            done = _disk_operation(index, spec["op"], spec["seed"])
        except Exception as exc:
            error = exc
        for undo in restore:
            undo()
        with contextlib.suppress(FileNotFoundError):
            os.remove(filler)
        where = (f"{spec['op']}, disk filled at {fill_at} to "
                 f"{'?' if free[0] is None else free[0] // 1024} KiB free")
        if fill_at != "start" and free[0] is None and error is None:
            return "the fill point was not reached", where
        if error is None:
            outcome = "succeeded, durable"
        elif isinstance(error, DiskFullError):
            message = str(error)
            phase = ("refused before writing" if "was not made" in message else
                     "at the segment write" if "while writing" in message else
                     "at the commit" if "while committing" in message else "elsewhere")
            outcome = f"DiskFullError {phase}, unchanged"
            changed = differences(before, snapshot(path, strict=False))
            if changed:
                return "index changed", f"{where}: {changed}; {describe(error)}"
        else:
            return (f"{type(error).__name__} instead of DiskFullError",
                    f"{where}: {describe(error)} at {where_raised(error)}")
        try:
            index.add([random_measure(np.random.default_rng(5), index.graph.n_nodes)],
                      keys=["after-the-fault"])
        except Exception as exc:
            return "the handle is unusable afterwards", f"{where}: {describe(exc)}"
    finally:
        for undo in restore:
            with contextlib.suppress(AttributeError):
                undo()
        with contextlib.suppress(FileNotFoundError):
            os.remove(filler)
        index.close()
    with SobolevIndex.open(path) as reader:
        report = reader.verify()
        if not report["ok"]:
            return "verify not ok afterwards", f"{where}: {report['problems']}"
        if error is None and spec["op"] == "add" and not all(key in reader for key in done):
            return "acknowledged documents lost", where
    return outcome, where


# ---- SQL with a time limit
SQL_QUERIES = {
    "5-way cross join (count)":
        "SELECT count(*) FROM documents a, documents b, documents c, documents d, documents e",
    "3-way cross join (rows streamed)": "SELECT a.key, b.key FROM documents a, documents b, documents c",
    "sobolev_distance over a cross join":
        "SELECT sum(sobolev_distance(a.key, b.key, 2)) FROM documents a, documents b, documents c",
    "sobolev_knn (k = 1000, p = inf) per row":
        "SELECT count(sobolev_knn(a.key, 1000, 'inf')) FROM documents a, documents b",
}
SQL_SLACK = 0.5  # seconds a stopped query may run past its limit


def trial_sql(spec, ctx):
    from sobolev_index import SobolevIndex, SobolevIndexError
    from sobolev_index.index.sql import iter_query

    cache = ctx["cache"]
    if "reader" not in cache:
        cache["reader"] = SobolevIndex.open(ctx["template"])
    index = cache["reader"]
    limit = spec["timeout"]
    started = time.monotonic()
    try:
        _, rows = iter_query(index, SQL_QUERIES[spec["query"]], timeout=limit)
        for _ in rows:
            pass
        error = None
    except Exception as exc:
        error = exc
    elapsed = time.monotonic() - started
    what = f"{spec['query']}, limit {limit:g} s: stopped after {elapsed:.2f} s"
    if error is None:
        return "finished (the limit was not tested)", what
    if not isinstance(error, SobolevIndexError) or "longer than" not in str(error):
        return f"wrong error: {type(error).__name__}", f"{what}: {describe(error)}"
    if elapsed > limit + SQL_SLACK:
        return "stopped late", what
    return "one clear error in time", what


TRIAL_TASKS = {
    "damage": trial_damage,
    "arrays": trial_arrays,
    "catalog-edit": trial_catalog_edit,
    "foreign": trial_foreign,
    "bad-api": trial_bad_api,
    "large-p": trial_large_p,
    "diskfull": trial_diskfull,
    "realdisk": trial_real_disk,
    "sql": trial_sql,
}


# ============================================================== kinds
def kind_sigkill(run):
    """SIGKILL of a writer child during add(), during compact() and between calls."""
    from sobolev_index import SobolevIndex

    expected = ("every acknowledged batch present with bit-identical features and measures; "
                "no partial or unknown batch; opens without repair; verify ok after "
                "verify(repair=True)")
    how = ("a child adds deterministic batches (1-24 documents) and compacts every 3rd batch; "
           "SIGKILL {when}; then the parent checks the index")
    rows = {
        "add": run.row("sigkill-add", "sigkill", "Writer killed (SIGKILL) during add()",
                       how.format(when="a random time (0 to the observed add time) after an add "
                                       "begins"), expected, ["intact"]),
        "compact": run.row("sigkill-compact", "sigkill", "Writer killed (SIGKILL) during compact()",
                           how.format(when="a random time (0 to the observed compact time) after a "
                                           "compact begins"), expected, ["intact"]),
        "between": run.row("sigkill-between", "sigkill",
                           "Writer killed (SIGKILL) between calls",
                           how.format(when="at a random time (0-0.4 s); the kill landed outside "
                                           "add and compact"), expected, ["intact"]),
    }
    started = time.monotonic()
    want_add = max(2, 3 * run.trials)
    want_compact = max(1, 2 * run.trials)
    budget = 25 if run.quick else 240
    max_size, every = 24, 3
    path = os.path.join(run.dir("sigkill"), "ix")
    graph = make_graph(80, run.seed)
    SobolevIndex.create(path, graph, roots=2, seed=run.seed).close()
    query = random_measure(np.random.default_rng(99), 80)
    acked, started_batches = set(), set()
    durations = {"add": [], "compact": []}
    next_batch, kills = 0, 0
    stats = Counter()
    while ((rows["add"].trials < want_add or rows["compact"].trials < want_compact)
           and time.monotonic() - started < budget):
        child = LineChild(run, "crash-writer", path, next_batch, every, max_size)
        ready = child.wait_for("READY", 60)
        if ready is None:
            rows["between"].add("writer did not start", child.kill()[-500:])
            break
        want = ("compact" if rows["compact"].trials < want_compact
                and (kills % 2 or rows["add"].trials >= want_add) else "add")
        if kills % 6 == 5:
            time.sleep(run.rng.uniform(0, 0.4))
        elif want == "add":
            child.wait_for("START ", 30, after=ready + 1 + run.rng.randrange(3))
            typical = statistics.median(durations["add"]) if durations["add"] else 0.01
            time.sleep(run.rng.uniform(0, typical))
        else:
            child.wait_for("COMPACT ", 30, after=ready)
            typical = statistics.median(durations["compact"]) if durations["compact"] else 0.03
            time.sleep(run.rng.uniform(0, typical))
        err = child.kill()
        kills += 1
        lines = child.lines
        for (t0, a), (t1, b) in zip(lines, lines[1:]):
            if a.startswith("START ") and b.startswith("ACK "):
                durations["add"].append(t1 - t0)
            elif a.startswith("COMPACT ") and b.startswith("COMPACTED "):
                durations["compact"].append(t1 - t0)
        texts = child.text()
        last = texts[-1] if texts else ""
        landed = ("add" if last.startswith("START ") else
                  "compact" if last.startswith("COMPACT ") else "between")
        for line in texts:
            word, _, number = line.partition(" ")
            if word == "START":
                started_batches.add(int(number))
            elif word == "ACK":
                acked.add(int(number))
        if "Traceback" in err:
            rows[landed].add("writer failed before the kill", err[-500:])
            next_batch = max(started_batches, default=-1) + 1
            continue
        outcome, detail, counts = _check_after_kill(path, acked, started_batches, max_size, query)
        stats.update(counts)
        rows[landed].add(outcome, f"kill {kills} (last line {last!r}): {detail}")
        next_batch = max(started_batches, default=-1) + 1
        if kills % 10 == 0:
            run.log(f"    sigkill: {kills} kills, {len(acked)} batches acknowledged")
    rows["add"].notes.append(
        f"{kills} kills in all ({', '.join(f'{r.trials} {k}' for k, r in rows.items())}); "
        f"{stats['acked_docs']:,} acknowledged documents checked after them, "
        f"{stats['lost_docs']} lost; {stats['repaired']} kills left files that verify reported "
        "before the repair")
    if rows["compact"].trials == 0:
        rows["compact"].add("no kill landed in compact()", "the trial lost its point")
    if rows["add"].trials == 0:
        rows["add"].add("no kill landed in add()", "the trial lost its point")
    if rows["between"].trials == 0:
        rows["between"].skipped = "no random-time kill happened to land between calls in this run"
    finish_rows(run, rows.values(), started)


def _check_after_kill(path, acked, started, max_size, query):
    """The index after a kill: (outcome, detail, counts)."""
    from sobolev_index import SobolevIndex

    counts = Counter()
    try:
        reader = SobolevIndex.open(path, "r")  # no repair before this open
    except Exception as exc:
        return "open failed", describe(exc), counts
    with reader:
        keys = list(reader)
        batches = {}
        for key in keys:
            if not (key.startswith("b") and len(key) == 11):
                return "unknown document visible", key, counts
            batches.setdefault(int(key[1:7]), set()).add(key)
        top = max(started, default=-1)
        for b, present in batches.items():
            if b > top:
                return "unknown batch visible", f"batch {b}", counts
            if present != set(batch_keys(b, max_size)):
                return "partial batch visible", f"batch {b}: {len(present)} documents", counts
        lost = sorted(b for b in acked if b not in batches)
        counts["acked_docs"] += sum(batch_size(b, max_size) for b in acked)
        counts["lost_docs"] += sum(batch_size(b, max_size) for b in lost)
        if lost:
            return "acknowledged batch lost", f"batches {lost[:10]}", counts
        n_nodes = reader.graph.n_nodes
        all_keys, all_measures = [], []
        for b in sorted(batches):
            all_keys += batch_keys(b, max_size)
            all_measures += batch_measures(b, n_nodes, max_size)
        if all_keys:
            for r, tree in enumerate(reader.trees):
                stored, fresh = reader.features(all_keys, root=r), tree.features_of(all_measures)
                if not (np.array_equal(stored.indptr, fresh.indptr)
                        and np.array_equal(stored.indices, fresh.indices)
                        and np.array_equal(stored.data, fresh.data)):
                    return "stored features differ", f"root {r}", counts
            for i in range(0, len(all_keys), max(1, len(all_keys) // 20)):
                doc = reader.get(all_keys[i])
                nodes, masses = all_measures[i]
                if not (np.array_equal(doc["nodes"], nodes)
                        and np.allclose(doc["masses"], masses / masses.sum(), rtol=1e-12, atol=0)):
                    return "stored measure differs", all_keys[i], counts
            reader.search([query], k=min(5, len(all_keys)), p=1)
        report = reader.verify()
    if not report["ok"]:
        counts["repaired"] += 1
    try:
        with SobolevIndex.open(path, "a") as writer:
            writer.verify(repair=True)
            after = writer.verify()
            if not after["ok"]:
                return "verify not ok after repair", "; ".join(after["problems"])[:300], counts
            if set(writer) != set(keys):
                return "repair changed the documents", "", counts
    except Exception as exc:
        return "writer failed after the kill", describe(exc), counts
    return "intact", "", counts


def kind_diskfull(run):
    """Disk full injected at every file call of a segment write and every catalog statement."""
    expected = ("one DiskFullError; index unchanged (sha256 of every file, SQL dump of the "
                "catalog); no temporary file left; the same handle then adds; verify ok (a "
                "fault after the commit point may pass if the operation is durable)")
    ok = ["DiskFullError, unchanged", "fault after the commit: tolerated, durable"]
    rows = {
        ("file", "add"): run.row("diskfull-segment-add", "diskfull", "Disk full while add() writes "
                                 "its segment", "ENOSPC from the storage module's file calls, at "
                                 "each position in turn: {positions}", expected, ok),
        ("file", "compact"): run.row("diskfull-segment-compact", "diskfull",
                                     "Disk full while compact() writes the merged segment",
                                     "as above, for compact(): {positions}", expected, ok),
        ("sql", "all"): run.row("diskfull-catalog", "diskfull", "Disk full at the catalog commit",
                                "SQLITE_FULL from each writing statement of the transaction of "
                                "add, upsert, delete and compact, in turn: {positions}", expected, ok),
        ("precheck", "all"): run.row("diskfull-precheck", "diskfull",
                                     "Too little free space before a write",
                                     "the file system reports 1,000 bytes free; add and compact",
                                     expected.replace("one DiskFullError", "one DiskFullError "
                                                      "before anything is written"), ok),
    }
    started = time.monotonic()
    template = run.template("small")
    ctx = {"template": template}
    # Find the positions first: one run of each operation, counting calls.
    count_specs = [{"row": "count", "layer": layer, "op": op, "seed": run.seed, "position": None}
                   for layer, ops in (("file", ("add", "compact")),
                                      ("sql", ("add", "upsert", "delete", "compact")))
                   for op in ops]
    specs = []
    positions = {}
    results = TrialRunner(run)("diskfull", count_specs, ctx)
    for spec, result in zip(count_specs, results):
        key = (spec["layer"], spec["op"] if spec["layer"] == "file" else "all")
        if result["outcome"] != "counted":
            rows[key].add("could not count the calls", f"{result['outcome']}: {result['detail']}")
            continue
        calls = json.loads(result["detail"])
        listed = ", ".join(_runs(calls))
        positions.setdefault(key, []).append(f"{spec['op']}: {listed}" if spec["layer"] == "sql"
                                             else listed)
        if not calls:
            rows[key].add("no call to inject into", spec["op"])
        chosen = run.subset(range(len(calls)), 3)
        specs += [{"row": rows[key].id, "layer": spec["layer"], "op": spec["op"],
                   "seed": run.seed, "position": i} for i in chosen]
    specs += [{"row": "diskfull-precheck", "layer": "precheck", "op": op, "seed": run.seed}
              for op in ("add", "compact")]
    for key, row in rows.items():
        row.injection = row.injection.format(positions="; ".join(positions.get(key, [])) or "-")
    run_task(run, "diskfull", specs, list(rows.values()), ctx)
    finish_rows(run, rows.values(), started)


def _runs(labels):
    """['write a', 'write a', 'fsync'] -> ['write a x2', 'fsync']."""
    out = []
    for label in labels:
        if out and out[-1][0] == label:
            out[-1][1] += 1
        else:
            out.append([label, 1])
    return [f"{label} x{n}" if n > 1 else label for label, n in out]


def kind_diskfull_real(run):
    """A real full disk: a small tmpfs filled to each amount of free space."""
    from sobolev_index import SobolevIndex

    row = run.row("diskfull-real", "diskfull-real", "Real full disk (tmpfs)",
                  "a 32 MB tmpfs; a file made with fallocate() leaves N bytes free (N in 4 KiB "
                  "steps) before add or compact ('start'), right after the package's free-space "
                  "check ('after-check': another process takes the space), or just before the "
                  "catalog commit ('commit'): {levels}",
                  "one DiskFullError and the index unchanged (files and catalog content), or "
                  "success and durable; the handle then adds; verify ok",
                  ["DiskFullError refused before writing, unchanged",
                   "DiskFullError at the segment write, unchanged",
                   "DiskFullError at the commit, unchanged", "succeeded, durable"])
    started = time.monotonic()
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
        row.skipped = "needs root on Linux to mount a tmpfs; this run was not root"
        row.injection = row.injection.format(levels="0 to ~300 KiB")
        finish_rows(run, [row], started)
        return
    mount = run.dir("tmpfs")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32M", "tmpfs", mount],
                          capture_output=True, text=True)
    if done.returncode != 0:
        row.skipped = f"mounting a tmpfs failed: {done.stderr.strip()}"
        row.injection = row.injection.format(levels="0 to ~300 KiB")
        finish_rows(run, [row], started)
        return
    try:
        template = run.template("small")
        # How much each operation writes: measured on the tmpfs itself.
        segment_need, log_need = {}, {}
        for op in ("add", "compact"):
            path = copy_index(template, os.path.join(mount, "probe"))
            old = set(segment_files(path))
            with SobolevIndex.open(path, "a") as index:
                _disk_operation(index, op, run.seed)
                segment_need[op] = sum(os.path.getsize(os.path.join(path, "segments", name))
                                       for name in set(segment_files(path)) - old)
                log_need[op] = os.path.getsize(os.path.join(path, "catalog.sqlite-wal"))
            shutil.rmtree(path)
        specs, ranges = [], []
        for op in ("add", "compact"):
            for fill_at, top in (("start", 2 * segment_need[op] + log_need[op] + (64 << 10)),
                                 ("after-check", segment_need[op] + (16 << 10)),
                                 ("commit", log_need[op] + (32 << 10))):
                levels = list(range(0, top + 1, 4096))
                ranges.append(f"{op} filled at {fill_at}: 0-{top // 1024} KiB")
                for free in run.subset(levels, 2):
                    specs.append({"row": row.id, "op": op, "fill_at": fill_at, "free": free,
                                  "seed": run.seed})
        row.injection = row.injection.format(levels="; ".join(ranges))
        row.notes.append("bytes the operation writes: " + ", ".join(
            f"{op}: segment {segment_need[op] // 1024} KiB, catalog log {log_need[op] // 1024} KiB"
            for op in segment_need))
        run_task(run, "realdisk", specs, [row], {"template": template, "mount": mount})
    finally:
        subprocess.run(["umount", "-l", mount], capture_output=True)
    finish_rows(run, [row], started)


def kind_bad_api(run):
    """Bad measures, keys, labels, fields and arguments through the Python API."""
    expected = ("one error of the documented class ({classes}) raised by the package's own "
                "checks, before any file is written; index byte-identical")
    ok = ["one clear error, unchanged"]
    rows = {
        "bad-measures-api": run.row(
            "bad-measures-api", "bad-api", "Bad measures (API)",
            "a random batch of good measures with one bad one at a random position, given to "
            "add, add with generated keys, upsert, search and distance; {cases}",
            expected.format(classes="InvalidMeasureError; TypeError for a wrong type"), ok),
        "bad-keys-api": run.row(
            "bad-keys-api", "bad-api", "Bad keys, labels and fields (API)",
            "add and upsert with: {cases}",
            expected.format(classes="DuplicateKeyError, ValueError or TypeError"), ok),
        "bad-args-api": run.row(
            "bad-args-api", "bad-api", "Bad search and call arguments (API)",
            "search, distance, gram, get, delete, features, verify, open and SQL with: {cases}",
            expected.format(classes="ValueError, TypeError, KeyNotFoundError, SobolevIndexError"), ok),
    }
    started = time.monotonic()
    repeats = max(1, run.trials // 10)
    specs = []
    n = 60
    item_cases = run.subset(_bad_measure_items(n), 6)
    whole_cases = run.subset(_bad_measure_batches(n), 2)
    for case in item_cases:
        for entry in ("add", "add (generated keys)", "upsert", "search", "distance"):
            if entry == "distance" and case == "not a pair (a str)":
                continue  # distance() takes a str as a stored key, by design
            for _ in range(repeats):
                specs.append({"row": "bad-measures-api", "case": case, "entry": entry, "whole": False,
                              "seed": run.rng.randrange(2**31)})
    for case in whole_cases:
        for entry in ("add", "search"):
            specs.append({"row": "bad-measures-api", "case": case, "entry": entry, "whole": True,
                          "seed": run.rng.randrange(2**31)})
    key_cases = run.subset(_bad_key_cases(), 5)
    for case in key_cases:
        for entry in _bad_key_cases()[case][0]:
            specs.append({"row": "bad-keys-api", "case": case, "entry": entry,
                          "seed": run.rng.randrange(2**31)})
    arg_cases = run.subset(_bad_arg_cases(), 6)
    for case in arg_cases:
        specs.append({"row": "bad-args-api", "case": case, "entry": "call",
                      "seed": run.rng.randrange(2**31)})
    rows["bad-measures-api"].injection = rows["bad-measures-api"].injection.format(
        cases="; ".join(item_cases + whole_cases))
    rows["bad-keys-api"].injection = rows["bad-keys-api"].injection.format(cases="; ".join(key_cases))
    rows["bad-args-api"].injection = rows["bad-args-api"].injection.format(cases="; ".join(arg_cases))
    run_task(run, "bad-api", specs, list(rows.values()), {"template": run.template("small")})
    finish_rows(run, rows.values(), started)


def kind_large_p(run):
    """Search and distance for large finite p against an independent S_p."""
    row = run.row("large-p", "large-p", "Large finite p (S_p near S_inf)",
                  "search and distance with p = {ps} for random queries, against S_p computed "
                  "here from the parent pointers, relative to the largest difference",
                  "every distance within 1e-9 (relative) of the reference, never 0 where "
                  "S_inf > 0, and the k nearest; p = 1e308 gives S_inf",
                  ["matches the reference"])
    started = time.monotonic()
    ps = [17, 1e308, "inf"] if run.quick else [1, 2, 16.5, 17, 100, 500, 1e6, 1e100, 1e308, "inf"]
    queries = max(1, run.trials // 4)
    specs = [{"row": row.id, "p": p, "seed": run.rng.randrange(2**31)}
             for p in ps for _ in range(queries)]
    row.injection = row.injection.format(ps=", ".join(map(str, ps)))
    run_task(run, "large-p", specs, [row], {"template": run.template("small")})
    finish_rows(run, [row], started)


# ---- the command line
def _points_lines(rng, count, prefix="c"):
    return [json.dumps({"key": f"{prefix}{i}", "points": rng.normal(size=(int(rng.integers(2, 6)), 2))
                        .round(6).tolist(), "label": "ab"[i % 2]}) for i in range(count)]


def _text_corpus(rng):
    words = [f"{t}{i}" for t in ("space", "food", "music") for i in range(10)] + ["the", "a", "of"]
    lines = []
    for i in range(40):
        topic = ("space", "food", "music")[i % 3]
        picked = [f"{topic}{j}" for j in rng.integers(0, 10, 6)] + ["the"]
        lines.append(json.dumps({"key": f"t{i}", "text": " ".join(picked), "label": topic}))
    vectors = [f"{len(words)} 4"]
    for w in words:
        centre = {"s": 0, "f": 1, "m": 2}.get(w[0], 3)
        v = rng.normal(scale=0.3, size=4)
        v[centre] += 5
        vectors.append(w + " " + " ".join(f"{x:.5f}" for x in v))
    return "\n".join(lines) + "\n", "\n".join(vectors) + "\n"


GOOD_POINT = '{"key": "good-1", "points": [[0.1, 0.2], [0.3, -0.1]]}'
GOOD_TEXT = '{"key": "good-1", "text": "space1 space2 the"}'

CLI_POINT_LINES = {
    "NaN coordinate": '{"key": "bad", "points": [[0.1, NaN]]}',
    "Infinity coordinate": '{"key": "bad", "points": [[0.1, Infinity]]}',
    "coordinate 1e308 (its square overflows)": '{"key": "bad", "points": [{FAR}]}',
    "coordinate as text": '{"key": "bad", "points": [[0.1, "a"]]}',
    "negative weight": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1, -1]}',
    "NaN weight": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1, NaN]}',
    "Infinity weight": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1, Infinity]}',
    "weights whose total overflows":
        '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1e308, 1e308]}',
    "subnormal weights (1e-320)":
        '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1e-320, 1e-320]}',
    "weights totalling 6e-301": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [3e-301, 3e-301]}',
    "weights all zero": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [0, 0]}',
    "fewer weights than points": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1]}',
    "no points": '{"key": "bad", "points": []}',
    "points of the wrong dimension": '{"key": "bad", "points": [[0.1, 0.2, 0.3]]}',
    "ragged points": '{"key": "bad", "points": [[0.1, 0.2], [0.3]]}',
    "no key": '{"points": [[0.1, 0.2]]}',
    "a key that is a fraction": '{"key": 1.5, "points": [[0.1, 0.2]]}',
    "an empty key": '{"key": "", "points": [[0.1, 0.2]]}',
    "a key repeated in the file": '{"key": "good-1", "points": [[0.1, 0.2]]}',
    "a key already in the index": '{"key": "c1", "points": [[0.1, 0.2]]}',
    "a label that is an object": '{"key": "bad", "points": [[0.1, 0.2]], "label": {"a": 1}}',
    "NaN in an extra field": '{"key": "bad", "points": [[0.1, 0.2]], "extra": NaN}',
    "a line that is not JSON": '{"key": "bad", "points": [[0.1, 0.2]',
    "a JSON array instead of an object": '[1, 2, 3]',
    "bytes that are not UTF-8": b'{"key": "bad\xff", "points": [[0.1, 0.2]]}',
}
CLI_TEXT_LINES = {
    "NaN in a field": '{"key": "bad", "text": "space1 food2", "x": NaN}',
    "-Infinity in a field": '{"key": "bad", "text": "space1 food2", "x": [1, -Infinity]}',
    "no known word": '{"key": "bad", "text": "zzzz qqqq"}',
    "text that is a number": '{"key": "bad", "text": 123}',
    "no text": '{"key": "bad"}',
    "a key that is a list": '{"key": [1], "text": "space1"}',
    "a key repeated in the file": '{"key": "good-1", "text": "space1"}',
    "a key already in the index": '{"key": "t1", "text": "space1"}',
    "a label that is an object": '{"key": "bad", "text": "space1", "label": {"a": 1}}',
    "a line that is not JSON": '{"key": "bad", "text": "space1"',
    "bytes that are not UTF-8": b'{"key": "bad", "text": "space1 \xff\xfe"}',
}
CLI_QUERY_LINES = ["NaN coordinate", "subnormal weights (1e-320)", "no points",
                   "a line that is not JSON", "coordinate 1e308 (its square overflows)"]
CLI_OPTIONS = {
    "search -k 0": ["search", "{INDEX}", "--key", "c1", "-k", "0"],
    "search -k -1": ["search", "{INDEX}", "--key", "c1", "-k", "-1"],
    "search -k 2.5": ["search", "{INDEX}", "--key", "c1", "-k", "2.5"],
    "search -k 10**30": ["search", "{INDEX}", "--key", "c1", "-k", str(10**30)],
    "search -p 0.5": ["search", "{INDEX}", "--key", "c1", "-p", "0.5"],
    "search -p 0": ["search", "{INDEX}", "--key", "c1", "-p", "0"],
    "search -p -1": ["search", "{INDEX}", "--key", "c1", "-p", "-1"],
    "search -p nan": ["search", "{INDEX}", "--key", "c1", "-p", "nan"],
    "search -p abc": ["search", "{INDEX}", "--key", "c1", "-p", "abc"],
    "search --roots 5": ["search", "{INDEX}", "--key", "c1", "--roots", "5"],
    "search --roots 0,0": ["search", "{INDEX}", "--key", "c1", "--roots", "0,0"],
    "search --roots x": ["search", "{INDEX}", "--key", "c1", "--roots", "x"],
    "search --key of an unknown key": ["search", "{INDEX}", "--key", "nope"],
    "get of an unknown key": ["get", "{INDEX}", "nope"],
    "delete of an unknown key": ["delete", "{INDEX}", "c1", "nope"],
    "distance to an unknown key": ["distance", "{INDEX}", "c1", "nope"],
    "distance -p 0": ["distance", "{INDEX}", "c1", "c2", "-p", "0"],
    "gram to a .txt file": ["gram", "{INDEX}", "{TMP}/m.txt", "--keys", "c1", "--keys", "c2"],
    "gram --kernel nan": ["gram", "{INDEX}", "{TMP}/m.npy", "--keys", "c1", "--keys", "c2",
                          "--kernel", "nan"],
    "gram of an unknown key": ["gram", "{INDEX}", "{TMP}/m.npy", "--keys", "c1", "--keys", "nope"],
    "sql DELETE": ["sql", "{INDEX}", "DELETE FROM documents"],
    "sql ATTACH": ["sql", "{INDEX}", "ATTACH DATABASE '{TMP}/x.db' AS x"],
    "sql PRAGMA writable_schema": ["sql", "{INDEX}", "PRAGMA writable_schema = 1"],
    "sql of an unknown table": ["sql", "{INDEX}", "SELECT * FROM nope"],
    "sql sobolev_knn with k 0": ["sql", "{INDEX}", "SELECT sobolev_knn('c1', 0)"],
    "sql sobolev_distance with p 'abc'": ["sql", "{INDEX}", "SELECT sobolev_distance('c1', 'c2', 'abc')"],
    "sql --timeout -1": ["sql", "{INDEX}", "SELECT 1", "--timeout", "-1"],
    "build into an existing index": ["build", "{INDEX}", "--points", "{TMP}/clouds.jsonl", "--nodes", "5"],
    "add of a missing file": ["add", "{INDEX}", "{TMP}/missing.jsonl"],
    "verify of a file that is not an index": ["verify", "{TMP}/clouds.jsonl"],
}


def _far_point(index_path):
    """A point at +-1e308 in each coordinate whose nearest node is not node 0
    (so that an overflow, which makes every distance inf or NaN and so picks
    node 0, shows), that nearest node, computed exactly with fractions, and
    its coordinates."""
    from fractions import Fraction

    from sobolev_index import SobolevIndex

    with SobolevIndex.open(index_path) as index:
        coords = np.asarray(index.graph.coords, dtype=np.float64)
    exact = [[Fraction(float(x)) for x in row] for row in coords]
    for signs in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
        point = [Fraction(sign * 1e308) for sign in signs]
        squared = [sum((x - y) ** 2 for x, y in zip(row, point)) for row in exact]
        nearest = min(range(len(squared)), key=squared.__getitem__)
        if nearest != 0:
            return [sign * 1e308 for sign in signs], nearest, coords[nearest].tolist()
    return [1e308, 1e308], 0, coords[0].tolist()


def _overflow_accepted(name, index, far, args, cwd):
    """Whether an accepted point at 1e308 was treated right: stored on its
    nearest node (add), or searched as that node (search)."""
    from sobolev_index import SobolevIndex

    point, nearest, node_coords = far
    if name.startswith("add"):
        with SobolevIndex.open(index) as opened:
            if "bad" not in opened:
                return False, "accepted, yet the document is not in the index"
            node = int(opened.get("bad")["nodes"][0])
        return node == nearest, f"the point {point} went to node {node}; its nearest node is {nearest}"
    # search: the same query with the point moved onto its nearest node must give the same answer
    reference = os.path.join(cwd, "reference.jsonl")
    with open(reference, "w") as handle:
        handle.write(GOOD_POINT + "\n" + json.dumps({"key": "bad", "points": [node_coords]}) + "\n")
    file_at = args.index("--file") + 1
    got = run_cli(args + ["--json"], cwd)[1]
    want = run_cli(args[:file_at] + [reference] + args[file_at + 1:] + ["--json"], cwd)[1]
    return got == want, (f"the query at {point} was answered "
                         f"{'like' if got == want else 'unlike'} a query on its nearest node {nearest}")


def kind_bad_cli(run):
    """Bad documents, point sets, options, keys and SQL through the command line."""
    expected = ("exit status 1 (2 for a usage error), one 'Error:' line, no traceback; index "
                "byte-identical")
    ok = ["one clear error, unchanged"]
    rows = {
        "bad-input-cli": run.row(
            "bad-input-cli", "bad-cli", "Bad documents and point sets (CLI)",
            "`add --batch-size 1` of a file whose first line is good and second line bad, on a "
            "point-cloud and a text index, and `search --file` of bad queries: {cases}",
            expected + "; the good line is not added either (a coordinate whose square overflows "
            "may instead be accepted if the point goes to its nearest node)",
            ok + ["accepted, nearest node"]),
        "bad-options-cli": run.row(
            "bad-options-cli", "bad-cli", "Bad options, keys and SQL (CLI)",
            "{cases}", expected, ok),
    }
    started = time.monotonic()
    base = run.dir("cli")
    rng = np.random.default_rng(run.seed)
    with open(os.path.join(base, "clouds.jsonl"), "w") as handle:
        handle.write("\n".join(_points_lines(rng, 30)) + "\n")
    corpus, vectors = _text_corpus(rng)
    with open(os.path.join(base, "corpus.jsonl"), "w") as handle:
        handle.write(corpus)
    with open(os.path.join(base, "vectors.vec"), "w") as handle:
        handle.write(vectors)
    templates = {"points": os.path.join(base, "points-index"), "text": os.path.join(base, "text-index")}
    for argv in (["build", templates["points"], "--points", "clouds.jsonl", "--nodes", "12", "--roots",
                  "2", "--silent"],
                 ["build", templates["text"], "--corpus", "corpus.jsonl", "--vectors", "vectors.vec",
                  "--nodes", "8", "--roots", "2", "--silent"]):
        status, out, err, _ = run_cli(argv, cwd=base)
        if status != 0:
            raise RuntimeError(f"building a CLI template failed: {err}")
    far = _far_point(templates["points"])
    cases = []
    point_names = run.subset(CLI_POINT_LINES, 2)
    text_names = run.subset(CLI_TEXT_LINES, 1)
    query_names = run.subset(CLI_QUERY_LINES, 1)
    option_names = run.subset(CLI_OPTIONS, 2)
    for name in point_names:
        cases.append(("bad-input-cli", f"add (points): {name}", "points",
                      ["add", "{INDEX}", "{FILE}", "--batch-size", "1", "--silent"],
                      [GOOD_POINT, CLI_POINT_LINES[name]]))
    for name in text_names:
        cases.append(("bad-input-cli", f"add (text): {name}", "text",
                      ["add", "{INDEX}", "{FILE}", "--batch-size", "1", "--vectors", "none", "--silent"],
                      [GOOD_TEXT, CLI_TEXT_LINES[name]]))
    for name in query_names:
        cases.append(("bad-input-cli", f"search --file: {name}", "points",
                      ["search", "{INDEX}", "--file", "{FILE}"], [GOOD_POINT, CLI_POINT_LINES[name]]))
    for name in option_names:
        cases.append(("bad-options-cli", name, "points", CLI_OPTIONS[name], None))
    rows["bad-input-cli"].injection = rows["bad-input-cli"].injection.format(
        cases="; ".join(name for row_id, name, *rest in cases if row_id == "bad-input-cli"))
    rows["bad-options-cli"].injection = rows["bad-options-cli"].injection.format(
        cases="; ".join(f"`{' '.join(a for a in CLI_OPTIONS[n] if a != '{INDEX}')}`"
                        for n in option_names))
    local = threading.local()
    lock = threading.Lock()

    def work(case):
        row_id, name, kind, argv, lines = case
        if not hasattr(local, "dir"):
            with lock:
                local.dir = tempfile.mkdtemp(prefix="w", dir=base)
                local.fresh = {}
        index = os.path.join(local.dir, kind)
        if not local.fresh.get(kind):
            copy_index(templates[kind], index)
            local.fresh[kind] = True
        file_path = os.path.join(local.dir, "input.jsonl")
        if lines is not None:
            with open(file_path, "wb") as handle:
                for line in lines:
                    if isinstance(line, str):
                        line = line.replace("{FAR}", json.dumps(far[0])).encode()
                    handle.write(line)
                    handle.write(b"\n")
        args = [a.replace("{INDEX}", index).replace("{FILE}", file_path).replace("{TMP}", base)
                for a in argv]
        before = snapshot(index)
        status, out, err, seconds = run_cli(args, cwd=local.dir)
        changed = differences(before, snapshot(index))
        if changed:
            local.fresh[kind] = False
        errors = cli_error_lines(err)
        shown = " ".join(err.split())[:300]
        if "Traceback" in err:
            return row_id, "traceback", f"{name}: {err[-600:]}"
        if status == 0:
            if "1e308" in name:
                fine, detail = _overflow_accepted(name, index, far, args, local.dir)
                return row_id, ("accepted, nearest node" if fine else "accepted, wrong node"), \
                    f"{name}: {detail}; stderr: {shown}"
            return row_id, "accepted", f"{name}: exit 0; stdout {out[:120]!r}"
        if status not in (1, 2):
            return row_id, f"exit status {status}", f"{name}: {shown}"
        if len(errors) != 1:
            return row_id, "not one 'Error:' line", f"{name}: {shown}"
        if changed:
            return row_id, "index changed", f"{name}: {changed}; {shown}"
        return row_id, "one clear error, unchanged", f"{name}: {errors[0][:200]}"

    done = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for row_id, outcome, detail in pool.map(work, cases):
            rows[row_id].add(outcome, detail)
            done += 1
            if done % 10 == 0:
                run.log(f"    cli: {done}/{len(cases)}")
    finish_rows(run, rows.values(), started)


def kind_damage(run):
    """Byte flips (segment, graph, catalog, a stored file name), truncated and missing files."""
    template = run.template("small")
    segments = committed_files(template)
    sizes = {rel: os.path.getsize(os.path.join(template, rel))
             for rel in [f"segments/{s}" for s in segments] + ["graph.h5", "catalog.sqlite"]}
    detected = ["detected at open", "detected by verify"]
    never = ("never verify ok while damaged, no other exception than CorruptIndexError, and a "
             "writer's open and verify(repair=True) never delete a committed segment")
    rows = {
        "flip-segment": run.row("flip-segment", "byteflip", "One byte flipped in a segment file",
                                "a random byte of a random segment XORed with a random value 1-255; "
                                "open, search p=1 and p=inf, get, verify, then a writer's "
                                "verify(repair=True)", "reported at open or by verify (checksum); " +
                                never, detected),
        "flip-graph": run.row("flip-graph", "byteflip", "One byte flipped in graph.h5",
                              "as above, in graph.h5", "reported at open or by verify (checksum); " +
                              never, detected),
        "flip-catalog": run.row("flip-catalog", "byteflip", "One byte flipped in catalog.sqlite",
                                "as above, in catalog.sqlite (checkpointed, no log)",
                                "reported at open or by verify, or provably harmless (the SQL dump "
                                "of the catalog is unchanged); " + never,
                                detected + ["harmless (catalog content unchanged)"]),
        "flip-catalog-name": run.row("flip-catalog-name", "byteflip",
                                     "A segment's file name changed by one byte in catalog.sqlite",
                                     "one digit of a stored segment file name replaced by another "
                                     "digit, in the raw catalog file", "reported at open or by "
                                     "verify, or harmless (a stale copy of the name); " + never,
                                     detected + ["harmless (catalog content unchanged)"]),
        "truncate": run.row("truncate", "truncate", "Truncated file",
                            "a segment, graph.h5 or catalog.sqlite cut to a random length",
                            "reported at open or by verify, or harmless for the catalog; " + never,
                            detected + ["harmless (catalog content unchanged)"]),
        "missing-file": run.row("missing-file", "missing", "Missing file",
                                "a segment, graph.h5 or catalog.sqlite deleted; opened as reader "
                                "and as writer", "CorruptIndexError (NotAnIndexError for the "
                                "catalog) naming the file, for reader and writer; nothing changed",
                                ["refused at open, unchanged"]),
    }
    started = time.monotonic()
    n = run.trials
    specs = []
    for _ in range(8 * n):
        target = f"segments/{run.rng.choice(segments)}"
        specs.append({"row": "flip-segment", "kind": "flip", "target": target,
                      "offset": run.rng.randrange(sizes[target]), "xor": run.rng.randrange(1, 256)})
    for _ in range(4 * n):
        specs.append({"row": "flip-graph", "kind": "flip", "target": "graph.h5",
                      "offset": run.rng.randrange(sizes["graph.h5"]), "xor": run.rng.randrange(1, 256)})
    for _ in range(15 * n):
        specs.append({"row": "flip-catalog", "kind": "flip", "target": "catalog.sqlite",
                      "offset": run.rng.randrange(sizes["catalog.sqlite"]),
                      "xor": run.rng.randrange(1, 256)})
    with open(os.path.join(template, "catalog.sqlite"), "rb") as handle:
        raw = handle.read()
    name_digits = [at + i for s in segments for at in _find_all(raw, s.encode()) for i in range(6)]
    for _ in range(2 * n):
        at = run.rng.choice(name_digits)
        digit = chr(raw[at])
        specs.append({"row": "flip-catalog-name", "kind": "replace", "target": "catalog.sqlite",
                      "offset": at, "byte": run.rng.choice([d for d in "0123456789" if d != digit])})
    for _ in range(2 * n):
        target = run.rng.choice(list(sizes))
        specs.append({"row": "truncate", "kind": "truncate", "target": target,
                      "length": run.rng.randrange(sizes[target])})
    for target in run.subset(list(sizes), 2):
        specs.append({"row": "missing-file", "kind": "remove", "target": target})
    rows["flip-catalog-name"].notes.append(
        f"{len(name_digits)} digit positions of segment names in the raw file (live and stale copies)")
    run_task(run, "damage", specs, list(rows.values()), {"template": template})
    finish_rows(run, rows.values(), started)


def _find_all(data, needle):
    out, at = [], data.find(needle)
    while at >= 0:
        out.append(at)
        at = data.find(needle, at + 1)
    return out


def kind_arrays(run):
    """Malformed arrays inside a segment whose checksum was resealed."""
    row = run.row("corrupt-arrays", "corrupt-arrays",
                  "Malformed arrays in a segment, checksum resealed",
                  "one value of a segment's arrays overwritten with h5py and the catalog's "
                  "checksum updated to match (so only the content can tell): {damages}; then "
                  "{ops}", "CorruptIndexError, or the same result as on the undamaged index "
                  "(verify: a problem reported); no crash, no silently wrong result; compact never "
                  "launders the damage into a segment that verifies ok",
                  ["CorruptIndexError", "reported by verify", "compacted; verify reports the damage",
                   "unaffected (same result as undamaged)",
                   "compacted; the damage is gone (rebuilt from intact arrays)"])
    started = time.monotonic()
    damages = run.subset(ARRAY_DAMAGE, 3)
    ops = run.subset(ARRAY_OPERATIONS, 3)
    row.injection = row.injection.format(damages="; ".join(damages), ops=", ".join(ops))
    specs = [{"row": row.id, "damage": d, "op": o} for d in damages for o in ops]
    run_task(run, "arrays", specs, [row], {"template": run.template("small")})
    finish_rows(run, [row], started)


def kind_catalog_edits(run):
    """Catalog content damaged with SQL (valid SQLite, wrong content)."""
    row = run.row("catalog-edits", "catalog-edits", "Catalog content damaged (SQL edits)",
                  "one edit of the catalog with sqlite3 (valid SQLite, wrong content): {edits}",
                  "reported at open (CorruptIndexError) or by verify; no other exception; a "
                  "writer never deletes a committed segment",
                  ["detected at open", "detected by verify"])
    started = time.monotonic()
    edits = run.subset(CATALOG_EDITS, 5)
    row.injection = row.injection.format(edits="; ".join(edits))
    specs = [{"row": row.id, "edit": e} for e in edits]
    run_task(run, "catalog-edit", specs, [row], {"template": run.template("small")})
    finish_rows(run, [row], started)


def kind_foreign(run):
    """Paths that are not an index, and unknown format versions."""
    row = run.row("not-an-index", "foreign", "Not an index, or another format",
                  "open (reader and writer) of: {kinds}",
                  "NotAnIndexError / CorruptIndexError (UnsupportedFormatError for version 999) "
                  "with a message; no file created or changed",
                  ["refused, nothing touched"])
    started = time.monotonic()
    kinds = ["a regular file", "an empty directory", "a directory of other files",
             "another SQLite database", "random bytes as catalog", "an HDF5 file",
             "a path that does not exist", "format version 999", "another format name"]
    kinds = run.subset(kinds, 3)
    row.injection = row.injection.format(kinds="; ".join(kinds))
    specs = [{"row": row.id, "kind": k, "mode": m} for k in kinds for m in ("r", "a")]
    run_task(run, "foreign", specs, [row], {"template": run.template("small")})
    finish_rows(run, [row], started)


def kind_second_writer(run):
    """A second writer while one holds the lock (another process, the same process, the CLI)."""
    from sobolev_index import IndexLockedError, SobolevIndex

    row = run.row("second-writer", "second-writer", "A second writer",
                  "while a child process holds the writer lock: open('a') at once, open('a', "
                  "timeout=0.5), a reader, `delete --wait 0.5` and `verify --repair` on the CLI; "
                  "and a second writer in the same process",
                  "IndexLockedError (CLI: one 'Error:' line) at once or after the timeout; readers "
                  "unaffected; index byte-identical",
                  ["IndexLockedError, unchanged", "reader unaffected"])
    started = time.monotonic()
    path = copy_index(run.template("small"), os.path.join(run.dir("second-writer"), "ix"))
    clouds = os.path.join(run.dir("second-writer"), "one.jsonl")
    with open(clouds, "w") as handle:
        handle.write(GOOD_POINT + "\n")
    for _ in range(max(1, run.trials // 5)):
        holder = LineChild(run, "hold-writer", path)
        if holder.wait_for("READY", 60) is None:
            row.add("holder did not start", holder.kill()[-400:])
            continue
        try:
            before = snapshot(path)

            def check(name, fn, min_wait=0.0, max_wait=2.0, before=before):
                t0 = time.monotonic()
                try:
                    fn()
                except IndexLockedError as exc:
                    waited = time.monotonic() - t0
                    if not (min_wait <= waited <= max_wait):
                        return row.add("wrong wait", f"{name}: {waited:.2f} s")
                    changed = differences(before, snapshot(path))
                    if changed:
                        return row.add("index changed", f"{name}: {changed}")
                    return row.add("IndexLockedError, unchanged", str(exc)[:100])
                except Exception as exc:
                    return row.add(f"wrong error: {type(exc).__name__}", f"{name}: {describe(exc)}")
                row.add("opened a second writer", name)

            check("open('a')", lambda: SobolevIndex.open(path, "a").close())
            check("open('a', timeout=0.5)", lambda: SobolevIndex.open(path, "a", timeout=0.5).close(),
                  0.45, 5.0)
            try:
                with SobolevIndex.open(path) as reader:
                    reader.search([(np.array([1, 2]), None)], k=3)
                row.add("reader unaffected")
            except Exception as exc:
                row.add(f"reader failed: {type(exc).__name__}", describe(exc))
            for argv in (["delete", path, "a0", "--wait", "0.5"], ["verify", path, "--repair"]):
                status, out, err, _ = run_cli(argv, cwd=run.workdir)
                lines = cli_error_lines(err)
                if status == 1 and len(lines) == 1 and "writing" in lines[0] and "Traceback" not in err:
                    changed = differences(before, snapshot(path))
                    row.add("IndexLockedError, unchanged" if not changed else "index changed",
                            f"{argv[0]}: {changed or lines[0][:100]}")
                else:
                    row.add("CLI: not one clear error", f"{argv[0]}: status {status}; {err[-300:]}")
        finally:
            holder.finish()
    with SobolevIndex.open(path, "a") as writer:
        before = snapshot(path)
        try:
            SobolevIndex.open(path, "a").close()
            row.add("opened a second writer", "same process")
        except IndexLockedError:
            changed = differences(before, snapshot(path))
            row.add("IndexLockedError, unchanged" if not changed else "index changed", "same process")
        writer.add([(np.array([1, 2]), None)], keys=["still-writable"])
    finish_rows(run, [row], started)


def kind_concurrency(run):
    """Readers opening and searching while a writer adds one document at a time and merges."""
    from sobolev_index import SobolevIndex

    row = run.row("readers-during-merges", "concurrency", "Readers during merges",
                  "one writer child adds one document per add() for {seconds} s (a tier merge every "
                  "few adds, deleting merged files) while 2 reader children loop: open or refresh, "
                  "list keys, search k > N, search by key, compare features bit for bit, and every "
                  "5th time verify()", "0 errors: no CorruptIndexError (a false 'corrupt'), no "
                  "other exception, only committed states seen, verify ok",
                  ["consistent"])
    started = time.monotonic()
    seconds = 4.0 if run.quick else 40.0
    row.injection = row.injection.format(seconds=f"{seconds:g}")
    path = os.path.join(run.dir("concurrency"), "ix")
    graph = make_graph(120, run.seed)
    with SobolevIndex.create(path, graph, roots=2, seed=run.seed) as index:
        for b in range(3):
            index.add(batch_measures(b, 120, 24), keys=batch_keys(b, 24))
    initial = sum(batch_size(b, 24) for b in range(3))
    writer = LineChild(run, "merge-writer", path, 3, seconds + 1)
    if writer.wait_for("READY", 60) is None:
        row.add("writer did not start", writer.kill()[-400:])
        finish_rows(run, [row], started)
        return
    readers = []
    for seed in (1, 2):
        out = os.path.join(run.dir("concurrency"), f"reader{seed}.json")
        readers.append((LineChild(run, "reader", path, seconds, out, seed), out))
    writer.proc.wait(timeout=seconds + 120)
    writer.wait_for("<EOF>", 30)
    committed, running, merges, last_segments = {initial}, initial, 0, None
    for line in writer.text():
        parts = line.split()
        if parts and parts[0] == "ACK":
            running += 1
            committed.add(running)
            segments = int(parts[3])
            if last_segments is not None and segments < last_segments:
                merges += 1
            last_segments = segments
    if writer.proc.returncode != 0:
        row.add("writer failed", writer.stderr()[-500:])
    for reader, out in readers:
        reader.proc.wait(timeout=seconds + 120)
        if reader.proc.returncode != 0 or not os.path.exists(out):
            row.add("reader process failed", reader.stderr()[-500:])
            continue
        with open(out) as handle:
            data = json.load(handle)
        row.outcomes.update(data["outcomes"])
        row.examples += data["examples"][:3]
        for count in sorted(set(data["counts"]) - committed):
            row.add("saw a state that was never committed", f"{count} documents")
    row.notes.append(f"{running - initial} adds committed, {merges} merges during the run")
    if merges == 0:
        row.add("no merge happened (the trial lost its point)", "")
    with SobolevIndex.open(path) as index:
        report = index.verify()
        if not report["ok"] or len(index) != running:
            row.add("index not ok afterwards", f"{report['problems']}, {len(index)} vs {running}")
    finish_rows(run, [row], started)


MALICIOUS_NAMES = ["../../B.idx/segments/000001.h5", "{ABS_B}", "{ABS_CANARY}", "../000001.h5",
                   "000001.h5/..", "notes.txt", "segments/000001.h5", "000001.h5\n", "", ".."]


def kind_malicious_names(run):
    """A catalog whose segment file name points outside the index."""
    from sobolev_index import CorruptIndexError, SobolevIndex

    row = run.row("catalog-segment-name", "malicious-name",
                  "A catalog naming a file outside the index",
                  "segment 1's file name in A's catalog set to: {names}; then {ops}",
                  "CorruptIndexError (CLI: one 'Error:' line; verify: the name reported as a "
                  "problem, exit 1); no file anywhere changed or removed, in A, in the "
                  "neighbouring index B or in a canary folder",
                  ["CorruptIndexError, nothing touched"])
    started = time.monotonic()
    base = run.dir("malicious")
    template = run.template("small")
    names = run.subset(MALICIOUS_NAMES, 1)
    ops = ["open('r')", "open('a')", "CLI compact", "CLI verify --repair", "CLI delete"]
    row.injection = row.injection.format(names=", ".join(repr(n) for n in names), ops=", ".join(ops))
    fresh = False
    for name in names:
        if not fresh:
            shutil.rmtree(base)
            os.makedirs(os.path.join(base, "canary"))
            copy_index(template, os.path.join(base, "B.idx"))
            copy_index(template, os.path.join(base, "A.idx"))
            shutil.copy(os.path.join(template, "segments", "000001.h5"),
                        os.path.join(base, "canary", "000001.h5"))
            shutil.copy(os.path.join(template, "segments", "000001.h5"),
                        os.path.join(base, "A.idx", "000001.h5"))
            with open(os.path.join(base, "A.idx", "segments", "notes.txt"), "w") as handle:
                handle.write("mine")
        actual = (name.replace("{ABS_B}", os.path.join(base, "B.idx", "segments", "000001.h5"))
                  .replace("{ABS_CANARY}", os.path.join(base, "canary", "000001.h5")))
        with sqlite3.connect(os.path.join(base, "A.idx", "catalog.sqlite")) as db:
            db.execute("UPDATE segments SET file = ? WHERE id = 1", (actual,))
        db.close()
        before = file_hashes(base)
        fresh = True
        for op in ops:
            a = os.path.join(base, "A.idx")
            if op.startswith("open"):
                try:
                    SobolevIndex.open(a, op[6]).close()
                    outcome, detail = "opened", op
                except CorruptIndexError as exc:
                    outcome, detail = "CorruptIndexError", describe(exc)
                except Exception as exc:
                    outcome, detail = f"wrong error: {type(exc).__name__}", describe(exc)
            else:
                argv = {"CLI compact": ["compact", a], "CLI verify --repair": ["verify", a, "--repair"],
                        "CLI delete": ["delete", a, "a0"]}[op]
                status, out, err, _ = run_cli(argv, cwd=base)
                lines = cli_error_lines(err)
                if status == 1 and len(lines) == 1 and "Traceback" not in err:
                    outcome, detail = "CorruptIndexError", lines[0][:150]
                elif (argv[0] == "verify" and status == 1 and "Traceback" not in err
                      and "problem:" in out and "not a segment file name" in out):
                    # verify reads the catalog without opening the index, and
                    # reports the bad name as a problem (exit 1) rather than
                    # failing with an error.
                    outcome, detail = "CorruptIndexError", out.splitlines()[1][:150]
                else:
                    outcome, detail = "CLI: not one clear error", f"status {status}: {err[-300:]}"
            changed = differences({"files": before, "catalog": ""}, {"files": file_hashes(base),
                                                                      "catalog": ""})
            if changed:
                outcome, fresh = "files touched", False
                detail = f"{changed}"
                before = file_hashes(base)
            if outcome == "CorruptIndexError":
                outcome = "CorruptIndexError, nothing touched"
            row.add(outcome, f"name {name!r}, {op}: {detail}")
    finish_rows(run, [row], started)


def kind_lost_wal(run):
    """The catalog's SQLite log lost after commits (copied without it, or deleted)."""
    from sobolev_index import SobolevIndex

    expected = ("the segment files the lost commits wrote are never deleted; verify() is not ok, "
                "with a problem line and an 'unlisted' entry (file, documents) for each; "
                "verify(repair=True) moves them to INDEX/lost+found/ and lists them under "
                "'moved'; then verify ok; opening warns of them (UnlistedSegmentsWarning); "
                "recover() brings back every acknowledged document of the lost commits (key, "
                "measure) and verify stays ok")
    ok = ["kept, reported, moved to lost+found, recovered"]
    rows = {
        "copy": run.row("lost-wal-copy", "lost-wal", "Lost catalog log (copy without -wal)",
                        "a writer commits 1-5 batches (kept in catalog.sqlite-wal, not yet "
                        "checkpointed); the index directory is copied without the -wal and -shm; "
                        "checks on the copy", expected, ok),
        "kill": run.row("lost-wal-kill", "lost-wal", "Lost catalog log (writer killed, -wal deleted)",
                        "a writer child commits 1-5 batches and is SIGKILLed; catalog.sqlite-wal "
                        "and -shm are deleted", expected, ok),
        "add": run.row("lost-wal-add", "lost-wal", "Lost catalog log, then a writer adds",
                       "as the copy case, but a writer first opens the copy and adds a batch "
                       "(whose segment id the lost commits had used), then the checks",
                       "as above, and the new batch durable: no lost segment overwritten", ok),
    }
    started = time.monotonic()
    template = run.template("small")
    base = run.dir("lost-wal")
    for t in range(run.trials):
        for variant in ("copy", "kill", "add"):
            src = copy_index(template, os.path.join(base, "src"))
            k = 1 + (t + len(variant)) % 5
            if variant == "kill":
                child = LineChild(run, "wal-writer", src, k)
                if child.wait_for("DONE", 60) is None:
                    rows[variant].add("writer child failed", child.kill()[-400:])
                    continue
                child.kill()
                for suffix in ("-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(src, "catalog.sqlite" + suffix))
                dst = src
            else:
                writer = SobolevIndex.open(src, "a")
                try:
                    n = writer.graph.n_nodes
                    for b in range(k):
                        writer.add(batch_measures(1000 + b, n, 6), keys=batch_keys(1000 + b, 6))
                    dst = copy_index(src, os.path.join(base, "dst"), without=("-wal", "-shm"))
                finally:
                    writer.close()
            first = 2000 if variant == "kill" else 1000
            lost = {key: measure for b in range(k)
                    for key, measure in zip(batch_keys(first + b, 6),
                                            batch_measures(first + b, 60, 6))}
            outcome, detail = _lost_wal_checks(dst, variant == "add", lost)
            rows[variant].add(outcome, f"{k} batches lost from the log: {detail}")
    finish_rows(run, rows.values(), started)


def _recovered(writer, lost):
    """Failures of ``writer.recover()`` to bring back the documents ``lost``
    ({key: (nodes, masses)}, as they were added)."""
    report = writer.recover()
    failures = []
    missing = sorted(key for key in lost if key not in writer)
    if missing:
        failures.append((1, f"recover() left {len(missing)} acknowledged document(s) out: "
                            f"{missing[:5]} (report: {len(report['restored'])} restored, "
                            f"{report['skipped'][:2]}, {report['unreadable'][:1]})"))
    for key, (nodes, masses) in lost.items():
        if key in writer:
            got = writer.get(key)
            want = np.zeros(writer.graph.n_nodes)
            np.add.at(want, np.asarray(nodes), np.asarray(masses, dtype=float))
            have = np.zeros(writer.graph.n_nodes)
            np.add.at(have, np.asarray(got["nodes"]), np.asarray(got["masses"], dtype=float))
            if not np.allclose(have / have.sum(), want / want.sum(), rtol=1e-12, atol=1e-15):
                failures.append((1, f"document {key!r} came back with another measure"))
                break
    return failures


def _lost_wal_checks(path, add_first, lost):
    """The checks of a lost log on ``path``; (outcome, detail), the most
    severe failure first."""
    import h5py

    from sobolev_index import SobolevIndex

    listed = set(committed_files(path))
    unlisted = {name: sha256_of(os.path.join(path, "segments", name))
                for name in segment_files(path) if name not in listed}
    if not unlisted:
        return "no unlisted segment (the trial lost its point)", "the commits were checkpointed"
    documents = {}
    for name in unlisted:
        with h5py.File(os.path.join(path, "segments", name), "r") as f:
            documents[name] = int(len(f["doc_ids"]))
    failures = []
    live = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reader = SobolevIndex.open(path)
        warned = [w for w in caught if w.category.__name__ == "UnlistedSegmentsWarning"]
        files = "1 segment file" if len(unlisted) == 1 else f"{len(unlisted)} segment files"
        if len(warned) != 1 or f"{files} in segments/" not in str(warned[0].message):
            failures.append((4, f"open did not warn of the unlisted files ({len(warned)} "
                                "warnings)"))
        with reader:
            live = len(reader)
            report = reader.verify()
        if report["ok"]:
            failures.append((4, "not reported (verify ok)"))
        if not all(any(name in p for p in report["problems"]) for name in unlisted):
            failures.append((5, "no problem line per file"))
        entries = {os.path.basename(str(e.get("file"))): e.get("documents")
                   for e in report.get("unlisted", []) if isinstance(e, dict)}
        if entries != documents:
            failures.append((5, f"'unlisted' is {report.get('unlisted')!r}, expected {documents}"))
    except Exception as exc:
        failures.append((2, f"a reader failed: {describe(exc)}"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reader above checked the warning
            writer = SobolevIndex.open(path, "a")
        with writer:
            if add_first:
                n = writer.graph.n_nodes
                keys = writer.add(batch_measures(5000, n, 6), keys=batch_keys(5000, 6))
            present = all_hashes(path)
            gone = [name for name, digest in unlisted.items() if digest not in present]
            if gone:
                failures.append((1, f"lost segment(s) {gone} deleted or overwritten by a writer "
                                    "(acknowledged data lost)"))
            report = writer.verify(repair=True)
            moved = report.get("moved")
            lost_found = os.path.join(path, "lost+found")
            kept = all_hashes(lost_found) if os.path.isdir(lost_found) else set()
            if not gone and not set(unlisted.values()) <= kept:
                failures.append((3, f"repair did not move them to lost+found (moved: {moved!r})"))
            if not moved or len(moved) != len(unlisted):
                failures.append((5, f"'moved' is {moved!r}"))
            after = writer.verify()
            if not after["ok"]:
                failures.append((3, f"verify not ok after repair: {after['problems'][:2]}"))
            expected_live = (live or 0) + (len(keys) if add_first else 0)
            if live is not None and len(writer) != expected_live:
                failures.append((2, f"{len(writer)} live documents, expected {expected_live}"))
            failures += _recovered(writer, lost)
            after = writer.verify()
            if not after["ok"]:
                failures.append((3, f"verify not ok after recover: {after['problems'][:2]}"))
        if add_first:
            with SobolevIndex.open(path) as reader:
                if not all(key in reader for key in keys):
                    failures.append((1, "the new batch is not durable"))
    except Exception as exc:
        failures.append((2, f"a writer failed: {describe(exc)} at {where_raised(exc)}"))
    if not failures:
        return ("kept, reported, moved to lost+found, recovered",
                f"{len(unlisted)} file(s), {len(lost)} document(s)")
    failures.sort()
    labels = {1: "acknowledged data deleted", 2: "error", 3: "not moved to lost+found",
              4: "not reported (verify ok)", 5: "report incomplete"}
    return labels[failures[0][0]], "; ".join(text for _, text in failures)


def kind_sql(run):
    """Runaway SQL queries with a time limit (API and CLI)."""
    row = run.row("sql-timeout", "sql-timeout", "Runaway SQL query",
                  "`iter_query(..., timeout=T)` and `sql --timeout T` on a 3,000-document index, "
                  "T in {timeouts} s: {queries}",
                  f"one SobolevIndexError ('ran longer than T s'; CLI: one 'Error:' line) within "
                  f"T + {SQL_SLACK} s (CLI: + 1.5 s for starting Python and opening the index)",
                  ["one clear error in time"])
    started = time.monotonic()
    template = run.template("sql")
    timeouts = run.subset([0.25, 0.5, 1.0, 2.0], 1)
    queries = run.subset(SQL_QUERIES, 2)
    row.injection = row.injection.format(timeouts=", ".join(map(str, timeouts)),
                                         queries="; ".join(queries))
    specs = [{"row": row.id, "query": q, "timeout": t} for q in queries for t in timeouts]
    run_task(run, "sql", specs, [row], {"template": template})
    for query in run.subset(list(SQL_QUERIES), 2):
        limit = timeouts[-1]
        status, out, err, seconds = run_cli(["sql", template, SQL_QUERIES[query], "--timeout", limit],
                                            cwd=run.workdir, timeout=120)
        lines = cli_error_lines(err)
        what = f"CLI {query}, limit {limit:g} s: exit {status} after {seconds:.2f} s"
        if status == 1 and len(lines) == 1 and "longer than" in lines[0] and "Traceback" not in err:
            row.add("one clear error in time" if seconds <= limit + SQL_SLACK + 1.5 else "stopped late",
                    what)
        else:
            row.add("CLI: not one clear error", f"{what}: {err[-300:]}")
    finish_rows(run, [row], started)


KINDS = {
    "sigkill": kind_sigkill,
    "diskfull": kind_diskfull,
    "diskfull-real": kind_diskfull_real,
    "bad-api": kind_bad_api,
    "large-p": kind_large_p,
    "bad-cli": kind_bad_cli,
    "byteflip": kind_damage,
    "corrupt-arrays": kind_arrays,
    "catalog-edits": kind_catalog_edits,
    "foreign": kind_foreign,
    "second-writer": kind_second_writer,
    "concurrency": kind_concurrency,
    "malicious-name": kind_malicious_names,
    "lost-wal": kind_lost_wal,
    "sql-timeout": kind_sql,
    "checked-open": kind_checked_open,
    "pipes": kind_pipes,
    "input-rules": kind_input_rules,
    "dask-kill": kind_shard_waits,
    "sql-limits": kind_sql_limits,
}
# Row ids (and other names) that select a kind with --only.
KIND_ALIASES = {"truncate": "byteflip", "missing": "byteflip", "missing-file": "byteflip"}


# ============================================================== child roles
def _say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def role_crash_writer(path, start, every, max_size):
    """Add deterministic batches forever, compacting every ``every`` batches;
    the parent kills this process."""
    from sobolev_index import SobolevIndex

    start, every, max_size = int(start), int(every), int(max_size)
    index = SobolevIndex.open(path, "a", timeout=30)
    n = index.graph.n_nodes
    _say("READY")
    b = start
    while True:
        if b % every == 0 and b != start:
            _say(f"COMPACT {b}")
            index.compact()
            _say(f"COMPACTED {b}")
        measures, keys = batch_measures(b, n, max_size), batch_keys(b, max_size)
        _say(f"START {b}")
        if index.add(measures, keys=keys) != keys:
            raise AssertionError("add returned other keys")
        _say(f"ACK {b}")
        b += 1


def role_merge_writer(path, start, seconds):
    """One document per add() for ``seconds``: the size tiers merge every few adds."""
    from sobolev_index import SobolevIndex

    b, deadline = int(start), time.monotonic() + float(seconds)
    with SobolevIndex.open(path, "a", timeout=30) as index:
        n = index.graph.n_nodes
        _say(f"READY {len(index)}")
        while time.monotonic() < deadline:
            index.add(batch_measures(b, n, 1), keys=batch_keys(b, 1))
            _say(f"ACK {b} {len(index)} {len(index.segments)}")
            b += 1
    _say("DONE")


def role_reader(path, seconds, out, seed):
    """Open or refresh, check and search in a loop; write a summary to ``out``."""
    from sobolev_index import CorruptIndexError, SobolevIndex

    rng = random.Random(int(seed))
    outcomes, examples, counts = Counter(), [], []
    deadline = time.monotonic() + float(seconds)
    index = None
    iteration = 0
    query = random_measure(np.random.default_rng(int(seed)), 120)
    while time.monotonic() < deadline:
        iteration += 1
        problem = None
        try:
            if index is None or iteration % 2:
                if index is not None:
                    index.close()
                index = SobolevIndex.open(path)
            else:
                index.refresh()
            problem = _reader_checks(index, rng, query, iteration, counts)
        except CorruptIndexError as exc:
            problem = ("false corruption report (CorruptIndexError)", describe(exc))
        except Exception as exc:
            problem = (f"error: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}")
        if problem:
            outcomes[problem[0]] += 1
            if len(examples) < 5:
                examples.append(f"{problem[0]}: {problem[1]}")
        else:
            outcomes["consistent"] += 1
    if index is not None:
        index.close()
    with open(out, "w") as handle:
        json.dump({"outcomes": outcomes, "examples": examples, "counts": sorted(set(counts))}, handle)


def _reader_checks(index, rng, query, iteration, counts):
    n = len(index)
    keys = list(index)
    counts.append(n)
    if len(set(keys)) != n:
        return "inconsistent snapshot", f"len {n}, {len(set(keys))} distinct keys"
    batches = {}
    for key in keys:
        batches.setdefault(int(key[1:7]), set()).add(key)
    for b, present in batches.items():
        size = 24 if b < 3 else 1
        if present != set(batch_keys(b, size)):
            return "partial batch visible", f"batch {b}"
    found = index.search([query], k=n + 5, p=rng.choice([1, 2]))
    if set(found.keys[0]) != set(keys):
        return "search disagrees with the snapshot", f"{len(found.keys[0])} found, {n} listed"
    probe = rng.choice(keys)
    found = index.search(probe, k=3)
    if abs(found.distances[0][0]) > 1e-12:
        return "search by key not at distance 0", probe
    b = rng.choice(sorted(batches))
    size = 24 if b < 3 else 1
    measures = batch_measures(b, index.graph.n_nodes, size)
    for r, tree in enumerate(index.trees):
        stored, fresh = index.features(batch_keys(b, size), root=r), tree.features_of(measures)
        if not (np.array_equal(stored.indices, fresh.indices) and np.array_equal(stored.data, fresh.data)):
            return "features differ", f"batch {b}"
    if iteration % 5 == 0:
        report = index.verify()
        if not report["ok"]:
            return "false corruption report (verify)", "; ".join(report["problems"])[:300]
    return None


def role_hold_writer(path):
    """Hold the writer lock until stdin closes."""
    from sobolev_index import SobolevIndex

    with SobolevIndex.open(path, "a"):
        _say("READY")
        sys.stdin.read()


def role_wal_writer(path, k):
    """Commit ``k`` batches, say DONE, and wait to be killed (the log is not
    checkpointed while this writer lives)."""
    from sobolev_index import SobolevIndex

    index = SobolevIndex.open(path, "a")
    n = index.graph.n_nodes
    for b in range(int(k)):
        index.add(batch_measures(2000 + b, n, 6), keys=batch_keys(2000 + b, 6))
    _say("DONE")
    time.sleep(600)


ROLES = {
    "trials": role_trials,
    "crash-writer": role_crash_writer,
    "merge-writer": role_merge_writer,
    "reader": role_reader,
    "hold-writer": role_hold_writer,
    "wal-writer": role_wal_writer,
}


# ============================================================== the page
INTRO = """\
# Reliability

sobolev-index makes four promises about faults and bad input, and this page
counts how often they held when we tried to break them:

- **Acknowledged data is never lost.** Once `add()` (or a CLI batch) has
  returned, its documents survive a writer killed at any moment, a full disk
  in a later write, and damage to the catalog's log: at worst the files are
  kept aside for a person to look at, never deleted.
- **Rejected input changes nothing.** A bad measure, key, field or option
  gives one clear error (an exception the package raises on purpose, of the
  class its documentation names; on the command line, one `Error:` line),
  and every file of the index is byte for byte as it was.
- **Readers are never told "corrupt" by mistake.** A reader that opens and
  searches while a writer merges segments sees a committed state, never an
  error.
- **Damage is reported, not hidden.** A flipped byte, a cut file or a
  missing file is found by opening the index or by `verify()`, and a writer's
  repair never deletes committed data to make the report come out clean.

## What is checked when, and what is not

Opening an index hashes `graph.h5` against the SHA-256 its catalog records,
so a flipped byte in the graph is an error at open, not other distances
(`checked-open-graph`). Merges (`compact`, the size-tier merges of `add`,
`upgrade`) and exports hash every segment they read, so damage is never
copied into a new file with a fresh checksum; `open(check=True)`
(`sobolev-index --check COMMAND`) hashes every segment at open. A key or
label that is not UTF-8 is a `CorruptIndexError` naming the document, never
a key with U+FFFD, and a sharded index's manifest carries a checksum of its
content. Opening warns (`UnlistedSegmentsWarning`) of segment files no
commit lists, never of the file of a commit under way, and `recover()`
brings their documents back (`lost-wal-*`).

What stays unchecked, and why: a plain open does not hash the segment
files, since that would read the whole index at every open; a flipped value
inside a segment can change a search's distances or ranks until `verify()`,
a merge, an export or `check=True` reads the file
(`checked-open-segment-search`). Catalog rows carry no checksum of their
own: a key changed into other valid UTF-8 reads as that key, and damage to
SQLite's key index can make a look-up by key miss, until `verify()` runs
SQLite's integrity check (`checked-open-key-random`).

Everything below is generated by `bench/reliability.py` from
`bench/results/reliability.json`; do not edit it by hand. Each trial injects
one fault or feeds one bad input, then sorts what happened into an outcome
class; each row says which classes are expected, and any other class fails
the row. A trial that could not fail would be worthless, so the script also
fails a row when its fault was never reached (for example a kill that never
landed in `compact()`).

Rerun it ({minutes} minutes on a 2-core machine; `--quick` takes under
a minute):

```bash
python bench/reliability.py                       # every kind; writes the JSON and this page
python bench/reliability.py --quick               # a few trials of each kind
python bench/reliability.py --only byteflip --trials 100
python bench/reliability.py --list                # the kinds --only accepts
```

The script exits with status 1 when any trial has an unexpected outcome.
Trials that could crash the interpreter (damaged files, injected faults) run
in child processes of the script; a child that dies is counted as a crash.
"""


def _outcome_text(row):
    parts = []
    for outcome, count in sorted(row["outcomes"].items(), key=lambda kv: -kv[1]):
        text = f"{outcome}: {count:,}"
        parts.append(text if outcome in row["expected_outcomes"] else f"**{text}**")
    return "; ".join(parts) or "-"


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(result):
    rows = result["rows"]
    full = not result["options"]["quick"] and not result["options"]["only"]
    minutes = f"about {max(1, round(result['seconds'] / 60))}" if full else "several"
    lines = [INTRO.replace("{minutes}", str(minutes)), "## The run", ""]
    machine = result["machine"]
    git = result["git"]
    commit = git["commit"][:10] if git["commit"] else "unknown"
    if git.get("uncommitted_changes"):
        commit += " (with uncommitted changes to the package)"
    failed = [r for r in rows if r["passed"] is False]
    skipped = [r for r in rows if r["passed"] is None]
    verdict = ("every trial had an expected outcome" if not failed else
               f"{len(failed)} of {len(rows)} rows had unexpected outcomes")
    lines += [
        f"- date: {result['date']}",
        f"- sobolev-index {result['version']}, commit {commit}",
        f"- machine: {machine['cpus']} cores, {machine['platform']}, Python {machine['python']}",
        f"- options: {' '.join(result['options']['argv']) or '(defaults)'}; "
        f"{result['trials']:,} trials in {result['seconds'] / 60:.1f} minutes",
        f"- result: {verdict}" + (f"; {len(skipped)} skipped" if skipped else ""),
        "",
        "## Results",
        "",
        "| Fault or input | How it is injected | Trials | Outcomes | Expected | Result |",
        "|---|---|---:|---|---|---|",
    ]
    for row in rows:
        if row["passed"] is None:
            state = f"skipped: {row['skipped']}"
        else:
            state = "pass" if row["passed"] else "**FAIL**"
        lines.append("| " + " | ".join(_cell(c) for c in (
            f"{row['fault']} (`{row['id']}`)", row["injection"], f"{row['trials']:,}",
            _outcome_text(row), row["expected"], state)) + " |")
    lines += ["", "Outcome counts in bold are unexpected."]
    noted = [r for r in rows if r["notes"]]
    if noted:
        lines += ["", "## Notes", ""]
        for row in noted:
            for note in row["notes"]:
                lines.append(f"- `{row['id']}`: {note}")
    if failed:
        lines += ["", "## Unexpected outcomes", "",
                  "The first two trials of each unexpected outcome class, as the script recorded "
                  "them ($WORK is the run's temporary directory):", ""]
        for row in failed:
            lines.append(f"**{row['fault']}** (`{row['id']}`)")
            lines.append("")
            for example in row["examples"]:
                lines.append(f"- {_cell(example)}")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ============================================================== main
def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Run fault-injection and bad-input trials against sobolev-index; write a JSON "
                    "of the outcomes and the docs page generated from it.")
    parser.add_argument("--quick", action="store_true",
                        help="a few trials of each kind (a smoke test, under a minute)")
    parser.add_argument("--trials", type=positive_int, default=None,
                        help=f"scale of the random trials (default {DEFAULT_TRIALS}, "
                             f"{QUICK_TRIALS} with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    parser.add_argument("--out-json", default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    parser.add_argument("--out-md", default=DEFAULT_MD, help=f"default {DEFAULT_MD}")
    parser.add_argument("--only", action="append", default=[], metavar="KIND",
                        help="run only these kinds (comma-separated or repeated; see --list)")
    parser.add_argument("--list", action="store_true", help="list the kinds and exit")
    parser.add_argument("--from-json", metavar="PATH",
                        help="do not run anything: regenerate --out-md from this JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.trials is None:
        args.trials = QUICK_TRIALS if args.quick else DEFAULT_TRIALS
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--role"]:
        ROLES[argv[1]](*argv[2:])
        return 0
    args = parse_args(argv)
    if args.list:
        for name, fn in KINDS.items():
            print(f"{name:16s} {fn.__doc__.splitlines()[0] if fn.__doc__ else ''}")
        return 0
    if args.from_json:
        with open(args.from_json) as handle:
            result = json.load(handle)
        _write(args.out_md, render_markdown(result))
        return 0 if result["passed"] else 1
    wanted = [w.strip() for item in args.only for w in item.split(",") if w.strip()]
    selected = []
    for name in wanted:
        kind = KIND_ALIASES.get(name, name)
        if kind not in KINDS:
            print(f"unknown kind {name!r}; choose from {', '.join(KINDS)}", file=sys.stderr)
            return 2
        if kind not in selected:
            selected.append(kind)
    selected = selected or list(KINDS)

    import sobolev_index

    workdir = tempfile.mkdtemp(prefix="sobolev-reliability-")
    WORKDIR[0] = workdir
    run = Run(args, workdir)
    run.log(f"sobolev-index {sobolev_index.__version__} from {os.path.dirname(sobolev_index.__file__)}; "
            f"work directory {workdir}; kinds: {', '.join(selected)}")
    try:
        for name in selected:
            run.log(f"{name}: {KINDS[name].__doc__.splitlines()[0] if KINDS[name].__doc__ else ''}")
            KINDS[name](run)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - run.started
    rows = [row.as_json() for row in run.rows]
    passed = all(row["passed"] is not False for row in rows)
    result = {
        "script": "bench/reliability.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "version": sobolev_index.__version__,
        "git": git_facts(),
        "machine": {**machine_facts(), "cpus": os.cpu_count(), "machine": platform.machine()},
        "options": {"quick": args.quick, "trials": args.trials, "seed": args.seed,
                    "only": selected if wanted else None, "argv": argv},
        "seconds": round(seconds, 1),
        "trials": sum(row["trials"] for row in rows),
        "trials_by_row": {row["id"]: row["trials"] for row in rows},
        "passed": passed,
        "rows": rows,
    }
    _write(args.out_json, json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    _write(args.out_md, render_markdown(result))
    failed = [row for row in rows if row["passed"] is False]
    run.log(f"{result['trials']:,} trials in {seconds:.0f} s; wrote {args.out_json} and {args.out_md}")
    if failed:
        print(f"UNEXPECTED OUTCOMES in {len(failed)} row(s):", file=sys.stderr)
        for row in failed:
            print(f"  {row['id']}: {row['unexpected']}", file=sys.stderr)
        return 1
    return 0


def _write(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


if __name__ == "__main__":
    sys.exit(main())
