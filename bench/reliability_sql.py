"""Hostile SQL on an index's catalog, for bench/reliability.py: the kind
``sql-limits`` (:func:`kind_sql_limits`).

Each statement is sent through three paths to a 3,000-document index:
the API (``run_query(..., timeout=1)``) and the web view's SQL page
(Datasette's client, ``sql_time_limit_ms`` 1,000), both in a child
process (so that a statement that crashes the process costs that trial,
not the run), and the command line (``sobolev-index sql INDEX QUERY
--timeout 1``). A trial is "refused clearly" (one error, fast, that names
the function or the limit), "stopped in time" (one error saying which
limit, within the limit and SLACK), or one of the failures: "ran" (no
error), "slow" (its answer came late), "unclear error", "crash" (the
process died, a traceback, a server error) or "hang".

bench/reliability.py registers :func:`kind_sql_limits`; this module
imports only the package and the standard library.
"""
import hashlib
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time

LIMIT = 1.0        # seconds: --timeout, timeout=, sql_time_limit_ms
SLACK = 0.5        # seconds a refusal or a stop may come after the limit
CLI_START = 1.5    # seconds the command line adds (starting Python, opening the index)
TRIAL_TIMEOUT = 60.0
WORK_BUDGET = 1_000_000  # max_work / max_sql_work of the work-budget statements

_NAMED = r"function \S+ is not allowed in read-only queries"
_VALUE = r"at most [\d,]+ bytes"
_READ_ONLY = (r"read-only|not authorized|must be a SELECT|disallowed PRAGMA|readonly|"
              r"attempt to write")
_STOPPED = r"longer than|time limit|took too long|work limit"

# (row, statement name, SQL, pattern of a clear message, paths[, max_work]);
# the attached database's path is filled in by the kind.
STATEMENTS = [
    ("functions", "fts3_tokenizer('simple') (a process address)",
     "SELECT hex(fts3_tokenizer('simple'))", _NAMED, "api web cli"),
    ("functions", "fts3_tokenizer with two arguments (installs a pointer)",
     "SELECT fts3_tokenizer('bench_tokenizer', x'0000000000000000')", _NAMED, "api web cli"),
    ("functions", "load_extension", "SELECT load_extension('/nonexistent/bench_extension')",
     _NAMED, "api web cli"),
    ("functions", "sqlite_log (writes to the error log)",
     "SELECT sqlite_log(1, 'from the reliability bench')", _NAMED, "api web cli"),
    ("functions", "fts5_source_id in a WHERE clause",
     "SELECT count(*) FROM documents WHERE fts5_source_id() IS NOT NULL", _NAMED, "api web cli"),
    ("functions", "rtreenode", "SELECT rtreenode(2, x'00000000')", _NAMED, "api web cli"),
    ("values", "randomblob(1e9)", "SELECT length(randomblob(1000000000))", _VALUE,
     "api web cli"),
    ("values", "zeroblob(1e9)", "SELECT zeroblob(1000000000)", _VALUE, "api web cli"),
    ("values", "replace() growing a value past the limit",
     "SELECT length(replace(hex(zeroblob(600000)), '0', 'ab'))", _VALUE, "api web cli"),
    ("values", "group_concat of 3,000 random 2 kB strings",
     "SELECT length(group_concat(hex(randomblob(1000)))) FROM documents", _VALUE, "api web cli"),
    ("values", "expression nested 1,000 deep", "SELECT " + " + ".join(["1"] * 1000),
     r"maximum depth", "api web cli"),
    ("values", "600 SELECTs in one UNION ALL", " UNION ALL ".join(["SELECT 1"] * 600),
     r"too many terms", "api web cli"),
    ("values", "LIKE pattern of 5,000 bytes",
     "SELECT count(*) FROM documents WHERE key LIKE '" + "%_" * 2500 + "'",
     r"pattern too complex", "api web cli"),
    # (a URL cannot carry it to the web page, nor argv to the command line)
    ("values", "2 MB of SQL text", "SELECT 1" + " " * (2 << 20),
     r"at most [\d,]+ bytes", "api"),
    ("runaway", "sobolev_knn(key, 1000, 'inf') for every document",
     "SELECT count(sobolev_knn(key, 1000, 'inf')) FROM documents", _STOPPED, "api web cli"),
    ("runaway", "sobolev_distance over a cross join (9 million calls)",
     "SELECT count(sobolev_distance(a.key, b.key)) FROM documents a, documents b", _STOPPED,
     "api web cli"),
    ("runaway", "sobolev_knn with k = 1e9, 500 calls",
     "SELECT count(sobolev_knn(key, 1000000000)) FROM (SELECT key FROM documents LIMIT 500)",
     _STOPPED, "api web cli"),
    ("runaway", f"sobolev_knn(key, 10) for every document, work limit {WORK_BUDGET:,}",
     "SELECT count(sobolev_knn(key, 10)) FROM documents", r"work limit", "api web",
     WORK_BUDGET),
    ("runaway", "recursive CTE without end",
     "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
     _STOPPED + "|" + _READ_ONLY, "api web cli"),
    ("writes", "ATTACH another database", "ATTACH DATABASE '{attached}' AS other", _READ_ONLY,
     "api web cli"),
    ("writes", "PRAGMA journal_mode=DELETE", "PRAGMA journal_mode=DELETE", _READ_ONLY,
     "api web cli"),
    ("writes", "PRAGMA user_version=7", "PRAGMA user_version=7", _READ_ONLY, "api web cli"),
    ("writes", "DELETE FROM documents", "DELETE FROM documents", _READ_ONLY, "api web cli"),
    ("writes", "UPDATE through a CTE",
     "WITH x AS (SELECT 1) UPDATE documents SET label = 'x'", _READ_ONLY, "api web cli"),
    ("loops", "printf('%.*c', 2e8, 'x') (SQLite loops past the length limit)",
     "SELECT length(printf('%.*c', 200000000, 'x'))", _VALUE + "|" + _STOPPED, "api web cli"),
    ("loops", "instr() of 0.9 MB and 0.23 MB strings (time grows with the product)",
     "SELECT instr(hex(zeroblob(450000)), hex(zeroblob(112500)) || '1')",
     _VALUE + "|" + _STOPPED, "api web cli"),
]

# Statements per row that --quick keeps.
QUICK = {"functions": 2, "values": 2, "runaway": 2, "writes": 2, "loops": 1}
ROWS = {
    "functions": ("sql-functions", "Functions that are not SQLite's core ones or ours",
                  "a SQL statement calls {items}"),
    "values": ("sql-values", "Huge values, statements and nesting",
               "{items}"),
    "runaway": ("sql-runaway", "Runaway S_p functions and recursion",
                "{items}"),
    "writes": ("sql-writes", "Writes, ATTACH and PRAGMA through the read-only SQL",
               "{items}"),
    "loops": ("sql-builtin-loops", "One SQLite built-in call that runs long",
              "{items}"),
}
OK_OUTCOMES = ("refused clearly", "stopped in time")


# ---------------------------------------------------------------- the index
def build_index(path, seed):
    """3,000 documents on 200 nodes, 2 roots, with labels and fields: big
    enough that the S_p functions over every document run for tens of
    seconds."""
    import numpy as np

    from sobolev_index import Graph, SobolevIndex

    rng = np.random.default_rng([seed, 200])
    graph = Graph.from_points(rng.normal(size=(1200, 3)), n_nodes=200, edges="log", seed=seed)
    with SobolevIndex.create(path, graph, roots=2, seed=seed) as index:
        for part in range(3):
            measures = []
            for _ in range(1000):
                k = int(rng.integers(1, 21))
                measures.append((rng.integers(200, size=k).astype(np.int64),
                                 rng.uniform(0.05, 1.0, size=k)))
            index.add(measures, keys=[f"s{part}-{i}" for i in range(1000)],
                      labels=[f"l{i % 3}" for i in range(1000)],
                      fields=[{"text": f"document {part}-{i}"} for i in range(1000)])


def _hashes(path):
    """sha256 of every file under ``path`` but SQLite's -shm and an empty -wal."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if name.endswith("-shm") or (name.endswith("-wal") and os.path.getsize(full) == 0):
                continue
            with open(full, "rb") as handle:
                out[os.path.relpath(full, path)] = hashlib.sha256(handle.read()).hexdigest()
    return out


# -------------------------------------------------------- API and web child
def _child(index_path, specs_path, start):
    """Run the specs of ``specs_path`` (JSON lines) from number ``start``:
    print ``BEGIN i`` before each and ``RESULT {...}`` after it."""
    import asyncio
    import urllib.parse

    from sobolev_index import SobolevIndex, SobolevIndexError
    from sobolev_index.index.sql import run_query

    reader = SobolevIndex.open(index_path)
    loop = asyncio.new_event_loop()
    sites = {}

    def site(max_work):
        if max_work not in sites:
            from sobolev_index.web import make_datasette

            # (the keyword only when a budget is asked for: releases without
            # one can be measured too)
            ds = make_datasette(index_path, name="ix",
                                settings={"sql_time_limit_ms": int(LIMIT * 1000)},
                                **({"max_sql_work": max_work} if max_work else {}))
            loop.run_until_complete(ds.invoke_startup())
            sites[max_work] = ds
        return sites[max_work]

    with open(specs_path, encoding="utf-8") as handle:
        specs = [json.loads(line) for line in handle]
    for i in range(start, len(specs)):
        spec = specs[i]
        print(f"BEGIN {i}", flush=True)
        started = time.monotonic()
        try:
            if spec["path"] == "api":
                run_query(reader, spec["sql"], timeout=LIMIT,
                          **({"max_work": spec["max_work"]} if spec["max_work"] else {}))
                kind, message = "ok", ""
            else:
                ds = site(spec["max_work"])
                response = loop.run_until_complete(ds.client.get(
                    "/ix.json?" + urllib.parse.urlencode({"sql": spec["sql"]})))
                if response.status_code == 200:
                    kind, message = "ok", ""
                elif response.status_code == 400:
                    kind, message = "error", str(response.json().get("error") or "")
                else:
                    kind, message = "crash", f"status {response.status_code}: {response.text[:300]}"
        except SobolevIndexError as exc:
            kind, message = "error", str(exc)
        except Exception as exc:  # noqa: BLE001 - reported as the trial's outcome
            kind, message = "wrong error", f"{type(exc).__name__}: {exc}"
        seconds = time.monotonic() - started
        print("RESULT " + json.dumps({"kind": kind, "message": message[:2000],
                                      "seconds": seconds}), flush=True)


def _run_child(run, index_path, specs):
    """Results of ``specs`` run by children of this module, in order; a
    child that dies or stops answering costs that trial, and the next
    child goes on from the one after."""
    work = run.dir("sql-limits-jobs")
    specs_path = os.path.join(work, f"specs-{time.monotonic_ns()}.jsonl")
    with open(specs_path, "w", encoding="utf-8") as handle:
        for spec in specs:
            handle.write(json.dumps(spec) + "\n")
    results = [None] * len(specs)
    start = 0
    while start < len(specs):
        with tempfile.TemporaryFile() as stderr:
            proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--child", index_path, specs_path,
                 str(start)], stdout=subprocess.PIPE, stderr=stderr, env=run.env(), cwd=work)
            # The child's start counts towards its first trial's time.
            current, deadline, pending = None, time.monotonic() + TRIAL_TIMEOUT * 2, b""
            try:
                while start < len(specs):
                    if b"\n" not in pending:
                        ready, _, _ = select.select([proc.stdout], [], [],
                                                    max(0.0, deadline - time.monotonic()))
                        chunk = os.read(proc.stdout.fileno(), 65536) if ready else None
                        if chunk is None:
                            at = current if current is not None else start
                            results[at] = {"kind": "hang", "seconds": TRIAL_TIMEOUT,
                                           "message": f"no answer in {TRIAL_TIMEOUT:g} s"}
                            start = at + 1
                            break
                        if not chunk:
                            stderr.seek(0)
                            tail = stderr.read().decode("utf-8", "replace")[-300:]
                            at = current if current is not None else start
                            results[at] = {"kind": "crash", "seconds": 0.0, "message":
                                           f"the child died (status {proc.wait()}): {tail}"}
                            start = at + 1
                            break
                        pending += chunk
                        continue
                    line, pending = pending.split(b"\n", 1)
                    line = line.decode("utf-8", "replace")
                    if line.startswith("BEGIN "):
                        current = int(line.split()[1])
                        deadline = time.monotonic() + TRIAL_TIMEOUT
                    elif line.startswith("RESULT "):
                        results[current] = json.loads(line[len("RESULT "):])
                        start, current = current + 1, None
                        deadline = time.monotonic() + TRIAL_TIMEOUT
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                proc.stdout.close()
    return results


# ------------------------------------------------------------------ outcomes
def _outcome(result, pattern, late):
    """The outcome of one trial: ``result`` {"kind", "message", "seconds"}
    of a statement whose clear message matches ``pattern``, late after
    ``late`` seconds."""
    kind, message, seconds = result["kind"], result["message"], result["seconds"]
    if kind in ("crash", "hang", "wrong error"):
        return kind
    if seconds > late:
        return "slow"
    if kind == "ok":
        return "ran"
    if not re.search(pattern, message, re.IGNORECASE):
        return "unclear error"
    if re.search(_STOPPED, message, re.IGNORECASE):
        return "stopped in time"
    return "refused clearly"


def _cli_result(status, stderr, seconds):
    lines = [line for line in stderr.splitlines() if line.startswith("Error:")]
    if status == 0:
        return {"kind": "ok", "message": "", "seconds": seconds}
    if status == 1 and len(lines) == 1 and "Traceback" not in stderr:
        return {"kind": "error", "message": lines[0], "seconds": seconds}
    return {"kind": "crash", "message": f"exit {status}: {stderr[-300:]}", "seconds": seconds}


def kind_sql_limits(run):
    """Hostile SQL through the API, the web view's SQL page and `sql`."""
    started = time.monotonic()
    work = run.dir("sql-limits")
    index_path = os.path.join(work, "ix")
    if not os.path.exists(index_path):
        build_index(index_path, run.seed)
    attached = os.path.join(work, "attached.db")
    before = _hashes(index_path)

    chosen = {}
    for statement in STATEMENTS:
        chosen.setdefault(statement[0], []).append(statement)
    rows = {}
    for group, (row_id, fault, injection) in ROWS.items():
        statements = run.subset(chosen[group], QUICK[group])
        chosen[group] = statements
        rows[group] = run.row(
            row_id, "sql-limits", fault,
            injection.format(items="; ".join(name for _, name, *_ in statements)) +
            f" (API `run_query(..., timeout={LIMIT:g})`, the web SQL page with "
            f"sql_time_limit_ms {LIMIT * 1000:g}, and `sql --timeout {LIMIT:g}`)",
            f"one error that names the function or the limit, within {LIMIT:g} + {SLACK:g} s "
            f"(CLI: + {CLI_START:g} s, and one 'Error:' line); the index unchanged",
            OK_OUTCOMES)

    trials = []
    for group, statements in chosen.items():
        for _, name, sql, pattern, paths, *budget in statements:
            sql = sql.replace("{attached}", attached)
            budget = budget[0] if budget else None
            for path in paths.split():
                trials.append((group, name, sql, pattern, path, budget))
    in_child = [t for t in trials if t[4] != "cli"]
    run.log(f"  sql-limits: {len(in_child)} statements through the API and the web view")
    results = _run_child(run, index_path, [{"path": path, "sql": sql, "max_work": budget}
                                           for _, _, sql, _, path, budget in in_child])
    for (group, name, _, pattern, path, _), result in zip(in_child, results):
        outcome = _outcome(result, pattern, LIMIT + SLACK)
        rows[group].add(outcome, f"{path}, {name}: {result['seconds']:.2f} s: "
                                 f"{result['message'][:200]}")
    # Each costs a Python start: --quick keeps one per row.
    on_cli = run.subset([t for t in trials if t[4] == "cli"], len(ROWS))
    run.log(f"  sql-limits: {len(on_cli)} statements through `sobolev-index sql`")
    for group, name, sql, pattern, _, _ in on_cli:
        try:
            status, _, stderr, seconds = run.cli(
                ["sql", index_path, sql, "--timeout", f"{LIMIT:g}"], timeout=TRIAL_TIMEOUT)
            result = _cli_result(status, stderr, seconds)
        except subprocess.TimeoutExpired:
            result = {"kind": "hang", "message": f"no exit in {TRIAL_TIMEOUT:g} s",
                      "seconds": TRIAL_TIMEOUT}
            seconds = TRIAL_TIMEOUT
        outcome = _outcome(result, pattern, LIMIT + SLACK + CLI_START)
        rows[group].add(outcome, f"cli, {name}: {seconds:.2f} s: {result['message'][:200]}")

    if _hashes(index_path) != before or os.path.exists(attached):
        rows["writes"].add("index or another file written",
                           "the index's files changed, or ATTACH made a file")
    run.finish(list(rows.values()), started)
    return list(rows.values())


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--child":
    _child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
