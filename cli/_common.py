"""What every command of the command line shares: the error funnel (library
errors become one ``Error: ...`` line with a hint), opening an index (single
or sharded), the common options, progress bars, tables and JSON output.
Commands live in the modules named by their group and are registered on
``main`` in ``__init__.py``."""
import contextlib
import io
import json
import os
import sys
import warnings

import click

from ..errors import ADVICE
from .params import (
    P_ORDER,
    ROOT_POSITIONS,
    SECONDS,
)

# What to try next, by error class name; the message itself says what was wrong.
_HINTS = {
    "NotAnIndexError": "build one with `sobolev-index build INDEX --corpus FILE --vectors FILE`",
    "IndexLockedError": "another command is writing to this index; retry when it is done, or "
                        "pass --wait SECONDS",
    "KeyNotFoundError": "list keys with `sobolev-index sql INDEX \"SELECT key FROM documents "
                        "WHERE deleted = 0\"`",
    "CorruptIndexError": "run `sobolev-index verify INDEX` to see what is damaged",
    "UnsupportedFormatError": "rebuild the index with this release",
    "OlderFormatError": "releases older than this one cannot read an upgraded index",
    "VectorFileError": "check the --vectors file and its format",
    "CorpusError": "check the corpus file; --format names its format, --skip-empty skips "
                   "documents without known words",
    "PointsFileError": "check the points file: JSON lines with \"points\" (and optional "
                       "\"weights\", \"key\", \"label\", \"fields\"), or --diagrams for "
                       "(birth, death) rows",
    "InvalidMeasureError": "use words the index knows (see the words table with `sobolev-index sql`)",
    "DuplicateKeyError": "keys must be unique; delete the old document, replace it with "
                         "--upsert, or leave it out with --skip-existing",
    "FileExistsError": "choose a new directory",
}

# The command line's words for the advice library messages give in the
# Python API's words (errors.ADVICE), by the same names: the options.
CLI_ADVICE = {
    "fold_case": "(try --fold-case)",
    "skip_empty": "(--skip-empty)",
    "keep_stopwords": "(--stopwords none)",
    "skip_existing": "delete it first, or use --upsert or --skip-existing",
    "wait_for_writer": "commands that only read need no lock; pass --wait SECONDS to wait for "
                       "the writer",
    "open_for_writing": "use a command that writes",
    "read_only": "; commands that only read work on it",
    "verify": "run `sobolev-index verify INDEX` and",
    "upgrade": "with `sobolev-index upgrade INDEX`",
    "read_as_is": "or use commands that only read",
    "repair": "`sobolev-index verify --repair INDEX` moves it",
    "encoding": "(--encoding NAME, e.g. cp1252, latin-1 or utf-16)",
    "format": "(--format lines, plain-lines, jsonl, csv or tsv)",
    "columns": "(--text-column NAME; --key-column and --label-column name the others)",
    "format_lines": "is --format lines",
    "vectors": "(--vectors FILE)",
    "no_key_column": "(--key-column none)",
    "no_text": "(--no-text)",
}


def _cli_words(message):
    """``message`` (of an error, a warning or a report) with the library's
    advice in the command line's words."""
    for name, words in CLI_ADVICE.items():
        message = message.replace(ADVICE[name], words)
    return message


def _hint_for(exc):
    # The most specific class with a hint: a CorpusKeyError is a key problem
    # first, a CorpusVectorsError a vector-file problem.
    if getattr(exc, "at_open", False):
        return None  # the message says what to restore
    for cls in type(exc).__mro__:
        if cls.__name__ in _HINTS:
            return _HINTS[cls.__name__]
    return None


def _stdout_gone():
    """Whether stdout is a pipe whose reader has left (a broken pipe
    elsewhere, say stderr's or a socket's, is an error to report)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False  # no poll (Windows) or no descriptor (a test runner's buffer)


def _discard_stdout():
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # no file descriptor behind stdout (a test runner's buffer)


class _Group(click.Group):
    def invoke(self, ctx):
        from ..errors import InvalidMeasureError, SobolevIndexError

        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # As for a Ctrl-C while the command line loads (see _console):
            # the shell's convention, 128 + SIGINT, rather than Click's 1.
            click.echo("\nAborted!", err=True)
            sys.exit(130)
        except BrokenPipeError as exc:
            if not _stdout_gone():
                raise click.ClickException(f"{exc.strerror or exc}") from None
            # The reader of stdout left (`... | head`): not an error of the
            # command. Later writes, and the flush at exit, go nowhere; the
            # status is the shell's 128 + SIGPIPE.
            _discard_stdout()
            sys.exit(141)
        except (SobolevIndexError, ValueError, OSError) as exc:
            # OSError: a missing or unwritable path, a read-only file system,
            # a full disk: one line with the system's own words.
            message = str(exc)
            if isinstance(exc, OSError) and exc.strerror:
                # the system's words without "[Errno N]"
                message = exc.strerror + (f": {exc.filename}" if exc.filename else "")
            message = _cli_words(message)
            hint = _hint_for(exc)
            if isinstance(exc, InvalidMeasureError) and "word" not in message:
                # The words hint fits only a document without known words; a
                # bad mass or node is explained by the message itself.
                hint = None
            if "--encoding" in message or "appears twice in the input" in message:
                # A file that does not decode: the message names the option,
                # and the file may be a stop-word or keys file, not a corpus.
                # A key twice in one input: deleting or replacing the stored
                # one would not help.
                hint = None
            raise click.ClickException(message + (f" (hint: {hint})" if hint else "")) from None


def _check_segments():
    """Whether --check was given (before the command)."""
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    return bool(root is not None and isinstance(root.obj, dict) and root.obj.get("check"))


# ------------------------------------------------------------------ helpers
def _progress(silent):
    """A progress(stage, done, total) callback drawing one bar per stage on
    stderr; silent, or when stderr is not a terminal, it draws nothing."""
    state = {"bar": None, "stage": None, "done": 0}

    silent = silent or not sys.stderr.isatty()

    def update(stage, done, total):
        if silent:
            return
        if stage != state["stage"]:
            finish()
            state["stage"] = stage
            state["done"] = 0
            state["bar"] = click.progressbar(length=max(int(total), 1), label=f"{stage:<9}",
                                             file=sys.stderr, show_pos=True)
            state["bar"].__enter__()
        step = int(done) - state["done"]
        if step > 0:
            state["bar"].update(step)
            state["done"] = int(done)

    def finish():
        if state["bar"] is not None:
            state["bar"].__exit__(None, None, None)
            state["bar"] = None

    update.finish = finish
    return update


def _note(message, silent=False):
    if not silent:
        click.echo(message, err=True)


def _echo_json(value):
    # Text as it is (UTF-8), not as \u escapes: keys and texts are read by people.
    click.echo(json.dumps(value, indent=2, default=_json_default, ensure_ascii=False))


def _json_default(value):
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()  # SQLite BLOBs
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _table(headers, rows):
    """Plain aligned columns."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _open(path, mode="r", timeout=None, quiet_unlisted=False):
    """The single index at ``path``, for a command of one index (a sharded
    one is refused with a pointer to its shards); see _opened."""
    _refuse_sharded(path)
    return _opened(path, mode, timeout, quiet_unlisted=quiet_unlisted, single=True)


def _open_any(path, mode="r", timeout=None, scheduler=None, quiet_unlisted=False):
    """The index at ``path``, single or sharded (the library's open_index
    tells them apart): a sharded one on the Dask scheduler at
    ``scheduler``, or in this process without one; see _opened."""
    _check_scheduler(path, scheduler)
    if _check_segments() and _sharded(path):
        raise click.UsageError(f"--check opens a single index; {path} is a sharded index: "
                               f"check its shards with `sobolev-index verify {path}`")
    return _opened(path, mode, timeout, scheduler, quiet_unlisted)


@contextlib.contextmanager
def _opened(path, mode="r", timeout=None, scheduler=None, quiet_unlisted=False, single=False):
    """The index at ``path`` opened with the command's options, closed on
    exit: ``open_index`` (``single``: SobolevIndex.open, whatever else the
    directory holds) with --check for a single index, and for a sharded
    one the Dask client of --scheduler and --task-timeout. Unlisted
    segment files found at open are one ``warning:`` line (none with
    ``quiet_unlisted``: the command deals with them); damage a single
    index's open finds is marked, so that the hint does not send the user
    to verify in a circle."""
    from ..distributed.opening import open_index
    from ..errors import (
        CorruptIndexError,
        NotAnIndexError,
        UnlistedSegmentsWarning,
        UnsupportedFormatError,
    )
    from ..index import SobolevIndex

    sharded = not single and _sharded(path)
    if mode == "a":
        _refuse_shard_writes(path)
    ctx = click.get_current_context(silent=True)
    task_timeout = ctx.meta.get("task_timeout") if ctx is not None and sharded else None
    client = None
    if scheduler:
        from ..distributed.files import connect

        client = connect(scheduler)
    try:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", UnlistedSegmentsWarning)
                if single:
                    opened = SobolevIndex.open(path, mode=mode, timeout=timeout,
                                               check=_check_segments())
                else:
                    opened = open_index(path, mode=mode, client=client, timeout=timeout,
                                        check=_check_segments() and not sharded,
                                        task_timeout=task_timeout)
        except CorruptIndexError as exc:
            if not sharded:
                exc.at_open = not isinstance(exc, (NotAnIndexError, UnsupportedFormatError))
            raise
        for warning in caught:
            if issubclass(warning.category, UnlistedSegmentsWarning):
                if not quiet_unlisted:
                    _note(f"warning: {_cli_words(str(warning.message))}")
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                       warning.lineno)
        with opened:
            yield opened
    finally:
        if client is not None:
            client.close()


def _check_scheduler(index, scheduler):
    from ..distributed.opening import MANIFEST

    if scheduler is not None and not _sharded(index):
        raise click.UsageError(f"--scheduler runs a sharded index on Dask, and {index} is not "
                               f"one (it has no {MANIFEST}); leave --scheduler out")


def _sharded(path):
    """Whether ``path`` is a sharded index (for the options and output only
    one kind has; what a command does to either goes through the library).
    Telling them apart loads neither the sharded index nor Dask."""
    from ..distributed.opening import is_sharded

    return is_sharded(path)


def _refuse_sharded(path):
    """NotAnIndexError naming the shards, for a command of one index given a
    sharded one."""
    from ..errors import NotAnIndexError

    if _sharded(path) and not os.path.isfile(os.path.join(path, "catalog.sqlite")):
        raise NotAnIndexError(
            f"{path} is a sharded index; this command works on one index: give it a shard "
            f"({os.path.join(path, 'shard-000')}, ...), or use search, add, info, gram, get, "
            "delete, compact, verify, upgrade or knn-graph, which take a sharded index")


def _refuse_shard_writes(path):
    """NotAnIndexError for a command that writes to ``path`` when it is a
    shard of a sharded index (its parent has a manifest): a key written to
    one shard directly may belong to another, and the sharded index's
    insertion order would not know it. Reading a shard is fine."""
    from ..errors import NotAnIndexError

    parent = os.path.dirname(os.path.abspath(path))
    if _sharded(parent):
        raise NotAnIndexError(
            f"{path} is a shard of the sharded index {parent}; write through the sharded "
            f"index (give {parent} to add, delete, compact or verify --repair): a key written "
            "to one shard directly may belong to another. Reading a shard on its own is fine")


def _snippet(text, width=60):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


_p_option = click.option("-p", "p", default=None, metavar="P", type=P_ORDER,
                         help="Order p of S_p: a number >= 1 or 'inf' (default: the index's).")
_roots_option = click.option("--roots", "roots", default=None, metavar="0,1,..",
                             type=ROOT_POSITIONS,
                             help="Root positions to slice over (default: all).")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_silent_option = click.option("--silent", is_flag=True, help="No progress bars or notes.")
def _remember_task_timeout(ctx, param, value):
    if value is not None:
        if value <= 0:
            raise click.BadParameter(f"{value:g} is not a number of seconds > 0", ctx, param)
        ctx.meta["task_timeout"] = value
    return value


def _scheduler_option(command):
    """--scheduler and --task-timeout, for the commands that open a sharded
    index (the timeout reaches _open_sharded through the context)."""
    command = click.option(
        "--task-timeout", type=SECONDS, default=None, metavar="SECONDS", expose_value=False,
        callback=_remember_task_timeout,
        help="With --scheduler: how long each step waits for the shards' Dask tasks before it "
             "fails with an error naming them (default: 600).")(command)
    return click.option(
        "--scheduler", default=None, metavar="ADDRESS",
        help="For a sharded index: run it on the Dask scheduler at ADDRESS (e.g. "
             "tcp://host:8786), its shards opened on the workers (default: in this process, on "
             "threads).")(command)
_wait_option = click.option(
    "--wait", "wait", type=SECONDS, default=None, metavar="SECONDS",
    help="If another process is writing to INDEX, wait up to SECONDS for it (default: fail "
         "at once).")
_encoding_option = click.option(
    "--encoding", default="utf-8", show_default=True, metavar="NAME",
    help="Encoding of the text files read (corpus, queries, stop words, keys): a Python codec "
         "name such as utf-8, cp1252, latin-1 or utf-16. A byte-order mark is skipped; bytes "
         "that do not decode are an error.")
_format_option = click.option(
    "--format", "corpus_format", default="auto", show_default=True,
    type=click.Choice(["auto", "jsonl", "csv", "tsv", "lines", "plain-lines", "text", "dir"]),
    help="Corpus format: JSON lines, CSV or TSV with a header row, label<TAB>text lines, one "
         "document per plain line, one text file, or a directory of .txt (auto: by the file's "
         "name, .jsonl .csv .tsv .tab, then by its first lines).")


def _recipe_text(recipe):
    """One line for a build's recipe (from its report or `info`)."""
    if recipe is None:
        return "none recorded (made with SobolevIndex.create, or by an earlier release)"
    edges = recipe["edges"] + (f" ({recipe['k']} nearest nodes)" if recipe.get("k") else "")
    parts = [f"{recipe['recipe']}: edges {edges}, {recipe['roots']} root(s)"]
    if "weighting" in recipe:
        parts.append(f"{recipe['weighting']} weights, {recipe['stopwords']} stop words")
    if "diagram_weights" in recipe:
        parts.append(f"{recipe['diagram_weights']} weights")
    given = recipe.get("given") or []
    if given:
        parts.append("given: " + ", ".join(given))
    return "; ".join(parts)
