"""What every kind of trial uses: the run and its rows, the child processes
(their environment, the trials run in them), the command line, timing, and
how an exception is told apart from a check of the package."""
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

from _support.processes import LineChild, repo_child_env

from .indexes import TEMPLATES

# Random trials per kind scale with --trials (this is its default); kinds
# that try a fixed list of cases try all of them (a subset with --quick).
DEFAULT_TRIALS = 20
QUICK_TRIALS = 2
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
        seconds = time.monotonic() - started
        for row in rows:
            row.seconds = seconds  # of the whole kind, shared by its rows
            state = {True: "pass", False: "FAIL", None: "skipped"}[row.passed]
            counts = ", ".join(f"{k} {v}" for k, v in row.outcomes.most_common())
            self.log(f"  [{state}] {row.id}: {row.trials} trials ({counts or row.skipped})")

    def env(self, **extra):
        """The environment of a child process (see child_env)."""
        return child_env(**extra)

    def cli(self, args, timeout=120, stdin=None):
        """``python -m sobolev_index ARGS`` in the work directory: (status,
        stdout, stderr, seconds)."""
        return run_cli(args, cwd=self.workdir, timeout=timeout, stdin=stdin)

    def child(self, argv, **env):
        """A :class:`LineChild` of ``python ARGV`` in the work directory, with
        ``env`` on top of the children's environment."""
        return LineChild(argv, env=child_env(**env), cwd=self.workdir)

    def subset(self, items, quick_count):
        """All items, or with --quick an evenly spread subset of quick_count."""
        items = list(items)
        if not self.quick or len(items) <= quick_count:
            return items
        step = len(items) / quick_count
        return [items[int(i * step)] for i in range(quick_count)]


# ============================================================== exceptions
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


# ============================================================== child processes
def child_env(**extra):
    """The environment of child processes: the test-suite's (the package this
    process imported first on PYTHONPATH, then tests/; one OpenMP thread
    each, as they share the cores), with the repository's root last, for
    ``python -m bench.reliability --role``."""
    return repo_child_env(**extra)


def role_argv(role, *args):
    """The arguments after ``python`` that run a child role of this bench."""
    return ["-m", "bench.reliability", "--role", role, *map(str, args)]


def run_cli(args, cwd, timeout=120, stdin=None):
    """``python -m sobolev_index ARGS``; returns (status, stdout, stderr, seconds)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "sobolev_index", *map(str, args)], cwd=cwd,
                          env=child_env(), capture_output=True, timeout=timeout, input=stdin)
    return (done.returncode, done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"), time.monotonic() - started)


def cli_error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


class TrialRunner:
    """Runs trials of one task in child processes (the role "trials").

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
                proc = subprocess.Popen([sys.executable, *role_argv("trials", job)],
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


def role_trials(job_path, tasks):
    """The child of :class:`TrialRunner`: the job's trials from its start,
    each by its task in ``tasks`` ({name: fn(spec, ctx) -> (outcome, detail)})."""
    with open(job_path) as handle:
        job = json.load(handle)
    task = tasks[job["task"]]
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
