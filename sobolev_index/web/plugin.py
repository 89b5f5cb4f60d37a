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
  nearest documents and, for each, which subtrees and words carry the
  distance (``SobolevIndex.explain``).
- in any SQL query on the catalog: ``sobolev_distance(a, b[, p])`` and
  ``sobolev_knn(key, k[, p])`` (``index.sql``).

The plugin only reads: the index is opened with mode "r" and moved to the
latest commit between requests (``state.ServedIndex``).
"""
import asyncio
import html
import json
import threading
import weakref
from email.parser import BytesParser
from email.policy import HTTP
from urllib.parse import quote

import sqlite_utils
from datasette import hookimpl
from datasette.utils import tilde_decode
from datasette.utils.asgi import Response

from ..errors import SobolevIndexError
from ..index.sql import register_functions
from . import templates
from .pages import MAX_K, WebInputError, document_page, json_value, parse_k, parse_p, search_page
from .state import ServedIndex, index_of_catalog

__all__ = ["register", "served_index", "PLUGIN_NAME"]

PLUGIN_NAME = "sobolev_index"

# Per Datasette instance: {database name: ServedIndex, or None for a
# database that is not an index's catalog}. Opened at first use.
_SERVED = weakref.WeakKeyDictionary()
_OPENING = threading.Lock()
_TEMPLATES = weakref.WeakKeyDictionary()

_POINT_KINDS = ("clouds", "diagrams")


def register():
    """Register this module with Datasette's plugin manager (once; a no-op
    when the entry point has loaded it already)."""
    import sys

    from datasette.plugins import pm

    module = sys.modules[__name__]
    if not pm.is_registered(module):
        pm.register(module, name=PLUGIN_NAME)
    return module


def served_index(datasette, database):
    """The :class:`ServedIndex` of ``database`` (a name), or None when that
    database is not a sobolev-index catalog."""
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
                table[database] = ServedIndex(path, frozen=not db.is_mutable)
            except SobolevIndexError:
                table[database] = None  # a file named like a catalog, not an index
        return table[database]


def _all_served(datasette):
    return [s for s in _SERVED.get(datasette, {}).values() if s is not None]


# ------------------------------------------------------------------- hooks
@hookimpl
def prepare_connection(conn, database, datasette):
    served = served_index(datasette, database)
    if served is not None:
        register_functions(served.locked(), sqlite_utils.Database(conn))


@hookimpl
def register_routes():
    return [
        (r"^/(?P<database>[^/]+)/-/search(\.(?P<format>json))?$", search_view),
        (r"^/(?P<database>[^/]+)/-/document(\.(?P<format>json))?$", document_view),
    ]


@hookimpl
def asgi_wrapper(datasette):
    # Every request (Datasette's own SQL and table pages included) starts
    # from the latest commit of the indexes opened so far.
    def wrap(app):
        async def refreshed(scope, receive, send):
            served = _all_served(datasette) if scope.get("type") == "http" else []
            if served:
                await asyncio.get_running_loop().run_in_executor(
                    None, lambda: [s.refresh_if_changed() for s in served])
            await app(scope, receive, send)
        return refreshed
    return wrap


@hookimpl
def database_actions(datasette, database):
    if served_index(datasette, database) is None:
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
    route = tilde_decode(request.url_vars["database"])
    try:
        name = datasette.get_database(route=route).name
    except KeyError:
        return None, None
    return name, served_index(datasette, name)


def _not_an_index(datasette, request, as_json):
    route = tilde_decode(request.url_vars["database"])
    message = f"{route!r} is not a sobolev-index catalog served here"
    if as_json:
        return _json({"ok": False, "error": message, "status": 404}, status=404)
    return Response.html(f"<p>{html.escape(message)}</p>", status=404)


async def _upload_of(request):
    """(file name, bytes) of a point-set upload: the ``points`` field of a
    multipart form, or a POST body of another type; None for a GET. Also
    returns the form's other fields (k, p)."""
    if request.method != "POST":
        return None, {}
    body = await request.post_body()
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


async def search_view(datasette, request):
    as_json = request.url_vars.get("format") == "json"
    database, served = _database_of(datasette, request)
    if served is None:
        return _not_an_index(datasette, request, as_json)
    args = request.args
    text = args.get("q")
    error, status, page = None, 200, None
    k_text, p_text = args.get("k"), args.get("p")
    try:
        upload, fields = await _upload_of(request)
        k_text, p_text = fields.get("k", k_text), fields.get("p", p_text)
        k, p = parse_k(k_text), parse_p(p_text)
        if served.kind not in _POINT_KINDS:
            upload = None
        page = await _run(served, lambda index: search_page(index, served.kind, text=text,
                                                             upload=upload, k=k, p=p))
    except WebInputError as exc:
        error, status = str(exc), exc.status
    if as_json:
        if error is not None:
            return _json({"ok": False, "error": error, "status": status}, status=status)
        return _json({"ok": True, "database": database, **page})
    if page is None:
        page = {"kind": served.kind, "documents": await _run(served, len), "k": k_text or "",
                "query": text, "queries": [], "warnings": []}
    context = {
        "title": f"Search {database}", "database": database, "page": page, "error": error,
        "points": served.kind in _POINT_KINDS, "max_k": MAX_K, "p_text": _p_text(p_text),
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
    database, served = _database_of(datasette, request)
    if served is None:
        return _not_an_index(datasette, request, as_json)
    args = request.args
    key = args.get("key")
    error, status, page = None, 200, None
    try:
        k, p = parse_k(args.get("k")), parse_p(args.get("p"))
        page = await _run(served, lambda index: document_page(index, key, k=k, p=p))
    except WebInputError as exc:
        error, status = str(exc), exc.status
    if as_json:
        if error is not None:
            return _json({"ok": False, "error": error, "status": status}, status=status)
        return _json({"ok": True, "database": database, **page})
    context = {
        "title": f"{key} - {database}" if page else database, "database": database,
        "page": page, "error": error, "max_k": MAX_K, "p_text": _p_text(args.get("p")),
        "search_url": _url(datasette, database, "search"),
        "document_base": _url(datasette, database, "document"),
        "json_url": _url(datasette, database, "document.json", key=key, k=args.get("k"),
                         p=args.get("p")),
        "document_url": lambda other: _url(datasette, database, "document", key=other),
        "side": _side,
    }
    body = await datasette.render_template(_template(datasette, templates.DOCUMENT), context,
                                           request=request, view_name="sobolev-document")
    return Response.html(body, status=status)
