"""Datasette on one index: what ``sobolev-index serve`` runs."""
import asyncio
import os
import socket

from ..errors import SobolevIndexError
from . import WEB_INSTALL
from .state import catalog_path

__all__ = ["make_datasette", "serve", "search_path"]


def _datasette():
    try:
        import datasette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise SobolevIndexError(f"the web view needs Datasette: {WEB_INSTALL}") from None


def make_datasette(index_path, name=None, settings=None, immutable=False, max_sql_work=None,
                   max_sql_value_bytes=None):
    """A Datasette instance serving the catalog of the index at
    ``index_path`` under the database name ``name`` (default: the index
    directory's name), with the plugin registered.

    The catalog is opened read-only as the library's readers open it
    (``mode=ro``; ``immutable`` only when SQLite cannot make its -shm file
    there and no log is pending), and the plugin follows writers' commits.
    ``immutable=True`` promises that nothing writes to the index while it is
    served (a copy on read-only media): SQLite then takes no locks and
    never looks for changes, and a change made anyway (say by root, whom
    permission bits do not stop) is read as damage. ``settings`` are
    Datasette's (e.g. ``{"sql_time_limit_ms": 5000}``: the S_p functions
    in SQL stop at it too). ``max_sql_work`` and ``max_sql_value_bytes``:
    the plugin's settings of those names (None: their defaults,
    ``index.sql.DEFAULT_MAX_WORK`` units of S_p work per statement and
    ``index.sql.MAX_VALUE_BYTES`` bytes per value). Raises NotAnIndexError
    (and the other errors of ``SobolevIndex.open``) for a path that is not
    a readable index, and ValueError for a bad setting.
    """
    _datasette()
    from datasette.app import Datasette

    from ..index import SobolevIndex
    from ..index.sql import check_max_value_bytes, check_max_work
    from .plugin import PLUGIN_NAME, catalog_database, register

    plugin = {}
    if max_sql_work is not None:
        plugin["max_sql_work"] = check_max_work(max_sql_work, "max_sql_work")
    if max_sql_value_bytes is not None:
        plugin["max_sql_value_bytes"] = check_max_value_bytes(max_sql_value_bytes,
                                                              "max_sql_value_bytes")
    path = os.path.abspath(os.fspath(index_path))
    # Fails here, with the library's message, for anything but an index.
    SobolevIndex.open(path).close()
    register()
    ds = Datasette(files=[], settings=settings,
                   metadata={"plugins": {PLUGIN_NAME: plugin}} if plugin else None)
    # Named after the index, not "catalog", so that its URLs say which.
    wanted = name or os.path.basename(path) or "index"
    if wanted in ("_internal", "_memory"):
        wanted = "index"
    ds.add_database(catalog_database(ds, catalog_path(path), immutable=immutable), name=wanted)
    return ds


def search_path(ds):
    """The path of the search page of the (one) index ``ds`` serves."""
    names = [n for n in ds.databases if n not in ("_internal", "_memory")]
    return ds.urls.database(names[0]) + "/-/search"


def _listening_socket(host, port):
    """A socket bound to (host, port) and listening: a port in use fails
    here with the system's message, and port 0 takes a free one."""
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"port is {port!r}; expected a number from 0 to 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve(index_path, host="127.0.0.1", port=8001, on_ready=None, settings=None,
          immutable=False, max_sql_work=None, max_sql_value_bytes=None):
    """Serve the index at ``index_path`` with Datasette on ``host``:``port``
    (0: a free port) until interrupted (Ctrl-C, SIGTERM).

    ``on_ready(url)`` is called with the search page's URL once the port is
    bound and before the first request is answered. Nothing is ever written
    to the index; another process may add, delete or compact meanwhile, and
    each request sees the latest commit when it starts (``immutable`` and
    the SQL limits: see :func:`make_datasette`)."""
    ds = make_datasette(index_path, settings=settings, immutable=immutable,
                        max_sql_work=max_sql_work, max_sql_value_bytes=max_sql_value_bytes)
    import uvicorn

    asyncio.run(ds.invoke_startup())
    sock = _listening_socket(host, port)
    try:
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}{search_path(ds)}"
        if on_ready is not None:
            on_ready(url)
        config = uvicorn.Config(ds.app(), log_level="warning", lifespan="on")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    return url
