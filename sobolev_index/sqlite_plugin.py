"""The sqlite-utils plugin: S_p in SQL on an index's catalog, read-only.

sqlite-utils loads this module through its ``sqlite_utils`` entry point
(:func:`register` registers it by hand, for a source tree whose entry
points are not installed). It acts on a connection only when the
connection's main database is an index's catalog: a file named
``catalog.sqlite`` (checked first, from the path alone) in a directory that
``SobolevIndex.open(directory, mode="r")`` opens. Every other database
(another file, ``:memory:``, a ``catalog.sqlite`` that is not an index's) is
left exactly as it was: no functions, no authorizer, no handlers. A
catalog attached to another database is not looked at.

On a catalog connection (``sqlite-utils query INDEX/catalog.sqlite ...``,
``sqlite_utils.Database("INDEX/catalog.sqlite")``):

- ``sobolev_distance(key_a, key_b[, p])`` and ``sobolev_knn(query_key,
  k[, p])`` are registered, as ``sobolev-index sql`` has them
  (:mod:`sobolev_index.index.sql`): exact S_p between two stored documents,
  and the k nearest stored documents of a stored one as a JSON list of
  ``{"key", "distance", "label"}``; a key that is not live gives NULL.
- The catalog is read-only. It is the index's commit point, and a write
  through sqlite-utils would damage the index, so an authorizer allows
  only: SELECT (with recursive CTEs), reading any table, the functions of
  :data:`sobolev_index.index.sql.ALLOWED_FUNCTIONS` (SQLite's core, date,
  math and JSON functions and the two above), transactions and savepoints
  (``Database.query`` runs each query in one; ``PRAGMA query_only``, set
  here too, refuses ``BEGIN IMMEDIATE`` and anything else that would take
  the write lock), the PRAGMAs that describe the schema (:data:`SCHEMA_PRAGMAS`,
  given a table or index name, as statements or as table-valued functions
  such as ``pragma_table_info('documents')``) and the PRAGMAs of
  :data:`QUERY_PRAGMAS` read without a value. So ``sqlite-utils tables``
  (``--counts``, ``--columns``, ``--schema``), ``rows``, ``schema``,
  ``indexes``, ``dump`` and ``query`` work, and so do the Python API's
  reads (``table_names()``, ``Table.columns``, ``.count``, ``.rows_where``,
  ``.indexes``). Everything else is refused: INSERT, UPDATE, DELETE, CREATE,
  DROP and ALTER (temporary tables too), ANALYZE, REINDEX and VACUUM,
  ATTACH and DETACH, every PRAGMA given a value (a setting; but
  ``recursive_triggers``, which sqlite-utils sets on each connection it
  wraps, and which changes nothing where no trigger can run) and every
  other PRAGMA, and every other function (those sqlite-utils registers
  itself, ``--functions`` included).
- SQLite's limits of ``sobolev-index sql`` hold
  (:func:`sobolev_index.index.sql.sql_limits`: values of at most
  ``MAX_VALUE_BYTES`` bytes, no ATTACH, bounded statements).
- Each statement may run ``DEFAULT_TIMEOUT`` seconds from its start (the
  time its caller takes between two rows counts) and its S_p functions may
  do ``DEFAULT_MAX_WORK`` units of work (the defaults of ``sobolev-index
  sql``, read when the statement starts). A statement past its time is
  interrupted; ``sobolev-index sql INDEX QUERY --timeout SECONDS --max-work
  UNITS`` runs one with larger limits.

SQLite reports a refusal as ``not authorized``, a stopped statement as
``interrupted`` and a failed function as ``user-defined function raised
exception``; the plugin's own message, which says what was refused or what
went wrong, is raised inside the callback, and Python prints it where
sqlite3's callback tracebacks are on. The plugin turns them on (for the
whole process) when it prepares a catalog connection, so that these
messages are seen: ``sqlite-utils query`` prints them above its error.

The index is opened for each catalog connection, held by the functions
registered there, and closed with the connection. A long-lived connection
follows the index's writers: the first S_p call of each statement moves
the index to the latest commit when another connection committed since
(``PRAGMA data_version`` of a connection of the plugin's own, then
``SobolevIndex.refresh``; a catalog in a directory where SQLite cannot
make its -shm file is not followed). A catalog replaced by another file
(an index rebuilt and moved into place) is refused by the functions: open
a new connection. The plugin keeps the connection's authorizer, progress
handler and trace callback (each statement's start); replacing one of
them removes its rules.

An index whose catalog names the format but which cannot be opened
(damaged, or of a newer release) is read-only all the same, without the
S_p functions, and sqlite-utils warns why.

``sqlite-utils sobolev-search INDEX QUERY_KEY -k 10 [-p P] [--json]``
prints the nearest documents of a stored document
(:meth:`SobolevIndex.search`, like ``sobolev-index search --key``).

sqlite-utils imports this module in every process that uses it, so it
imports nothing of the index (nor NumPy, SciPy or h5py) until a catalog
is opened, and it never raises where sqlite-utils calls it: a connection
it fails to prepare gets a warning instead.
"""
import inspect
import json
import os
import re
import sqlite3
import sys
import urllib.parse
import warnings
import weakref

try:
    from sqlite_utils import hookimpl
except ImportError:  # sqlite_utils still importing (older releases load plugins then)
    from sqlite_utils.hookspecs import hookimpl

__all__ = ["prepare_connection", "register_commands", "register", "PLUGIN_NAME",
           "CATALOG_NAME", "SCHEMA_PRAGMAS", "QUERY_PRAGMAS"]

# The name of the entry point (pyproject.toml) and of the plugin in
# sqlite-utils' plugin manager.
PLUGIN_NAME = "sobolev_index"
# The file name of an index's catalog (index.storage.CATALOG, which cannot
# be imported here: importing the index package loads NumPy and h5py).
CATALOG_NAME = "catalog.sqlite"
# What the catalog's meta table names as its format (index.storage.FORMAT_NAME).
INDEX_FORMAT = "sobolev-index"

# PRAGMAs that describe the schema of the table or index they name.
SCHEMA_PRAGMAS = frozenset({"table_info", "table_xinfo", "table_list", "index_list",
                            "index_info", "index_xinfo", "foreign_key_list"})
# PRAGMAs allowed as queries only (no value given): each would be a setting
# with one.
QUERY_PRAGMAS = frozenset({"database_list", "collation_list", "function_list", "module_list",
                           "pragma_list", "compile_options", "data_version", "schema_version",
                           "user_version", "application_id", "encoding", "journal_mode",
                           "page_size", "page_count", "freelist_count", "foreign_keys",
                           "query_only"})

# The text of a PRAGMA statement, as the trace callback gets it (a nested
# one, a pragma_* function's, comes as an SQL comment).
_PRAGMA_TEXT = re.compile(r"\s*(?:--\s*)?pragma\b", re.IGNORECASE)

# The authorizer's action codes the plugin looks at (sqlite3 names them on
# recent Pythons; the numbers are SQLite's own).
_PRAGMA = getattr(sqlite3, "SQLITE_PRAGMA", 19)
_UPDATE = getattr(sqlite3, "SQLITE_UPDATE", 23)
_FUNCTION = getattr(sqlite3, "SQLITE_FUNCTION", 31)
_ALTER = getattr(sqlite3, "SQLITE_ALTER_TABLE", 26)
_READS = frozenset({getattr(sqlite3, "SQLITE_SELECT", 21), getattr(sqlite3, "SQLITE_READ", 20),
                    _FUNCTION, getattr(sqlite3, "SQLITE_TRANSACTION", 22),
                    getattr(sqlite3, "SQLITE_SAVEPOINT", 32),
                    getattr(sqlite3, "SQLITE_RECURSIVE", 33)})


def _action_words():
    """{action code: words for a refusal} of the actions sqlite3 names."""
    words = {}
    for constant, text in (
            ("CREATE_INDEX", "CREATE INDEX"), ("CREATE_TABLE", "CREATE TABLE"),
            ("CREATE_TEMP_INDEX", "CREATE TEMP INDEX"), ("CREATE_TEMP_TABLE", "CREATE TEMP TABLE"),
            ("CREATE_TEMP_TRIGGER", "CREATE TEMP TRIGGER"), ("CREATE_TEMP_VIEW", "CREATE TEMP VIEW"),
            ("CREATE_TRIGGER", "CREATE TRIGGER"), ("CREATE_VIEW", "CREATE VIEW"),
            ("CREATE_VTABLE", "CREATE VIRTUAL TABLE"), ("DELETE", "DELETE FROM"),
            ("DROP_INDEX", "DROP INDEX"), ("DROP_TABLE", "DROP TABLE"),
            ("DROP_TEMP_INDEX", "DROP TEMP INDEX"), ("DROP_TEMP_TABLE", "DROP TEMP TABLE"),
            ("DROP_TEMP_TRIGGER", "DROP TEMP TRIGGER"), ("DROP_TEMP_VIEW", "DROP TEMP VIEW"),
            ("DROP_TRIGGER", "DROP TRIGGER"), ("DROP_VIEW", "DROP VIEW"),
            ("DROP_VTABLE", "DROP VIRTUAL TABLE"), ("INSERT", "INSERT INTO"),
            ("UPDATE", "UPDATE"), ("ALTER_TABLE", "ALTER TABLE"), ("REINDEX", "REINDEX"),
            ("ANALYZE", "ANALYZE"), ("ATTACH", "ATTACH (or VACUUM)"), ("DETACH", "DETACH")):
        code = getattr(sqlite3, "SQLITE_" + constant, None)
        if code is not None:
            words[code] = text
    return words


_ACTION_WORDS = _action_words()
# The schema tables, which CREATE, DROP and ALTER write first.
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_temp_master", "sqlite_schema",
                            "sqlite_temp_schema"})
# What removes an authorizer: None from Python 3.11 on; before, None is
# taken as a callback that fails, so one that allows everything stands in.
_NO_AUTHORIZER = None if sys.version_info >= (3, 11) else (lambda *args: sqlite3.SQLITE_OK)


def register():
    """Register this module with sqlite-utils' plugin manager.

    For a source tree whose entry points are not installed; a no-op when
    sqlite-utils has loaded the plugin already.

    Returns
    -------
    module
        This module.
    """
    from sqlite_utils.plugins import pm

    module = sys.modules[__name__]
    if not pm.is_registered(module) and pm.get_plugin(PLUGIN_NAME) is None:
        # Under the entry point's name: sqlite-utils then skips the entry
        # point instead of registering the module a second time.
        pm.register(module, name=PLUGIN_NAME)
    return module


# ------------------------------------------------------------ the connection
@hookimpl
def prepare_connection(conn):
    """Make an index's catalog connection read-only and give it the S_p functions.

    Called by sqlite-utils for each ``Database`` it opens with plugins. A
    connection whose main database is not an index's catalog is left as it
    is.

    Parameters
    ----------
    conn : sqlite3.Connection
        The connection sqlite-utils prepares.
    """
    try:
        catalog = _catalog_file(conn)
        if catalog is not None:
            _prepare_catalog(conn, catalog)
    except Exception as exc:  # noqa: BLE001 - a plugin must not break sqlite-utils
        warnings.warn(f"sobolev-index's sqlite-utils plugin could not prepare the connection "
                      f"({type(exc).__name__}: {exc}); its rules may not hold there",
                      RuntimeWarning, stacklevel=2)


def _catalog_file(conn):
    """The main database file of ``conn`` when it is named like a catalog, else None."""
    try:
        databases = conn.execute("PRAGMA database_list").fetchall()
    except sqlite3.Error:
        return None
    for _, name, path in databases:
        if name == "main":
            if path and os.path.basename(path) == CATALOG_NAME:
                return os.path.abspath(path)
            return None
    return None


def _connect_probe(catalog):
    """(connection, version) watching the commits to ``catalog``
    (``index.catalog.watch_commits``); (None, None) where SQLite cannot
    watch it."""
    from .index.catalog import watch_commits

    try:
        return watch_commits(catalog)
    except sqlite3.Error:
        return None, None


def _names_the_format(catalog, timeout=1.0):
    """Whether the meta table of ``catalog`` names the index's format (of
    any version): True, False, or None when SQLite could not read it for
    another reason than a lock. Cheap, and before anything of the index is
    imported: another application's ``catalog.sqlite`` is left at once. A
    lock held longer than ``timeout`` seconds is not an index's: readers of
    its catalog (WAL) never wait for its writer."""
    # The URI as index.catalog.readonly_uri makes it, which this module
    # cannot import before it knows the file is an index's catalog.
    uri = "file:" + urllib.parse.quote(os.path.abspath(catalog)) + "?mode=ro"
    try:
        probe = sqlite3.connect(uri, uri=True, timeout=timeout)
    except sqlite3.Error:
        return None
    try:
        row = probe.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
        return row is not None and json.loads(row[0]) == INDEX_FORMAT
    except sqlite3.OperationalError as exc:
        message = str(exc)
        if "locked" in message or "no such table" in message:
            return False
        return None
    except (sqlite3.Error, TypeError, ValueError):
        return False
    finally:
        probe.close()


def _prepare_catalog(conn, catalog):
    if _names_the_format(catalog) is False:
        return
    from .errors import NotAnIndexError
    from .index import SobolevIndex, sql
    from .index.catalog import file_identity

    directory = os.path.dirname(catalog)
    # Looked at before the index is opened: a commit landing in between is
    # then taken for a change, and followed.
    identity = file_identity(catalog)
    probe, version = _connect_probe(catalog)
    try:
        index = SobolevIndex.open(directory, mode="r")
    except NotAnIndexError:
        if probe is not None:
            probe.close()
        return
    except Exception as exc:  # noqa: BLE001 - read-only all the same, with a warning
        if probe is not None:
            probe.close()
        if not _names_the_format(catalog):
            return  # another database, or one SQLite cannot read
        warnings.warn(f"{directory}: the index cannot be opened ({exc}); sqlite-utils reads its "
                      "catalog read-only, without the S_p functions", RuntimeWarning,
                      stacklevel=3)
        _protect(conn, sql, _Session(None, None, None, identity, catalog, sql))
        return
    session = _Session(index, probe, version, identity, catalog, sql)
    import sqlite_utils

    db = sqlite_utils.Database(conn, execute_plugins=False, recursive_triggers=False)
    sql.register_functions(index, _Registrar(db, session), session.guard)
    _protect(conn, sql, session)


def _protect(conn, sql, session):
    """The read-only rules and limits on ``conn``, the limits kept by
    ``session``'s guard."""
    # Settings first: the plugin's own authorizer would refuse them, when a
    # connection is prepared a second time.
    conn.set_authorizer(_NO_AUTHORIZER)
    conn.execute("PRAGMA query_only = ON")
    sql.apply_limits(conn, sql.sql_limits())
    # SQLite keeps only "not authorized", "interrupted" or "user-defined
    # function raised exception" of what the callbacks raise: with these on,
    # Python prints their messages too.
    sqlite3.enable_callback_tracebacks(True)
    conn.set_authorizer(_authorizer(session, sql))
    conn.set_progress_handler(session.progress, sql.PROGRESS_STEPS)
    conn.set_trace_callback(session.statement_started)


def _refusal(catalog, what):
    from .errors import SobolevIndexError

    return SobolevIndexError(
        f"{what} is refused: {catalog} is the catalog of a sobolev-index index, its commit "
        "point, and sqlite-utils may only read it (SELECT, and the PRAGMAs that describe the "
        "schema); change the index with `sobolev-index` or SobolevIndex.open(path, mode='a')")


def _authorizer(session, sql):
    """The authorizer of a catalog connection (see the module's docstring).
    A refusal is raised, which denies the action and says why."""
    ok = sqlite3.SQLITE_OK
    functions = sql.function_authorizer(sql.ALLOWED_FUNCTIONS, session.guard.refused, _READS)
    catalog = session.catalog

    def authorize(action, arg1, arg2, db_name, source):
        # A statement is being prepared: the deadline of the one before must
        # not stop it (SQLite may look at the progress handler meanwhile).
        session.preparing(action)
        if action == _PRAGMA:
            name = (arg1 or "").lower()
            if name in SCHEMA_PRAGMAS or (name in QUERY_PRAGMAS and arg2 is None) \
                    or name == "recursive_triggers":
                # sqlite-utils sets recursive_triggers on each connection it
                # wraps; no trigger runs where nothing can be written.
                return ok
            raise _refusal(catalog, f"PRAGMA {arg1}" + ("" if arg2 is None else f" = {arg2}"))
        if action == _UPDATE and arg1 == "sqlite_master" and source is None:
            # Asked when a PRAGMA's table-valued function (pragma_table_info)
            # is first used on a connection. An UPDATE of sqlite_master
            # itself needs PRAGMA writable_schema, refused here, and
            # query_only refuses any write.
            return ok
        if functions(action, arg1, arg2, db_name, source) == ok:
            return ok
        if action == _FUNCTION:
            from .errors import SobolevIndexError

            raise SobolevIndexError(sql.refused_message(arg2))
        if arg1 in _SCHEMA_TABLES:
            raise _refusal(catalog, "changing the schema (CREATE, DROP, ALTER)")
        words = _ACTION_WORDS.get(action, f"SQLite action {action}")
        name = arg2 if action == _ALTER else arg1  # ALTER names the schema first
        raise _refusal(catalog, words + (f" {name}" if name else ""))
    return authorize


class _Session:
    """What the plugin keeps for one catalog connection: the index (None
    when it could not be opened), the guard of the statements' limits, and
    how to follow the index's commits. Referenced only by the callbacks
    and functions registered on the connection, so that it, and the index
    with it, goes when the connection is closed or collected."""

    def __init__(self, index, probe, version, identity, catalog, sql):
        self.index = index
        self.probe = probe
        # The catalog's data_version read before the index was opened.
        self.version = version
        self.identity = identity
        self.catalog = catalog
        self.sql = sql
        self.guard = sql.StatementGuard(reports_errors=False)
        # Whether the next S_p call is the statement's first.
        self.pending = False
        if index is not None or probe is not None:
            weakref.finalize(self, _close, index, probe)

    def _data_version(self):
        return None if self.probe is None else \
            self.probe.execute("PRAGMA data_version").fetchone()[0]

    # The trace callback: called when each statement starts, nested ones
    # too: a pragma_* table-valued function runs a PRAGMA statement per use
    # (traced as "-- PRAGMA table_info='documents'"), which must not restart
    # the limits of the statement it runs in.
    def statement_started(self, statement):
        guard = self.guard
        if guard.active and _PRAGMA_TEXT.match(statement):
            return
        sql = self.sql
        timeout, max_work = sql.DEFAULT_TIMEOUT, sql.DEFAULT_MAX_WORK
        command = "`sobolev-index sql INDEX QUERY"
        self.guard.start(
            timeout, max_work,
            time_message=None if timeout is None else (
                f"the SQL statement ran longer than {timeout:g} s, the limit of a statement on "
                f"an index's catalog in sqlite-utils, and was stopped; {command} --timeout "
                "SECONDS` runs it with a longer one"),
            work_hint=f"{command} --max-work UNITS` runs it with a larger budget")
        self.pending = True

    def preparing(self, action):
        # A PRAGMA may be prepared inside a running statement (a pragma_*
        # function's), which keeps its limits; a PRAGMA statement of its own
        # is short, and runs under the last statement's deadline.
        if action != _PRAGMA and self.guard.past_deadline():
            self.guard.finish()

    # The progress handler: raising interrupts the statement (and the
    # message is printed where callback tracebacks are on).
    def progress(self):
        if self.guard.past_deadline():
            from .errors import SobolevIndexError

            raise SobolevIndexError(self.guard.time_message)
        return 0

    def follow(self):
        """Before the first S_p call of a statement: move the index to the
        latest commit when another connection committed since."""
        if not self.pending:
            return
        self.pending = False
        from .index.catalog import file_identity

        if file_identity(self.catalog) != self.identity:
            from .errors import SobolevIndexError

            raise SobolevIndexError(
                f"{self.catalog} was deleted or replaced by another file since this connection "
                "opened it; open a new connection to query the index there now")
        version = self._data_version()
        if version == self.version:
            return
        self.index.refresh()
        self.version = version


def _close(index, probe):
    for item in (index, probe):
        if item is not None:
            try:
                item.close()
            except Exception:  # noqa: BLE001, S110 - closing at collection or exit
                pass


class _Registrar:
    """Registers the S_p functions (``index.sql.register_functions``) on the
    sqlite-utils Database ``db``, each first following the index's commits
    (:meth:`_Session.follow`). It holds no connection: a function that held
    it would keep the connection from being collected."""

    def __init__(self, db, session):
        self._db = db
        self._session = session

    def register_function(self, fn, **kwargs):
        follow = self._session.follow

        def current(*args):
            follow()
            return fn(*args)
        current.__signature__ = inspect.signature(fn)
        return self._db.register_function(current, **kwargs)


# ------------------------------------------------------------------ command
_HINTS = {
    "NotAnIndexError": "give an index directory or its catalog.sqlite",
    "KeyNotFoundError": "list the stored keys with `sqlite-utils rows INDEX/catalog.sqlite "
                        "documents -c key --where \"deleted = 0\"`",
    "CorruptIndexError": "run `sobolev-index verify INDEX` to see what is damaged",
    "UnsupportedFormatError": "open it with the release of sobolev-index that wrote it",
}


def _hint(exc):
    for cls in type(exc).__mro__:
        if cls.__name__ in _HINTS:
            return f" ({_HINTS[cls.__name__]})"
    return ""


@hookimpl
def register_commands(cli):
    """Add ``sqlite-utils sobolev-search``.

    Parameters
    ----------
    cli : click.Group
        sqlite-utils' command group.
    """
    import click

    @cli.command(name="sobolev-search")
    @click.argument("index_path", metavar="INDEX_OR_CATALOG", type=click.Path())
    @click.argument("query_key")
    @click.option("-k", "k", default=10, show_default=True, type=click.IntRange(1),
                  help="How many documents.")
    @click.option("-p", "p", default=None, metavar="P",
                  help="The order p of S_p (a number >= 1, or inf).  [default: the index's]")
    @click.option("--json", "as_json", is_flag=True, help="Print a JSON list of "
                  "{\"key\", \"distance\", \"label\"}.")
    def sobolev_search(index_path, query_key, k, p, as_json):
        """The k nearest documents of the stored document QUERY_KEY, by S_p.

        INDEX_OR_CATALOG is a sobolev-index index directory or its
        catalog.sqlite. Like `sobolev-index search INDEX --key QUERY_KEY`.
        """
        from .errors import SobolevIndexError
        from .index import SobolevIndex
        from .index.sql import p_of

        path = os.fspath(index_path)
        if os.path.basename(path) == CATALOG_NAME and os.path.isfile(path):
            path = os.path.dirname(os.path.abspath(path))
        try:
            with SobolevIndex.open(path, mode="r") as index:
                hits = index.search(query_key, k=k, p=p_of(p)).to_records()[0]
        except (SobolevIndexError, ValueError) as exc:
            raise click.ClickException(f"{exc}{_hint(exc)}") from None
        if as_json:
            click.echo(json.dumps(hits, ensure_ascii=False))
            return
        click.echo("rank\tdistance\tkey\tlabel")
        for rank, hit in enumerate(hits, 1):
            label = "" if hit["label"] is None else hit["label"]
            click.echo(f"{rank}\t{hit['distance']:.10g}\t{hit['key']}\t{label}")
