"""S_p inside SQL: functions registered on an index's catalog connection, so
that metadata and distances meet in one query.

    SELECT key, label, sobolev_distance(key, 'tweet-17') AS d
    FROM documents WHERE label = 'positive' AND deleted = 0 ORDER BY d LIMIT 10

``sobolev_distance(key_a, key_b[, p])`` is exact S_p between two stored
documents (sliced over the index's roots); ``sobolev_knn(query_key, k[, p])``
returns the query's k nearest stored documents as a JSON list of
``{"key", "distance", "label"}``, the same as :meth:`SobolevIndex.search`.
Keys that are not live give NULL.

A statement run here (:func:`iter_query`; the web view does the same on
Datasette's connections) is held to limits: only the functions of
:data:`ALLOWED_FUNCTIONS` may be called, SQLite's own limits
(:data:`SQL_LIMITS`) bound the values and the text of the statement, and the
S_p functions honour the statement's deadline and a budget of work
(:class:`StatementGuard`): SQLite's progress handler never runs while they
compute, so they look at the clock themselves.
"""
import inspect
import json
import math
import sqlite3
import sys
import time
import weakref
from collections import OrderedDict

import numpy as np
import scipy.sparse

from ..distances import check_p, difference_distance, pairwise_sobolev
from ..errors import SobolevIndexError
from ..graph import normalise_eta

__all__ = ["register_functions", "run_query", "iter_query", "FUNCTIONS", "DEFAULT_TIMEOUT",
           "DEFAULT_MAX_WORK", "ALLOWED_FUNCTIONS", "SQL_LIMITS", "MAX_VALUE_BYTES",
           "StatementGuard", "apply_limits", "sql_limits", "function_authorizer",
           "limits_message", "refused_message"]

FUNCTIONS = ("sobolev_distance", "sobolev_knn")
# Seconds a query may run before the CLI stops it (--timeout); the API has
# no limit unless one is given.
DEFAULT_TIMEOUT = 60.0
# Distances from one document to every live document are kept for as many
# (document, p) pairs as fit in this many bytes (at least MIN_COLUMNS): a
# query that pairs many keys with many others then costs about one
# Gram-matrix row per distinct key, not one distance computation per pair.
CACHE_BYTES = 256 << 20
MIN_COLUMNS = 16
# Rows of features read, and distances computed, between two looks at the
# deadline while a row of distances is made.
COLUMN_BLOCK = 65_536

# ---------------------------------------------------------- work budget
# The S_p functions of one statement may do at most this many units of work
# (max_work=None: no limit). A unit is about one stored document compared
# with a query; the charges below follow measured costs (a search has a
# fixed cost of some milliseconds, each result it returns is a JSON record,
# reading two documents' features for one distance costs about as much as
# comparing a query with a thousand documents). On a slow 2-core machine
# the default is 10 to 30 seconds of S_p work.
DEFAULT_MAX_WORK = 20_000_000
KNN_WORK = 10_000       # each sobolev_knn call, plus one per live document
RESULT_WORK = 10        # each result sobolev_knn returns (min(k, live documents))
PAIR_WORK = 1_000       # a sobolev_distance computed from the two documents
LOOKUP_WORK = 30        # a sobolev_distance read from a row of distances kept
# (a row of distances from one document to all costs one unit per live
# document when it is made)

# ------------------------------------------------------------- functions
# The functions a statement may call, by name: SQLite's core scalar,
# aggregate, window, date and time, math and JSON functions (some exist
# only in newer SQLite; naming them is harmless), the operators SQLite
# implements as functions (->, ->>), and ours. Everything else is refused
# by name, in particular load_extension, fts3_tokenizer (its result is a
# process address, and with two arguments it installs one), sqlite_log and
# the FTS and R*Tree helpers (the catalog has no full-text or R*Tree
# tables).
CORE_FUNCTIONS = frozenset("""
    abs changes char coalesce concat concat_ws format glob hex if ifnull iif instr
    last_insert_rowid length like likelihood likely lower ltrim max min nullif octet_length
    printf quote random randomblob replace round rtrim sign soundex
    sqlite_compileoption_get sqlite_compileoption_used sqlite_offset sqlite_source_id
    sqlite_version substr substring total_changes trim typeof unhex unicode unistr
    unistr_quote unlikely upper zeroblob
    avg count group_concat string_agg sum total
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value
    nth_value
    date time datetime julianday unixepoch strftime timediff current_date current_time
    current_timestamp
    acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log
    log10 log2 mod pi pow power radians sin sinh sqrt tan tanh trunc
    json jsonb json_array jsonb_array json_array_length json_error_position json_extract
    jsonb_extract json_insert jsonb_insert json_object jsonb_object json_patch jsonb_patch
    json_pretty json_quote json_remove jsonb_remove json_replace jsonb_replace json_set
    jsonb_set json_type json_valid json_group_array jsonb_group_array json_group_object
    jsonb_group_object -> ->>
""".split())
ALLOWED_FUNCTIONS = CORE_FUNCTIONS | frozenset(FUNCTIONS)
# The authorizer is told the name of each function a statement calls from
# SQLite 3.8.3 on; before, no function could be refused by name.
_NAMES_FUNCTIONS = sqlite3.sqlite_version_info >= (3, 8, 3)

# --------------------------------------------------------- SQLite's limits
# The largest string or blob a statement may make or read. SQLite allows
# 1 GB, which randomblob(1e9) fills in one call of several seconds, out of
# reach of the deadline (the progress handler runs between SQLite's steps,
# not inside a function). It also bounds a single call of SQLite's instr()
# or replace(), whose time grows with the product of their arguments'
# lengths (2.9 s for 0.8 MB and 0.2 MB on a busy 2-core machine). A stored
# value larger than this (a document whose fields hold a whole book) cannot
# be read by SQL then: raise it with max_value_bytes.
MAX_VALUE_BYTES = 1 << 20


def _limit(name):
    return getattr(sqlite3, name, None)


_LENGTH = _limit("SQLITE_LIMIT_LENGTH")
_SQL_LENGTH = _limit("SQLITE_LIMIT_SQL_LENGTH")
# SQLite's limits while a statement runs (sqlite3.Connection.setlimit,
# Python 3.11 on; without it, none is set), besides the length of a value
# (MAX_VALUE_BYTES). Each is far above what the documented queries,
# Datasette's own pages and the library's statements need (a catalog table
# has under 10 columns; the library's statements have up to 500
# parameters, which VARIABLE_NUMBER leaves alone).
SQL_LIMITS = {k: v for k, v in (
    (_SQL_LENGTH, 1 << 20),                              # bytes of statement text
    (_limit("SQLITE_LIMIT_COLUMN"), 1_000),              # columns of a result, GROUP BY, ...
    (_limit("SQLITE_LIMIT_EXPR_DEPTH"), 250),            # nesting of an expression
    (_limit("SQLITE_LIMIT_COMPOUND_SELECT"), 100),       # SELECTs joined by UNION and the like
    (_limit("SQLITE_LIMIT_FUNCTION_ARG"), 100),          # arguments of one function call
    (_limit("SQLITE_LIMIT_LIKE_PATTERN_LENGTH"), 1_000),  # bytes of a LIKE or GLOB pattern
    (_limit("SQLITE_LIMIT_ATTACHED"), 0),                # no ATTACH
) if k is not None}


def check_max_value_bytes(value, name="max_value_bytes"):
    """``value`` if it is an integer from 1 to SQLite's 1,000,000,000, else
    a ValueError."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1_000_000_000:
        return value
    raise ValueError(f"{name} is {value!r}; expected a whole number of bytes from 1 to "
                     "1,000,000,000")


def sql_limits(max_value_bytes=MAX_VALUE_BYTES):
    """{category: value} of the limits a statement runs under:
    :data:`SQL_LIMITS` and ``max_value_bytes`` for SQLITE_LIMIT_LENGTH."""
    limits = dict(SQL_LIMITS)
    if _LENGTH is not None:
        limits[_LENGTH] = max_value_bytes
    return limits


def apply_limits(conn, limits=None):
    """Set SQLite's limits ``limits`` (default :func:`sql_limits`;
    {category: value}) on the sqlite3 connection ``conn``. Returns the
    values they replace, to be given back to undo it ({} where Python
    cannot set limits, before 3.11)."""
    setlimit = getattr(conn, "setlimit", None)
    if setlimit is None:
        return {}
    limits = sql_limits() if limits is None else limits
    return {category: setlimit(category, value) for category, value in limits.items()}


def limits_message(message, max_value_bytes=MAX_VALUE_BYTES, hint=None):
    """SQLite's message of a statement stopped by one of the limits, with
    the limit named (``hint``: how to raise the length of a value); other
    messages as they are."""
    if "string or blob too big" in message:
        hint = hint or "pass a larger max_value_bytes (--max-value-bytes BYTES)"
        return (f"{message}: a value in a query here may have at most {max_value_bytes:,} "
                f"bytes; {hint}")
    if "query string is too large" in message or "statement too long" in message:
        return (f"{message}: a statement here may have at most "
                f"{SQL_LIMITS.get(_SQL_LENGTH, 1_000_000_000):,} bytes")
    return message


def function_authorizer(allowed, refused, actions=None):
    """An authorizer (sqlite3.Connection.set_authorizer) that lets a
    statement call only the functions named in ``allowed`` (lowercase) and
    appends the name of each other one to ``refused``. ``actions``: the
    other actions allowed (None: all but ATTACH and DETACH)."""
    function = sqlite3.SQLITE_FUNCTION
    ok, deny = sqlite3.SQLITE_OK, sqlite3.SQLITE_DENY
    barred = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH}

    def authorize(action, arg1, arg2, db_name, source):
        if action == function:
            if arg2 is not None and arg2.lower() in allowed:
                return ok
            refused.append(arg2)
            return deny
        if actions is None:
            return deny if action in barred else ok
        return ok if action in actions else deny
    return authorize


def refused_message(name):
    """What a statement that called the function ``name`` (not allowed) is told."""
    return (f"function {name} is not allowed in read-only queries (allowed: SQLite's core, "
            f"date, math and JSON functions and {', '.join(FUNCTIONS)})")


class StatementGuard:
    """The limits of the statement running on one connection, which the S_p
    functions registered there honour: a deadline and a budget of work
    units (see DEFAULT_MAX_WORK). Each call looks at the clock first, and
    is charged its work before it starts; one that would pass either
    limit raises a SobolevIndexError saying which, and how to raise it.

    :meth:`start` when a statement starts, :meth:`pause` and
    :meth:`resume` around the stretches where it runs (its rows may be
    fetched later), :meth:`finish` when it is done. Outside a statement
    the functions run without limits (a caller's own connection). Also
    keeps the errors the functions raised, newest last (``errors``), and
    the names of the functions an authorizer refused (``refused``).

    ``reports_errors``: whether whoever runs the statements reads
    ``errors`` to report a failed call (:func:`iter_query`, the web view);
    see :meth:`fail_call`."""

    def __init__(self, reports_errors=True):
        self.reports_errors = reports_errors
        self.errors = []
        self.refused = []
        self.active = False
        self.deadline = None
        self.max_work = None
        self.work = 0
        # The message of the limit that stopped a function, or None.
        self.stopped = None
        self.time_message = self._work_hint = ""

    def start(self, timeout=None, max_work=DEFAULT_MAX_WORK, time_message=None,
              work_hint=None):
        """A statement starts now: it may run ``timeout`` seconds (None: no
        limit) and its S_p functions do ``max_work`` units (None: no
        limit). ``time_message`` and ``work_hint``: what to say when they
        are reached (the setting that raises the limit)."""
        self.errors.clear()
        self.refused.clear()
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.max_work = max_work
        self.work = 0
        self.stopped = None
        self.time_message = time_message or (
            f"the SQL query ran longer than {timeout:g} s and was stopped; pass a larger "
            "timeout (--timeout SECONDS)" if timeout is not None else "")
        self._work_hint = work_hint or "pass a larger max_work (--max-work UNITS)"
        self.active = True

    def pause(self):
        self.active = False

    def resume(self):
        self.active = True

    def finish(self):
        """The statement is done: no limits, and nothing of it kept (its
        errors' tracebacks would keep their frames alive)."""
        self.active = False
        self.deadline = None
        self.errors.clear()
        self.refused.clear()

    def past_deadline(self):
        """Whether the statement has run past its deadline (a progress
        handler: a true result interrupts it)."""
        return self.deadline is not None and time.monotonic() > self.deadline

    def check_time(self):
        """Raise once the running statement is past its deadline."""
        if self.active and self.past_deadline():
            self.stopped = self.time_message
            raise SobolevIndexError(self.stopped)

    def fail_call(self, exc):
        """Keep ``exc``, the exception an S_p function raised, in
        ``errors``, and raise it (SQLite then fails the statement with
        "user-defined function raised exception"). Where the statement's
        runner reports ``errors`` (``reports_errors``, inside a statement),
        the exception is marked so that it is not also printed as an
        unraisable exception: sqlite3 hands an exception raised in a
        callback to ``sys.unraisablehook`` wherever callback tracebacks
        are on, and Datasette turns them on for the whole process."""
        self.errors.append(exc)
        if self.active and self.reports_errors:
            try:
                exc.sobolev_index_reported = True
            except AttributeError:  # an exception type without attributes: printed
                pass
            _filter_unraisable()
        raise exc

    def charge(self, units, what):
        """Count ``units`` of work for ``what`` (a call); raise, before it is
        done, when the statement's budget cannot pay them."""
        if not self.active or self.max_work is None:
            return
        if self.work + units > self.max_work:
            self.stopped = (
                f"the S_p functions of this SQL query reached its work limit of "
                f"{self.max_work:,} units ({what} needs {units:,} more after "
                f"{self.work:,}; sobolev_knn costs about one unit per live document) and "
                f"were stopped; {self._work_hint}")
            raise SobolevIndexError(self.stopped)
        self.work += units


def _unraisable_filter(previous):
    # Exceptions of S_p functions whose statement's runner reports them
    # (StatementGuard.fail_call marks them) are not printed a second time.
    def hook(unraisable):
        if getattr(unraisable.exc_value, "sobolev_index_reported", False):
            return
        previous(unraisable)
    hook.sobolev_index_filter = True
    return hook


def _filter_unraisable():
    """Put the filter of reported exceptions in front of whatever
    ``sys.unraisablehook`` is now (a test runner may have replaced it)."""
    if not getattr(sys.unraisablehook, "sobolev_index_filter", False):
        sys.unraisablehook = _unraisable_filter(sys.unraisablehook)


def check_max_work(max_work, name="max_work"):
    """``max_work`` if it is None or an integer >= 1, else a ValueError."""
    if max_work is None or (isinstance(max_work, int) and not isinstance(max_work, bool)
                            and max_work >= 1):
        return max_work
    raise ValueError(f"{name} is {max_work!r}; expected a whole number of work units >= 1, "
                     "or None for no limit")


def p_of(value):
    """The order p given as an SQL value or a command's text: None (the
    index's own), a number, or 'inf' in any case; else a ValueError naming
    it. The range is checked where p is used."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"p is {value!r}; expected a number >= 1 or 'inf'") from None


def register_functions(index, db=None, guard=None):
    """Register the S_p functions on ``db`` (a sqlite-utils Database; by
    default the index's own catalog connection). ``guard``: the
    :class:`StatementGuard` whose limits they honour (default: one per
    ``db``, which :func:`iter_query` uses)."""
    db = db if db is not None else index.catalog.db
    guard = guard if guard is not None else _guard_of(db)

    def guarded(fn):
        # The guard keeps an error so that the statement's runner can say
        # what was wrong (StatementGuard.fail_call).
        def wrapped(*args):
            try:
                # One call can take long (a k-NN search over every row):
                # the progress handler alone would let the query overrun.
                guard.check_time()
                return fn(*args)
            except Exception as exc:
                guard.fail_call(exc)  # raises
        wrapped.__signature__ = inspect.signature(fn)
        return wrapped

    columns = _columns_of(index)

    def distance(key_a, key_b, p=None):
        if key_a not in index or key_b not in index:
            return None
        return columns.distance(str(key_a), str(key_b), p_of(p), guard)

    def knn(query_key, k, p=None):
        if query_key not in index:
            return None
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"sobolev_knn: k is {k!r}; expected an integer >= 1")
        p = p_of(p)
        # The search cannot be stopped once started: it is paid for first.
        n = len(index)
        guard.charge(KNN_WORK + n + RESULT_WORK * min(k, n), "this sobolev_knn call")
        found = index.search(str(query_key), k=int(k), p=p)
        return json.dumps(found.to_records()[0])

    # sqlite-utils takes the SQL arity from the Python signature, so each
    # optional argument gets its own registration.
    def sobolev_distance_2(key_a, key_b):
        return distance(key_a, key_b)

    def sobolev_distance_3(key_a, key_b, p):
        return distance(key_a, key_b, p)

    def sobolev_knn_2(query_key, k):
        return knn(query_key, k)

    def sobolev_knn_3(query_key, k, p):
        return knn(query_key, k, p)

    for fn, name in ((sobolev_distance_2, "sobolev_distance"), (sobolev_distance_3, "sobolev_distance"),
                     (sobolev_knn_2, "sobolev_knn"), (sobolev_knn_3, "sobolev_knn")):
        db.register_function(guarded(fn), deterministic=True, replace=True, name=name)
    return db


class _Columns:
    """S_p between stored documents for the SQL function, per index and kept
    across queries until the index changes (its ``generation``).

    A pair is computed from the two documents' feature rows (kept for the
    most recent keys). A second key asked for again gets its distances to
    every live document computed at once (a Gram-matrix row), kept while
    they fit in CACHE_BYTES; past that, pairs are computed one by one (rows
    are never evicted, so they are never computed twice). A query that pairs
    many keys with the same others then costs one row per key, and one whose
    keys do not repeat costs one pair each."""

    ROWS = 20_000

    def __init__(self, index):
        self.index = index
        self.generation = None

    def _reset(self):
        self.generation = self.index.generation
        self.rows = OrderedDict()
        self.columns = {}
        self.asked = set()
        self.all_features = None

    def _row(self, key):
        row = self.rows.get(key)
        if row is None:
            index = self.index
            row = [index.features([key], root=r) for r in range(len(index.roots))]
            self.rows[key] = row
            if len(self.rows) > self.ROWS:
                self.rows.popitem(last=False)
        else:
            self.rows.move_to_end(key)
        return row

    def _features(self, guard):
        """Every live document's features per root, read COLUMN_BLOCK rows
        at a time (with a look at the deadline before each block)."""
        index = self.index
        keys = list(index)
        blocks = []
        for start in range(0, len(keys), COLUMN_BLOCK):
            guard.check_time()
            blocks.append([index.features(keys[start:start + COLUMN_BLOCK], root=r)
                           for r in range(len(index.roots))])
        if len(blocks) == 1:
            features = blocks[0]
        else:
            features = [scipy.sparse.vstack([b[r] for b in blocks], format="csr")
                        for r in range(len(index.roots))]
        self.keys = keys
        self.position = {k: i for i, k in enumerate(keys)}
        self.all_features = features
        self.max_columns = max(MIN_COLUMNS, CACHE_BYTES // (8 * max(1, len(keys))))

    def _column(self, key, p, guard):
        """The distances from ``key`` to every live document, kept; None
        when no more rows fit."""
        index = self.index
        if self.all_features is None:
            self._features(guard)
        if len(self.columns) >= self.max_columns:
            return None
        guard.charge(len(self.keys), "a row of sobolev_distance values")
        at = self.position[key]
        query = [F[at:at + 1] for F in self.all_features]
        parts = []
        for start in range(0, len(self.keys), COLUMN_BLOCK):
            guard.check_time()
            block = [F[start:start + COLUMN_BLOCK] for F in self.all_features]
            parts.append(pairwise_sobolev(query, block, trees=index.trees, p=p,
                                          eta=index.eta)[0])
        column = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self.columns[(key, p)] = column
        return column

    def distance(self, key_a, key_b, p, guard):
        """S_p between two live keys, its work charged to ``guard``."""
        index = self.index
        if self.generation != index.generation:
            self._reset()
        p = index.p if p is None else check_p(p)
        column = self.columns.get((key_b, p))
        if column is None and (key_b, p) in self.asked:
            column = self._column(key_b, p, guard)
        if column is not None:
            guard.charge(LOOKUP_WORK, "this sobolev_distance call")
            return float(column[self.position[key_a]])
        guard.charge(PAIR_WORK, "this sobolev_distance call")
        self.asked.add((key_b, p))
        return difference_distance(self._row(key_a), self._row(key_b), index.trees, p,
                                   normalise_eta(index.eta, len(index.trees)))


# One per index, kept while the index is alive (the functions are registered
# again for every query, the cache outlives them).
_COLUMNS = weakref.WeakKeyDictionary()


def _columns_of(index):
    columns = _COLUMNS.get(index)
    if columns is None:
        columns = _COLUMNS[index] = _Columns(index)
    return columns


# Per Database: the guard of the statement running on it (iter_query's).
_GUARDS = weakref.WeakKeyDictionary()
# SQLite steps between two checks of the deadline.
PROGRESS_STEPS = 1_000


def _guard_of(db):
    guard = _GUARDS.get(db)
    if guard is None:
        guard = _GUARDS[db] = StatementGuard()
    return guard


# Reads, and calls of the allowed functions, are all a query may do: a
# read-only connection would still let ATTACH open (and write) another
# database.
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}


def _allow_all(action, *args):
    return sqlite3.SQLITE_OK


# What removes the authorizer: None from Python 3.11 on; before, None is
# taken as a callback that fails, which denies every later statement, so
# one that allows everything stands in.
_NO_AUTHORIZER = None if sys.version_info >= (3, 11) else _allow_all


def run_query(index, query, params=None, timeout=None, max_work=DEFAULT_MAX_WORK,
              max_value_bytes=MAX_VALUE_BYTES):
    """Run one SQL statement on a read-only view of the index's catalog with
    the S_p functions registered. Returns (column names, rows as tuples).
    See :func:`iter_query` for the limits, and to stream the rows."""
    columns, rows = iter_query(index, query, params, timeout, max_work, max_value_bytes)
    return columns, list(rows)


def iter_query(index, query, params=None, timeout=None, max_work=DEFAULT_MAX_WORK,
               max_value_bytes=MAX_VALUE_BYTES):
    """Like :func:`run_query`, but the rows come one at a time as the
    caller iterates, so a large result is never held whole.

    Limits, each reached with a SobolevIndexError that says which: a query
    (the iteration included) that runs longer than ``timeout`` seconds
    (None: no limit) is stopped, the S_p functions among them; the S_p
    functions of the statement may do ``max_work`` units of work (see
    DEFAULT_MAX_WORK; None: no limit); only the functions of
    ALLOWED_FUNCTIONS may be called; and SQLite's limits SQL_LIMITS hold
    while it runs, and a string or blob of more than ``max_value_bytes``
    bytes, stored or made, fails at once. None of these is left on the
    connection between rows."""
    if index.writable:
        raise SobolevIndexError("run SQL on an index opened with mode='r'; it must not write")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout is {timeout!r}; expected a number of seconds > 0, or None")
    check_max_work(max_work)
    check_max_value_bytes(max_value_bytes)
    if not _NAMES_FUNCTIONS:
        raise SobolevIndexError(
            f"SQLite {sqlite3.sqlite_version} cannot tell which functions a query calls "
            "(3.8.3 and later can), so no query is run; use a Python built with a newer SQLite")
    db = register_functions(index)
    guard = _guard_of(db)
    conn = db.conn
    authorize = function_authorizer(ALLOWED_FUNCTIONS, guard.refused, _ALLOWED)

    def fail(exc):
        if guard.past_deadline():
            return SobolevIndexError(guard.time_message)
        if guard.stopped is not None:
            return SobolevIndexError(guard.stopped)
        if guard.errors:
            return SobolevIndexError(f"SQL error in a sobolev function: {guard.errors[-1]}")
        message = str(exc)
        if guard.refused and "not authorized" in message:
            return SobolevIndexError(f"SQL error: {refused_message(guard.refused[-1])}")
        if "not authorized" in message or "readonly" in message:
            message += " (sobolev-index sql is read-only: SELECT statements only)"
        return SobolevIndexError(f"SQL error: {limits_message(message, max_value_bytes)}")

    def limited():
        # The authorizer acts while the statement is prepared; the progress
        # handler (called every few thousand SQLite steps; a true result
        # interrupts the query) and the limits while it runs.
        conn.set_progress_handler(guard.past_deadline, PROGRESS_STEPS)
        guard.resume()
        return apply_limits(conn, limits)

    def unlimited(before):
        apply_limits(conn, before)
        conn.set_progress_handler(None, 0)
        guard.pause()

    limits = sql_limits(max_value_bytes)
    guard.start(timeout, max_work)
    conn.set_authorizer(authorize)
    before = limited()
    try:
        cursor = db.execute(query, params or [])
    except sqlite3.Error as exc:
        error = fail(exc)
        guard.finish()
        raise error from None
    finally:
        conn.set_authorizer(_NO_AUTHORIZER)
        unlimited(before)
    columns = [c[0] for c in cursor.description] if cursor.description else []

    def rows():
        try:
            while True:
                before = limited()
                try:
                    batch = cursor.fetchmany(1000)
                except sqlite3.Error as exc:
                    raise fail(exc) from None
                finally:
                    unlimited(before)
                if not batch:
                    return
                yield from batch
        finally:
            guard.finish()

    return columns, rows()
