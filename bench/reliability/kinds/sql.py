"""SQL on an index's catalog: runaway queries stopped by their time limit
(the kind ``sql-timeout``), and hostile statements (``sql-limits``).

``sql-limits`` sends each statement through three paths to a 3,000-document
index: the API (``run_query(..., timeout=1)``) and the web view's SQL page
(Datasette's client, ``sql_time_limit_ms`` 1,000), both in a child process
(so that a statement that crashes the process costs that trial, not the
run), and the command line (``sobolev-index sql INDEX QUERY --timeout 1``).
A trial is "refused clearly" (one error, fast, that names the function or
the limit), "stopped in time" (one error saying which limit, within the
limit and SLACK), or one of the failures: "ran" (no error), "slow" (its
answer came late), "unclear error", "crash" (the process died, a traceback,
a server error) or "hang".
"""
import os
import re
import subprocess
import time

from ..harness import cli_error_lines, describe, run_cli, run_task
from ..indexes import copy_index, file_hashes

# The time limit of sql-limits (sql-timeout tries several).
LIMIT = 1.0        # seconds: --timeout, timeout=, sql_time_limit_ms
SLACK = 0.5        # seconds a refusal or a stop may come after the limit
CLI_START = 1.5    # seconds the command line adds (starting Python, opening the index)
TRIAL_TIMEOUT = 60.0
WORK_BUDGET = 1_000_000  # max_work / max_sql_work of the work-budget statements


# ============================================================== sql-timeout
SQL_QUERIES = {
    "5-way cross join (count)":
        "SELECT count(*) FROM documents a, documents b, documents c, documents d, documents e",
    "3-way cross join (rows streamed)": "SELECT a.key, b.key FROM documents a, documents b, documents c",
    "sobolev_distance over a cross join":
        "SELECT sum(sobolev_distance(a.key, b.key, 2)) FROM documents a, documents b, documents c",
    "sobolev_knn (k = 1000, p = inf) per row":
        "SELECT count(sobolev_knn(a.key, 1000, 'inf')) FROM documents a, documents b",
}


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
    if elapsed > limit + SLACK:
        return "stopped late", what
    return "one clear error in time", what


def kind_sql(run):
    """Runaway SQL queries with a time limit (API and CLI)."""
    row = run.row("sql-timeout", "sql-timeout", "Runaway SQL query",
                  "`iter_query(..., timeout=T)` and `sql --timeout T` on a 3,000-document index, "
                  "T in {timeouts} s: {queries}",
                  f"one SobolevIndexError ('ran longer than T s'; CLI: one 'Error:' line) within "
                  f"T + {SLACK} s (CLI: + {CLI_START:g} s for starting Python and opening the index)",
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
            row.add("one clear error in time" if seconds <= limit + SLACK + CLI_START
                    else "stopped late", what)
        else:
            row.add("CLI: not one clear error", f"{what}: {err[-300:]}")
    run.finish([row], started)


# ============================================================== sql-limits

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


# -------------------------------------------------------- API and web (in a child)
def _send(spec, cache):
    """Run one statement through the API or the web view's SQL page:
    {"kind": "ok", "error", "wrong error" or "crash", "message", "seconds"}."""
    import urllib.parse

    from sobolev_index import SobolevIndexError
    from sobolev_index.index.sql import run_query

    started = time.monotonic()
    try:
        if spec["path"] == "api":
            run_query(cache["reader"], spec["sql"], timeout=LIMIT,
                      **({"max_work": spec["max_work"]} if spec["max_work"] else {}))
            kind, message = "ok", ""
        else:
            ds = _site(cache, spec["max_work"])
            response = cache["loop"].run_until_complete(ds.client.get(
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
    return {"kind": kind, "message": message[:2000], "seconds": time.monotonic() - started}


def _site(cache, max_work):
    """The web view of the index (one per work budget), started once per child."""
    sites = cache.setdefault("sites", {})
    if max_work not in sites:
        from sobolev_index.web import make_datasette

        # (the keyword only when a budget is asked for: releases without
        # one can be measured too)
        ds = make_datasette(cache["path"], name="ix",
                            settings={"sql_time_limit_ms": int(LIMIT * 1000)},
                            **({"max_sql_work": max_work} if max_work else {}))
        cache["loop"].run_until_complete(ds.invoke_startup())
        sites[max_work] = ds
    return sites[max_work]


def trial_sql_limits(spec, ctx):
    """One statement through the API or the web view (task "sql-limits")."""
    import asyncio

    from sobolev_index import SobolevIndex

    cache = ctx["cache"]
    if "reader" not in cache:
        cache.update(path=ctx["index"], reader=SobolevIndex.open(ctx["index"]),
                     loop=asyncio.new_event_loop())
    result = _send(spec, cache)
    return (_outcome(result, spec["pattern"], LIMIT + SLACK),
            f"{spec['path']}, {spec['name']}: {result['seconds']:.2f} s: {result['message'][:200]}")


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
    lines = cli_error_lines(stderr)
    if status == 0:
        return {"kind": "ok", "message": "", "seconds": seconds}
    if status == 1 and len(lines) == 1 and "Traceback" not in stderr:
        return {"kind": "error", "message": lines[0], "seconds": seconds}
    return {"kind": "crash", "message": f"exit {status}: {stderr[-300:]}", "seconds": seconds}


def kind_sql_limits(run):
    """Hostile SQL through the API, the web view's SQL page and `sql`."""
    started = time.monotonic()
    work = run.dir("sql-limits")
    index_path = copy_index(run.template("sql"), os.path.join(work, "ix"))
    attached = os.path.join(work, "attached.db")
    before = file_hashes(index_path)

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
    in_child = [{"row": rows[group].id, "name": name, "sql": sql, "pattern": pattern,
                 "path": path, "max_work": budget}
                for group, name, sql, pattern, path, budget in trials if path != "cli"]
    run.log(f"  sql-limits: {len(in_child)} statements through the API and the web view")
    run_task(run, "sql-limits", in_child, list(rows.values()), {"index": index_path},
             timeout=TRIAL_TIMEOUT)
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

    if file_hashes(index_path) != before or os.path.exists(attached):
        rows["writes"].add("index or another file written",
                           "the index's files changed, or ATTACH made a file")
    run.finish(list(rows.values()), started)
