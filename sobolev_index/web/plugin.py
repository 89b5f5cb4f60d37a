"""The Datasette plugin: S_p functions in SQL, and search and document
pages for every sobolev-index catalog that Datasette serves.

Installed with the ``[web]`` extra, Datasette finds this module through the
``datasette`` entry point; :func:`register` registers it by hand (as
``sobolev-index serve`` does). A database is served as an index when its
file is an index's catalog (``INDEX/catalog.sqlite``); Datasette's other
databases are left alone. Per index, at the database's route:

- ``/DB/-/search?q=TEXT&k=10&p=1`` (``.json`` for programs): the k nearest
  documents of a text; for a point index, POST a JSON-lines point-set file
  (form field ``points``, or the request body itself).
- ``/DB/-/document?key=KEY&k=10&p=1`` (``.json``): a stored document, its k
  nearest other documents (``SobolevIndex.neighbours``) and, for the first
  ``pages.EXPLAINED`` of them, which subtrees and words carry the distance
  (``SobolevIndex.explain``); the others link to
- ``/DB/-/explain?a=KEY&b=KEY&p=1`` (``.json``): that explanation for one pair.
- in any SQL query on the catalog: ``sobolev_distance(a, b[, p])`` and
  ``sobolev_knn(key, k[, p])`` (``index.sql``), reported with their own
  error messages.

SQL on a catalog is held to the limits of ``sobolev-index sql``
(``index.sql``): only SQLite's core, date, math and JSON functions, ours
and Datasette's ``escape_fts`` may be called (plus the plugin setting
``allow_sql_functions``), no ATTACH, SQLite's limits (``SQL_LIMITS``; a
value may have at most ``max_sql_value_bytes`` bytes), and the S_p
functions stop at the statement's time limit (``sql_time_limit_ms``, or
the smaller one Datasette gives a facet) and after ``max_sql_work`` units
of work. Plugin settings, in Datasette's metadata
(``{"plugins": {"sobolev_index": {...}}}``), per database or for all:
``max_sql_work`` (default ``index.sql.DEFAULT_MAX_WORK``; null: no limit),
``max_sql_value_bytes`` (default ``index.sql.MAX_VALUE_BYTES``) and
``allow_sql_functions`` (a list of names, for functions other plugins
register).

The plugin only reads: the index is opened with mode "r", every request
runs on one snapshot of it (the latest commit when the request starts),
and the snapshot is let go while no request is in flight
(``state.ServedIndex``, ``state.RequestGate``). The rows a SQL query reads
are SQLite's latest commit when the statement runs, which a writer may
have moved past the functions' snapshot: a key added since then gives
NULL, as a key that is not live does.
"""
import asyncio
import contextvars
import html
import inspect
import json
import os
import sqlite3
import threading
import weakref
from email.parser import BytesParser
from email.policy import HTTP
from urllib.parse import quote

import sqlite_utils
from datasette import hookimpl
from datasette.database import Database
from datasette.utils import tilde_decode
from datasette.utils.asgi import Response

from ..errors import NotAnIndexError, SobolevIndexError
from ..index.sql import (
    ALLOWED_FUNCTIONS,
    DEFAULT_MAX_WORK,
    MAX_VALUE_BYTES,
    StatementGuard,
    apply_limits,
    check_max_value_bytes,
    check_max_work,
    function_authorizer,
    limits_message,
    refused_message,
    register_functions,
    sql_limits,
)
from . import pages, templates
from .pages import MAX_K, WebInputError, json_value, parse_k, parse_p
from .state import IndexUnavailableError, ServedIndex, index_of_catalog

__all__ = ["register", "served_index", "CatalogDatabase", "PLUGIN_NAME"]

PLUGIN_NAME = "sobolev_index"

# Per Datasette instance: {database name: ServedIndex, or None for a
# database that is not an index's catalog}. Opened at startup, or at first
# use for a database added later.
_SERVED = weakref.WeakKeyDictionary()
_OPENING = threading.Lock()
_TEMPLATES = weakref.WeakKeyDictionary()

_POINT_KINDS = ("clouds", "diagrams")
# What SQLite says when a function raised; CatalogDatabase puts ours instead.
_FUNCTION_FAILED = "user-defined function raised exception"
# Bytes a multipart form may add around its point-set file.
_FORM_SLACK = 64 << 10
# Functions Datasette registers on every connection and its pages call
# (escape_fts, for a table's full-text search).
DATASETTE_FUNCTIONS = frozenset({"escape_fts"})
# The time limit (ms) of the statement Database.execute is running in this
# task: Datasette's sql_time_limit_ms, or the smaller one it gives a facet.
_TIME_LIMIT_MS = contextvars.ContextVar("sobolev_time_limit_ms", default=None)


def register():
    """Register this module with Datasette's plugin manager (once; a no-op
    when the entry point has loaded it already)."""
    import sys

    from datasette.plugins import pm

    module = sys.modules[__name__]
    if not pm.is_registered(module):
        pm.register(module, name=PLUGIN_NAME)
    return module


class CatalogDatabase(Database):
    """Datasette's database for an index's catalog.

    Its connections are made like the library's readers'
    (``Catalog(path, readonly=True)``: ``mode=ro``, or ``immutable`` when the
    directory cannot take the -shm file SQLite needs and no log is
    pending), read-only even when Datasette asks for a writer; with
    ``is_mutable=False`` (``serve --immutable``) they are ``immutable``. An
    error raised in an S_p function is reported with its own message, not
    SQLite's "user-defined function raised exception", and so are a
    function refused by name and a value over the length limit. Each
    statement starts its connection's :class:`StatementGuard` with its
    time limit and the plugin's ``max_sql_work``.
    """

    def __init__(self, ds, path, is_mutable=True):
        super().__init__(ds, path=path, is_mutable=is_mutable)
        # The StatementGuard of each connection (its S_p functions' limits
        # and errors): connections are per thread, so a query sees only
        # its own.
        self.guards = {}
        # This thread's (connection, epoch of the index it was made for).
        self._local = threading.local()

    def connect(self, write=False):
        if not self.is_mutable:
            return super().connect(write=False)
        from ..index.catalog import Catalog

        conn = Catalog(os.path.dirname(self.path), readonly=True).conn
        self._all_file_connections.append(conn)
        return conn

    def guard_of(self, conn):
        """The :class:`StatementGuard` of the connection ``conn``."""
        guard = self.guards.get(id(conn))
        if guard is None:
            guard = self.guards[id(conn)] = StatementGuard()
        return guard

    def _connection(self):
        """This thread's connection, made again when the index was opened
        again (another catalog file moved into place): an old one reads the
        old file, and its functions the old index."""
        served = served_index(self.ds, self.name)
        epoch = served.epoch if served is not None else 0
        held = getattr(self._local, "held", None)
        if held is not None and held[1] == epoch:
            return held[0]
        if held is not None:
            self._local.held = None
            self.guards.pop(id(held[0]), None)
            if held[0] in self._all_file_connections:
                self._all_file_connections.remove(held[0])
            held[0].close()
        conn = self.connect()
        self.ds._prepare_connection(conn, self.name)
        self._local.held = (conn, epoch)
        return conn

    async def execute(self, sql, params=None, truncate=False, custom_time_limit=None,
                      **kwargs):
        # Datasette's time limit for this statement, as it computes it, for
        # the S_p functions (execute_fn runs it).
        limit = self.ds.sql_time_limit_ms
        if custom_time_limit and custom_time_limit < limit:
            limit = custom_time_limit
        token = _TIME_LIMIT_MS.set(limit)
        try:
            return await super().execute(sql, params=params, truncate=truncate,
                                         custom_time_limit=custom_time_limit, **kwargs)
        finally:
            _TIME_LIMIT_MS.reset(token)

    async def execute_fn(self, fn):
        # As Datasette's own (one connection per thread of its executor),
        # with connections made again for a reopened index, the S_p
        # functions held to the statement's limits, and their errors (and
        # the limits') put in place of SQLite's message.
        limit_ms = _TIME_LIMIT_MS.get()
        if limit_ms is None:
            limit_ms = self.ds.sql_time_limit_ms
        settings = sql_settings(self.ds, self.name)

        def in_thread():
            conn = self._connection()
            guard = self.guard_of(conn)
            guard.start(
                timeout=limit_ms / 1000 if limit_ms else None, max_work=settings["max_sql_work"],
                time_message=(f"the SQL query ran longer than its time limit ({limit_ms:,} ms) "
                              "and was stopped in an S_p function; the server's "
                              "sql_time_limit_ms setting sets the limit"),
                work_hint="the limit is the sobolev_index plugin setting max_sql_work")
            try:
                return fn(conn)
            except sqlite3.DatabaseError as exc:
                error = _explained(exc, guard, settings)
                if error is exc:
                    raise
            finally:
                guard.finish()
            # Raised outside the handler, so that it does not hold SQLite's
            # exception, whose traceback holds Datasette's cursor: freed
            # later by the garbage collector in another thread, a cursor
            # takes its connection's mutex.
            raise error

        if self.ds.executor is None:
            return in_thread()
        return await asyncio.get_running_loop().run_in_executor(self.ds.executor, in_thread)


def _explained(exc, guard, settings):
    """The error to report for ``exc``, raised by a statement on a
    catalog connection: the S_p functions' own, or SQLite's with the
    function it refused or the limit it reached named."""
    message = str(exc)
    if message == _FUNCTION_FAILED and guard.stopped is not None:
        return sqlite3.OperationalError(guard.stopped)
    if message == _FUNCTION_FAILED and guard.errors:
        return sqlite3.OperationalError(f"SQL error in a sobolev function: {guard.errors[-1]}")
    if "not authorized" in message and guard.refused:
        return sqlite3.OperationalError(refused_message(guard.refused[-1]))
    explained = limits_message(
        message, settings["max_sql_value_bytes"],
        hint="the limit is the sobolev_index plugin setting max_sql_value_bytes")
    if explained != message:
        return type(exc)(explained)
    return exc


def sql_settings(datasette, database):
    """The plugin's SQL settings for ``database``: {"max_sql_work",
    "max_sql_value_bytes", "allow_sql_functions"}, defaults filled in. A
    bad value raises a SobolevIndexError naming the setting."""
    config = datasette.plugin_config(PLUGIN_NAME, database=database) or {}
    if not isinstance(config, dict):
        raise SobolevIndexError(f"the {PLUGIN_NAME} plugin's settings are {config!r}; "
                                "expected an object of settings")
    try:
        work = check_max_work(config.get("max_sql_work", DEFAULT_MAX_WORK), "max_sql_work")
        value = check_max_value_bytes(config.get("max_sql_value_bytes", MAX_VALUE_BYTES),
                                      "max_sql_value_bytes")
    except ValueError as exc:
        raise SobolevIndexError(f"the {PLUGIN_NAME} plugin setting {exc}") from None
    names = config.get("allow_sql_functions", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise SobolevIndexError(f"the {PLUGIN_NAME} plugin setting allow_sql_functions is "
                                f"{names!r}; expected a list of function names")
    return {"max_sql_work": work, "max_sql_value_bytes": value,
            "allow_sql_functions": frozenset(n.lower() for n in names)}


def catalog_database(ds, path, immutable=False):
    """A :class:`CatalogDatabase` of the catalog file ``path`` for ``ds``."""
    return CatalogDatabase(ds, os.path.abspath(path), is_mutable=not immutable)


def served_index(datasette, database):
    """The :class:`ServedIndex` of ``database`` (a name), or None when that
    database is not a sobolev-index catalog. An index that fails to open
    for another reason (damaged, or caught in the middle of a writer's
    change) raises that error and is tried again at the next request."""
    try:
        db = datasette.get_database(database)
    except KeyError:
        return None
    path = index_of_catalog(getattr(db, "path", None))
    if path is None:
        return None
    with _OPENING:
        table = _SERVED.setdefault(datasette, {})
        if database not in table:
            try:
                table[database] = ServedIndex(path, immutable=not db.is_mutable)
            except NotAnIndexError:
                table[database] = None  # a file named like a catalog, not an index
        return table[database]


def _all_served(datasette):
    with _OPENING:
        return [s for s in _SERVED.get(datasette, {}).values() if s is not None]


# ------------------------------------------------------------------- hooks
@hookimpl
def startup(datasette):
    # Catalogs Datasette was given as plain files get the connections of
    # CatalogDatabase, and are opened now, so that every request passes
    # through their gates (asgi_wrapper).
    for name, db in list(datasette.databases.items()):
        if index_of_catalog(getattr(db, "path", None)) is None:
            continue
        sql_settings(datasette, name)  # a bad setting stops the server here
        if not isinstance(db, CatalogDatabase):
            datasette.remove_database(name)
            datasette.add_database(catalog_database(datasette, db.path,
                                                   immutable=not db.is_mutable),
                                   name=name, route=db.route)
            db.close()
        try:
            served_index(datasette, name)
        except SobolevIndexError:
            pass  # said again, to the request that needs it


@hookimpl
def prepare_connection(conn, database, datasette):
    served = served_index(datasette, database)
    if served is None:
        return
    db = datasette.get_database(database)
    # A connection made before startup() put a CatalogDatabase in place has
    # a guard that is never started: its functions run unlimited, and
    # SQLite's limits and the list of functions hold all the same.
    guard = db.guard_of(conn) if isinstance(db, CatalogDatabase) else StatementGuard()
    settings = sql_settings(datasette, database)
    apply_limits(conn, sql_limits(settings["max_sql_value_bytes"]))
    allowed = ALLOWED_FUNCTIONS | DATASETTE_FUNCTIONS | settings["allow_sql_functions"]
    conn.set_authorizer(function_authorizer(allowed, guard.refused))
    # execute_plugins=False: sqlite-utils plugins (ours among them) must not
    # prepare Datasette's connection a second time.
    wrapped = sqlite_utils.Database(conn, execute_plugins=False)
    register_functions(served.index, _Locking(wrapped, served, guard), guard)


class _Locking:
    """The sqlite-utils Database the S_p functions are registered on, each
    function wrapped so that one call holds the index's lock from start to
    end (and the snapshot does not move during a request: RequestGate).

    A call waits for the lock in steps of LOCK_POLL seconds and gives up
    at its statement's deadline (``guard``): meanwhile its thread holds the
    connection's SQLite mutex, which the thread holding the index may be
    waiting for (its garbage collection freeing a cursor of this
    connection), so an unbounded wait could deadlock the two."""

    LOCK_POLL = 0.05

    def __init__(self, db, served, guard):
        self._db, self._served, self._guard = db, served, guard

    def register_function(self, fn, **kwargs):
        served, guard, poll = self._served, self._guard, self.LOCK_POLL

        def locked(*args):
            while not served.lock.acquire(timeout=poll):
                try:
                    guard.check_time()
                except Exception as exc:
                    guard.fail_call(exc)  # raises
            try:
                return fn(*args)
            finally:
                served.lock.release()
        locked.__signature__ = inspect.signature(fn)
        return self._db.register_function(locked, **kwargs)


@hookimpl
def register_routes():
    return [
        (r"^/(?P<database>[^/]+)/-/search(\.(?P<format>json))?$", search_view),
        (r"^/(?P<database>[^/]+)/-/document(\.(?P<format>json))?$", document_view),
        (r"^/(?P<database>[^/]+)/-/explain(\.(?P<format>json))?$", explain_view),
    ]


@hookimpl
def asgi_wrapper(datasette):
    # Every request (Datasette's own SQL and table pages included) runs on
    # one snapshot of each index, the latest commit when it starts, and the
    # snapshot is let go when no request is in flight (state.RequestGate).
    def wrap(app):
        async def gated(scope, receive, send):
            if scope.get("type") != "http":
                return await app(scope, receive, send)
            gates = [s.gate for s in _all_served(datasette) if not s.immutable]
            entered = []
            try:
                for gate in gates:
                    await gate.enter()
                    entered.append(gate)
            except IndexUnavailableError as exc:
                for gate in entered:
                    await gate.exit()
                return await _unavailable(scope, send, exc)
            try:
                await app(scope, receive, send)
            finally:
                for gate in entered:
                    await gate.exit()
        return gated
    return wrap


async def _unavailable(scope, send, message):
    response = _error_response(message, scope.get("path", "").endswith(".json"))
    await response.asgi_send(send)


@hookimpl
def database_actions(datasette, database):
    try:
        served = served_index(datasette, database)
    except SobolevIndexError:
        return []
    if served is None:
        return []
    return [{"href": _url(datasette, database, "search"), "label": "Search this index"}]


# ------------------------------------------------------------------- views
def _url(datasette, database, page, **params):
    base = datasette.urls.database(database) + f"/-/{page}"
    query = "&".join(f"{name}={quote(str(value), safe='')}" for name, value in params.items()
                     if value is not None and value != "")
    return base + ("?" + query if query else "")


def _json(data, status=200):
    return Response(json.dumps(json_value(data), ensure_ascii=False, allow_nan=False),
                    status=status, content_type="application/json; charset=utf-8")


def _json_page(database, page, error, status):
    """A page's JSON: its data, or the error that stopped it."""
    if error is not None:
        return _json({"ok": False, "error": error, "status": status}, status=status)
    return _json({"ok": True, "database": database, **page})


def _template(datasette, source):
    compiled = _TEMPLATES.setdefault(datasette, {})
    if source not in compiled:
        compiled[source] = datasette.jinja_env.from_string(source)
    return compiled[source]


async def _run(served, work):
    """``work(index)`` on one current snapshot, off the event loop."""
    def call():
        with served.snapshot() as index:
            return work(index)
    return await asyncio.get_running_loop().run_in_executor(None, call)


def _database_of(datasette, request):
    """(database name, ServedIndex or None); an index that cannot be opened
    now raises IndexUnavailableError."""
    route = tilde_decode(request.url_vars["database"])
    try:
        name = datasette.get_database(route=route).name
    except KeyError:
        return None, None
    try:
        return name, served_index(datasette, name)
    except SobolevIndexError as exc:
        raise IndexUnavailableError(str(exc)) from None


def _served_or_refusal(datasette, request, as_json):
    """(database name, ServedIndex, None) for a page of a served index, or
    (None, None, the response saying why not): an index that cannot be
    opened now, or a database that is not an index."""
    try:
        database, served = _database_of(datasette, request)
    except IndexUnavailableError as exc:
        return None, None, _error_response(exc, as_json)
    if served is None:
        return None, None, _not_an_index(datasette, request, as_json)
    return database, served, None


def _not_an_index(datasette, request, as_json):
    route = tilde_decode(request.url_vars["database"])
    message = f"{route!r} is not a sobolev-index catalog served here"
    if as_json:
        return _json({"ok": False, "error": message, "status": 404}, status=404)
    return Response.html(f"<p>{html.escape(message)}</p>", status=404)


async def _read_body(request, limit):
    """The request's body, refused with a WebInputError past ``limit``
    bytes: by its Content-Length before anything is read, else as it
    streams in."""
    expected = f"expected at most {limit:,}"
    length = request.headers.get("content-length", "")
    if length.strip().isdigit() and int(length) > limit:
        raise WebInputError(f"the upload has {int(length):,} bytes; {expected}", status=413)
    chunks, size = [], 0
    while True:
        message = await request.receive()
        if message.get("type") != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise WebInputError(f"the upload has more than {limit:,} bytes; {expected}",
                                status=413)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _upload_of(request):
    """(file name, bytes) of a point-set upload: the ``points`` field of a
    multipart form, or a POST body of another type; None for a GET. Also
    returns the form's other fields (k, p)."""
    if request.method != "POST":
        return None, {}
    body = await _read_body(request, pages.MAX_UPLOAD + _FORM_SLACK)
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        return ("upload.jsonl", body), {}
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    upload, fields = None, {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        if name == "points":
            upload = (part.get_filename() or "upload.jsonl", data)
        elif name:
            fields[name] = data.decode("utf-8", "replace")
    if upload is None or not upload[1].strip():
        raise WebInputError("the form has no point-set file; choose a file of point sets "
                            "(JSON lines with \"key\" and \"points\")")
    return upload, fields


def _p_text(value):
    return "" if value is None else str(value)


def _error_response(exc, as_json):
    """A 503 for an index that cannot be read now, with the reason."""
    message = str(exc)
    if as_json:
        return _json({"ok": False, "error": message, "status": 503}, status=503)
    return Response.html(f"<p>{html.escape(message)}</p>", status=503)


async def search_view(datasette, request):
    as_json = request.url_vars.get("format") == "json"
    database, served, refusal = _served_or_refusal(datasette, request, as_json)
    if refusal is not None:
        return refusal
    points = served.kind in _POINT_KINDS
    args = request.args
    text = None if points else args.get("q")
    error, status, page = None, 200, None
    k_text, p_text = args.get("k"), args.get("p")
    try:
        # Only a point index takes an upload: a text index's form is a GET,
        # and the body of anything else sent to it is not read.
        upload, fields = await _upload_of(request) if points else (None, {})
        k_text, p_text = fields.get("k", k_text), fields.get("p", p_text)
        k, p = parse_k(k_text), parse_p(p_text)
        page = await _run(served, lambda index: pages.search_page(index, served.kind, text=text,
                                                             upload=upload, k=k, p=p))
    except WebInputError as exc:
        error, status = str(exc), exc.status
    if as_json:
        return _json_page(database, page, error, status)
    if page is None:
        page = {"kind": served.kind, "documents": await _run(served, len), "k": k_text or "",
                "query": text, "queries": [], "warnings": []}
    context = {
        "title": f"Search {database}", "database": database, "page": page, "error": error,
        "points": points, "max_k": MAX_K, "p_text": _p_text(p_text),
        "search_url": _url(datasette, database, "search"),
        "json_url": _url(datasette, database, "search.json", q=text, k=k_text, p=p_text),
        "document_url": lambda key: _url(datasette, database, "document", key=key),
    }
    body = await datasette.render_template(_template(datasette, templates.SEARCH), context,
                                           request=request, view_name="sobolev-search")
    return Response.html(body, status=status)


def _side(edge, side):
    """A neighbour's words (or nodes) below one edge, for the explanation table."""
    words = edge.get(f"words_{side}")
    if words is not None:
        return ", ".join(w["word"] for w in words) or "-"
    return ", ".join(f"{n['node']} ({n['mass']:.3f})" for n in edge[f"nodes_{side}"]) or "-"


async def document_view(datasette, request):
    as_json = request.url_vars.get("format") == "json"
    database, served, refusal = _served_or_refusal(datasette, request, as_json)
    if refusal is not None:
        return refusal
    args = request.args
    key = args.get("key")
    error, status, page = None, 200, None
    try:
        k, p = parse_k(args.get("k")), parse_p(args.get("p"))
        page = await _run(served, lambda index: pages.document_page(index, key, k=k, p=p))
    except WebInputError as exc:
        error, status = str(exc), exc.status
    if as_json:
        return _json_page(database, page, error, status)
    context = {
        "title": f"{key} - {database}" if page else database, "database": database,
        "page": page, "error": error, "max_k": MAX_K, "p_text": _p_text(args.get("p")),
        "search_url": _url(datasette, database, "search"),
        "document_base": _url(datasette, database, "document"),
        "json_url": _url(datasette, database, "document.json", key=key, k=args.get("k"),
                         p=args.get("p")),
        "document_url": lambda other: _url(datasette, database, "document", key=other),
        "explain_url": lambda other: _url(datasette, database, "explain", a=key, b=other,
                                          p=args.get("p")),
        "side": _side,
    }
    body = await datasette.render_template(_template(datasette, templates.DOCUMENT), context,
                                           request=request, view_name="sobolev-document")
    return Response.html(body, status=status)


async def explain_view(datasette, request):
    as_json = request.url_vars.get("format") == "json"
    database, served, refusal = _served_or_refusal(datasette, request, as_json)
    if refusal is not None:
        return refusal
    args = request.args
    a, b = args.get("a"), args.get("b")
    error, status, page = None, 200, None
    try:
        p = parse_p(args.get("p"))
        page = await _run(served, lambda index: pages.explain_page(index, a, b, p=p))
    except WebInputError as exc:
        error, status = str(exc), exc.status
    if as_json:
        return _json_page(database, page, error, status)
    context = {
        "title": f"{a} and {b} - {database}" if page else database, "database": database,
        "page": page, "error": error,
        "search_url": _url(datasette, database, "search"),
        "json_url": _url(datasette, database, "explain.json", a=a, b=b, p=args.get("p")),
        "document_url": lambda other: _url(datasette, database, "document", key=other),
        "side": _side,
    }
    body = await datasette.render_template(_template(datasette, templates.EXPLAIN), context,
                                           request=request, view_name="sobolev-explain")
    return Response.html(body, status=status)
