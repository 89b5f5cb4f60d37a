"""The ``sobolev-index`` command line (installed as ``sobolev_index.cli``).

Commands hold no logic of their own: they parse options, call the Python
API, and print. Data goes to stdout (a table, or JSON with ``--json``);
progress bars and notes go to stderr. A library error becomes one
``Error: ...`` line with a hint and exit code 1.
"""
import contextlib
import csv
import io
import json
import math
import os
import sys
import time
import warnings

import click

from .. import __version__
from ..errors import DiskFullError, SkippedDocumentsWarning
from .params import (
    P_ORDER,
    ROOT_POSITIONS,
    SECONDS,
    columns,
    columns_options,
    parse_p,
    parse_roots,
    refuse_columns,
)

__all__ = ["main"]

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

# The library's messages name Python arguments; on the command line the
# same advice names the options.
_CLI_WORDS = [
    ("(try fold_case)", "(try --fold-case)"),
    ("(skip_empty=True, --skip-empty)", "(--skip-empty)"),
    ("(settings=text_settings(stopwords=()), --stopwords none)", "(--stopwords none)"),
    ("delete it first, upsert it, or leave it out with skip_existing",
     "delete it first, or use --upsert or --skip-existing"),
    ("open it with mode='r' to read, or pass timeout=SECONDS to wait for the writer",
     "commands that only read need no lock; pass --wait SECONDS to wait for the writer"),
    ("open it with mode='a'", "use a command that writes"),
    ("; open it with mode='r' to read it", "; commands that only read work on it"),
    ("run verify() and", "run `sobolev-index verify INDEX` and"),
    ("with SobolevIndex.upgrade(path)", "with `sobolev-index upgrade INDEX`"),
    ("or open it with mode='r' to read it as it is", "or use commands that only read"),
    ("verify(repair=True) moves it", "`sobolev-index verify --repair INDEX` moves it"),
    ("(format 'lines', 'plain-lines' or 'jsonl'; --format on the command line)",
     "(--format lines, plain-lines or jsonl)"),
    ("(encoding 'cp1252', 'latin-1', 'utf-16', ...; --encoding on the command line)",
     "(--encoding NAME, e.g. cp1252, latin-1 or utf-16)"),
    ("(format 'lines', 'plain-lines', 'jsonl', 'csv' or 'tsv'; --format on the command line)",
     "(--format lines, plain-lines, jsonl, csv or tsv)"),
    ("(text_column=, key_column=, label_column=; --text-column NAME ... on the command line)",
     "(--text-column NAME; --key-column and --label-column name the others)"),
    ("is format 'lines' (--format lines on the command line)", "is --format lines"),
    ("(vectors=; --vectors FILE)", "(--vectors FILE)"),
    ("(key_column=False; --key-column none on the command line)", "(--key-column none)"),
    ("(store_text=False, --no-text)", "(--no-text)"),
]


def _cli_words(message):
    for python, cli in _CLI_WORDS:
        message = message.replace(python, cli)
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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sobolev-index")
@click.option("--check", is_flag=True,
              help="Hash every segment file of an index when a command opens it, and refuse a "
                   "damaged one (graph.h5 is always checked). Reads the whole index first.")
@click.pass_context
def main(ctx, check):
    """Exact nearest-neighbour search for bags of words and points under
    Sobolev transport.

    Start with `sobolev-index quickstart DIR`, which builds an index from
    Python's own documentation and shows every command at work.
    """
    ctx.obj = {"check": check}


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
    """The index at ``path``; unlisted segment files found at open are one
    ``warning:`` line (none with ``quiet_unlisted``: the command deals with
    them)."""
    from ..errors import (
        CorruptIndexError,
        NotAnIndexError,
        UnlistedSegmentsWarning,
        UnsupportedFormatError,
    )
    from ..index import SobolevIndex

    _refuse_sharded(path)
    if mode == "a":
        _refuse_shard_writes(path)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnlistedSegmentsWarning)
            opened = SobolevIndex.open(path, mode=mode, timeout=timeout,
                                       check=_check_segments())
        for warning in caught:
            if issubclass(warning.category, UnlistedSegmentsWarning) and not quiet_unlisted:
                _note(f"warning: {_cli_words(str(warning.message))}")
            elif not issubclass(warning.category, UnlistedSegmentsWarning):
                warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                       warning.lineno)
        return opened
    except CorruptIndexError as exc:
        # Damage found while opening: verify opens the index the same way,
        # so its hint would go in a circle.
        exc.at_open = not isinstance(exc, (NotAnIndexError, UnsupportedFormatError))
        raise


# The file that makes a directory a sharded index (distributed/manifest.py);
# looked for here so that commands on ordinary indexes never import Dask.
_MANIFEST = "manifest.json"


def _sharded(path):
    """Whether ``path`` is a sharded index (it has a manifest)."""
    return os.path.isfile(os.path.join(path, _MANIFEST))


def _check_scheduler(index, scheduler):
    if scheduler is not None and not _sharded(index):
        raise click.UsageError(f"--scheduler runs a sharded index on Dask, and {index} is not "
                               f"one (it has no {_MANIFEST}); leave --scheduler out")


@contextlib.contextmanager
def _open_sharded(path, mode="r", timeout=None, scheduler=None):
    """The sharded index at ``path``: on the Dask scheduler at ``scheduler``,
    or in this process (threads) without one."""
    from ..distributed import ShardedIndex
    from ..distributed.files import connect

    client = connect(scheduler) if scheduler else None
    ctx = click.get_current_context(silent=True)
    task_timeout = ctx.meta.get("task_timeout") if ctx is not None else None
    bound = {} if task_timeout is None else {"task_timeout": task_timeout}
    try:
        with ShardedIndex.open(path, mode=mode, client=client, timeout=timeout,
                               **bound) as opened:
            yield opened
    finally:
        if client is not None:
            client.close()


def _open_any(path, mode="r", timeout=None, scheduler=None, quiet_unlisted=False):
    """A sharded index (see _open_sharded) or an ordinary one (see _open)."""
    _check_scheduler(path, scheduler)
    if _sharded(path):
        if _check_segments():
            raise click.UsageError(f"--check opens a single index; {path} is a sharded index: "
                                   f"check its shards with `sobolev-index verify {path}`")
        return _open_sharded(path, mode, timeout, scheduler)
    return _open(path, mode, timeout, quiet_unlisted)


@contextlib.contextmanager
def _settings_reader(path, sharded):
    """What holds the build settings (kind, text settings) of the index at
    ``path``, opened for reading in this process: the index, or shard 0 of
    a sharded index (every shard has them). Unlisted segment files are not
    reported here: the command's own open does that."""
    if sharded:
        from ..distributed.manifest import read_manifest

        path = os.path.join(path, read_manifest(path)["shards"][0])
    with _open(path, quiet_unlisted=True) as opened:
        yield opened


def _refuse_sharded(path):
    """NotAnIndexError naming the shards, for a command of one index given a
    sharded one."""
    from ..errors import NotAnIndexError

    if _sharded(path) and not os.path.isfile(os.path.join(path, "catalog.sqlite")):
        raise NotAnIndexError(
            f"{path} is a sharded index; this command works on one index: give it a shard "
            f"({os.path.join(path, 'shard-000')}, ...), or use search, add, info, gram, get, "
            "delete, compact, verify or knn-graph, which take a sharded index")


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


# ------------------------------------------------------------------- build
@main.command()
@click.argument("index", type=click.Path())
@click.option("--corpus", "corpus", multiple=True, metavar="FILE",
              help="Corpus file or directory ('-' for stdin); repeat for several.")
@click.option("--vectors", default=None, metavar="FILE|learn",
              help="Word vectors: word2vec .bin, .vec/.txt (word2vec or GloVe text), or .npy "
                   "with a .vocab file; or 'learn' to learn them from the corpus (PPMI + SVD, "
                   "as `sobolev-index vectors` does; kept in INDEX).")
@click.option("--points", "points", multiple=True, metavar="FILE",
              help="Instead of a corpus: JSONL point clouds {key, points, weights, label} "
                   "(or, with --diagrams, persistence diagram files or folders).")
@click.option("--diagrams", is_flag=True,
              help="--points are persistence diagrams: (birth, death) rows in CSV/text/.npy, "
                   "one per file; key = file name, label = folder name.")
@click.option("--diagram-weights", default=None, type=click.Choice(["uniform", "persistence"]),
              help="Weights of diagram points [default: persistence].")
@click.option("--recipe", default="quality", show_default=True, type=click.Choice(["quality", "fast"]),
              help="Defaults of the options below: 'quality' slices S_p over 10 roots, 'fast' "
                   "uses one (about 10 times faster queries and a fifth of the disk, 1.8 to 2.9 "
                   "points more k-NN error; see docs/quality.md).")
@click.option("--nodes", default=None, type=click.IntRange(2),
              help="Graph nodes M: clusters of the word vectors (or points) [default: every "
                   "word a node, at most 10,000].")
@click.option("--edges", default=None, type=click.Choice(["log", "sqrt", "knn"]),
              help="Graph edges: M ln M random pairs, M^1.5 random pairs, or each node to its "
                   "--neighbours nearest nodes [default: knn].")
@click.option("--neighbours", "k", default=None, type=click.IntRange(1),
              help="Nearest nodes per node with --edges knn [default: 5].")
@click.option("--roots", default=None, type=click.IntRange(1),
              help="Number of tree roots: 1 is the most central node, more slice S_p over "
                   "random roots [default: 10 (quality), 1 (fast)].")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed for the graph (clustering, random edges) and the random roots.")
@click.option("-p", "p", default="1", show_default=True, metavar="P", type=P_ORDER,
              help="Default p of searches: a number >= 1 or 'inf'.")
@click.option("--weighting", default=None, type=click.Choice(["count", "tfidf"]),
              help="Word weights in a document [default: tfidf].")
@click.option("--stopwords", default=None, metavar="none|english|FILE",
              help="Words to drop: none, a built-in English list, or a file (one per line) "
                   "[default: english].")
@click.option("--token-pattern", default=None, metavar="unicode|ascii|REGEX",
              help="Words: 'unicode' (letters and digits of any script, apostrophes inside "
                   "words; text lowercased and NFC-normalised), 'ascii' (the earlier "
                   "default, [a-z0-9][a-z0-9']* on lowercased text), or a regex matched on "
                   "lowercased text [default: unicode].")
@click.option("--fold-case", is_flag=True,
              help="Match vector-file words case-insensitively (for cased vectors like GoogleNews).")
@click.option("--skip-empty", is_flag=True,
              help="Skip documents with no known word (or stop words only) instead of failing.")
@click.option("--no-text", is_flag=True, help="Do not keep document texts in the catalog.")
@click.option("--from-export", "from_export", default=None, metavar="FILE",
              type=click.Path(dir_okay=False),
              help="Rebuild from a file `sobolev-index export` wrote (with --graph-from), "
                   "instead of a corpus or points.")
@click.option("--graph-from", "graph_from", default=None, metavar="INDEX",
              type=click.Path(file_okay=False),
              help="With --from-export: the index whose graph, roots and p the rebuilt index "
                   "takes (the export's source, or a copy of it).")
@_format_option
@columns_options
@_encoding_option
@_silent_option
@_json_option
def build(index, corpus, vectors, points, diagrams, diagram_weights, recipe, nodes, edges, k,
          roots, seed, p, weighting, stopwords, token_pattern, fold_case, skip_empty, no_text,
          from_export, graph_from, corpus_format, key_column, text_column, label_column,
          encoding, silent, as_json):
    """Build INDEX (a new directory) from a corpus and word vectors, or from
    point clouds or persistence diagrams (--points), or again from an
    export (--from-export FILE --graph-from INDEX).

    Without word vectors, `--vectors learn` learns them from the corpus
    itself. Options left unset come from --recipe; `info` shows what was
    chosen."""
    from ..ingest.documents import LEARNED_VECTORS, text_settings
    from ..ingest.pipelines import build_from_files
    from ..ingest.text import stopwords_from

    if from_export or graph_from:
        from .export import build_from_export_cli

        return build_from_export_cli(index, from_export, graph_from, silent, as_json)
    started = time.perf_counter()
    if points and (corpus or vectors):
        raise click.UsageError("give either --corpus and --vectors, or --points")
    if points:
        refuse_columns(key_column, text_column, label_column, "a point file")
    if not points and not corpus:
        raise click.UsageError("build needs --corpus FILE (a corpus: JSON lines, CSV, TSV, "
                               "text) and --vectors, or --points FILE")
    if not points and not vectors:
        raise click.UsageError(
            "build needs word vectors: --vectors FILE (word2vec .bin, word2vec or fastText "
            ".vec/.txt, GloVe .txt, or .npy with a .vocab file), or --vectors learn to learn "
            "them from the corpus itself (or first `sobolev-index vectors CORPUS OUT.bin`)")
    unset = token_pattern is None and weighting is None and stopwords is None
    settings = None if points or unset else text_settings(
        recipe, pattern=token_pattern, weighting=weighting,
        stopwords=None if stopwords is None else tuple(stopwords_from(stopwords, encoding)))
    progress = _progress(silent)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            built, report = build_from_files(
                index, corpus=corpus, vectors=vectors, points=points, diagrams=diagrams,
                diagram_weights=diagram_weights, corpus_format=corpus_format, settings=settings,
                fold_case=fold_case, skip_empty=skip_empty, store_text=not no_text,
                recipe=recipe, nodes=nodes, edges=edges, k=k, roots=roots, p=parse_p(p),
                seed=seed, progress=progress, encoding=encoding,
                columns=columns(key_column, text_column, label_column))
        finally:
            progress.finish()
    for w in caught:
        _note(f"warning: {_cli_words(str(w.message))}", silent)
    with built:
        info = built.info()
    out = {"index": info["path"], "documents": info["documents"]}
    if report["kind"] == "text":
        out.update({"skipped": len(report["skipped"]), "vocabulary": report["vocabulary"],
                    "words_with_vectors": report["words_with_vectors"],
                    "token_coverage": round(report["token_coverage"], 4)})
        if report.get("learned"):
            out["learned"] = {**report["learned"], "path": os.path.join(
                info["path"], LEARNED_VECTORS)}
    else:
        out.update({"kind": report["kind"], "points": report["points"], "dim": report["dim"]})
    out.update({"nodes": info["nodes"], "edges": info["edges"], "roots": info["roots"],
                "recipe": report["recipe"], "bytes": info["bytes"],
                "seconds": round(time.perf_counter() - started, 3)})
    if as_json:
        _echo_json(out)
        return
    if report["kind"] == "text":
        click.echo(f"built {out['index']}: {out['documents']:,} documents"
                   + (f" ({out['skipped']} skipped: no known word, or stop words only)"
                      if out["skipped"] else ""))
        click.echo(f"  words: {out['words_with_vectors']:,} of {out['vocabulary']:,} have vectors "
                   f"({out['token_coverage']:.1%} of tokens)")
        if "learned" in out:
            from .vectors import learned_text

            click.echo(f"  vectors: {learned_text(out['learned'])} -> {out['learned']['path']}")
    else:
        click.echo(f"built {out['index']}: {out['documents']:,} point sets ({out['kind']}), "
                   f"{out['points']:,} points in {out['dim']} dimensions")
    click.echo(f"  graph: {out['nodes']:,} nodes, {out['edges']:,} edges, root(s) {out['roots']}")
    click.echo(f"  recipe: {_recipe_text(out['recipe'])}")
    click.echo(f"  {out['bytes'] / 1e6:.1f} MB on disk, {out['seconds']:.1f} s")


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


# --------------------------------------------------------------------- add
@main.command()
@click.argument("index", type=click.Path())
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--vectors", default=None, metavar="FILE|none",
              help="Vectors for words the index does not know yet (default: the build's file, "
                   "if it still exists; 'none': ignore new words).")
@click.option("--upsert", is_flag=True, help="Replace documents whose keys exist.")
@click.option("--skip-empty", is_flag=True,
              help="Skip documents with no known word (or stop words only) instead of failing.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1),
              help="Documents per committed batch.")
@click.option("--no-text", is_flag=True, help="Do not keep document texts in the catalog.")
@click.option("--skip-existing", is_flag=True,
              help="Leave out documents whose keys are in the index already (to resume an "
                   "interrupted add).")
@click.option("--allow-empty", is_flag=True,
              help="Succeed when the input holds no documents (default: an error, exit 1).")
@_format_option
@columns_options
@_encoding_option
@_silent_option
@_json_option
@_wait_option
@_scheduler_option
def add(index, files, vectors, upsert, skip_empty, batch_size, no_text, skip_existing,
        allow_empty, corpus_format, key_column, text_column, label_column, encoding, silent,
        as_json, wait, scheduler):
    """Add documents from FILEs, directories, JSONL or stdin ('-') to INDEX.

    Each batch is committed on its own: after Ctrl-C, the batches already
    added stay, the index is consistent, and the same command with
    --skip-existing adds the rest. On a sharded index, a batch is committed
    by each shard on its own (not atomic across shards), and words the
    index does not know are ignored: its words table does not grow.
    """
    if upsert and skip_existing:
        raise click.UsageError("--upsert replaces existing documents and --skip-existing leaves "
                               "them out: give one of them")
    from ..ingest.documents import stored_vectors_path, vectors_learned
    from ..ingest.pipelines import add_files, read_files

    sharded = _sharded(index)
    if sharded and vectors not in (None, "none"):
        raise click.UsageError(
            "--vectors gives new words nodes, which a sharded index cannot do (every shard's "
            "words table would have to change at once); words it does not know are ignored: "
            "leave --vectors out")
    started = time.perf_counter()
    progress = _progress(silent)
    learned = False
    # The input is read before the write lock is taken: a pipe whose writer
    # is slow or never comes must not keep other writers out. What would
    # refuse the write comes first, so that no input is read in vain.
    _check_scheduler(index, scheduler)
    if not sharded:
        _refuse_shard_writes(index)
    with warnings.catch_warnings(record=True) as read_warnings:
        warnings.simplefilter("always")
        with _settings_reader(index, sharded) as settings:
            files_read = read_files(settings, files, corpus_format=corpus_format,
                                    encoding=encoding,
                                    columns=columns(key_column, text_column, label_column))
    for w in read_warnings:
        _note(f"warning: {_cli_words(str(w.message))}", silent)
    with _open_any(index, "a", timeout=wait, scheduler=scheduler) as opened:
        if sharded:
            from ..distributed.files import add_files
        elif vectors is None:
            learned = vectors_learned(opened)
            # Vectors learned from the build's corpus know no word the index
            # does not know already: they place nothing, and are not used.
            vectors = stored_vectors_path(opened, placing=True)
            if vectors:
                _note(f"new words get nodes from {vectors} (--vectors none to skip)", silent)
        elif vectors == "none":
            vectors = None
        options = {} if sharded else {"vectors": vectors}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                report = add_files(opened, files_read, skip_empty=skip_empty,
                                   batch_size=batch_size, upsert=upsert,
                                   store_text=not no_text, progress=progress,
                                   skip_existing=skip_existing, **options)
        except (KeyboardInterrupt, DiskFullError) as exc:
            progress.finish()
            done = getattr(exc, "added", None)
            count = "" if done is None else f"{len(done):,} documents were committed before it; "
            if upsert:
                resume = "run the same command again to redo it"
            elif getattr(exc, "resumable", True):
                resume = "run the same command with --skip-existing to add the rest"
            else:
                resume = ("the input has no keys, so the rest cannot be told apart: add the "
                          "documents not yet added")
            if isinstance(exc, DiskFullError):
                raise click.ClickException(f"{_cli_words(exc.strerror)}; {count}the index is "
                                           f"consistent; free some space and {resume}") from None
            click.echo(f"Interrupted: {count}the index is consistent; {resume}.", err=True)
            sys.exit(130)
        finally:
            progress.finish()
        for w in caught:
            # Skipped documents are listed below, from the report.
            if not issubclass(w.category, SkippedDocumentsWarning):
                _note(f"warning: {_cli_words(str(w.message))}", silent)
        total = len(opened)
    if report["read"] == 0 and not allow_empty:
        # Nothing was written; an empty input is most often a mistake (a
        # wrong file, a pipe whose writer failed), so it is not a success.
        raise click.ClickException(
            f"no documents in {', '.join(files)}: nothing was added (hint: check the input and "
            "its --format; --allow-empty accepts an empty input)")
    replaced = report.get("replaced", 0)
    out = {"read": report["read"], "added": len(report["added"]) - replaced,
           "replaced": replaced, "existing": len(report.get("existing", [])),
           "skipped": report["skipped"], "new_words": report["new_words"],
           "unknown_words": report.get("unknown_words", 0),
           "unknown_tokens": report.get("unknown_tokens", 0),
           "unknown_examples": report.get("unknown_examples", []), "documents": total,
           "seconds": round(time.perf_counter() - started, 3)}
    if as_json:
        _echo_json(out)
        return
    done = f"added {out['added']:,} documents"
    if upsert:
        done += f" and replaced {replaced:,}"
    if skip_existing:
        done += f", left out {out['existing']:,} already in the index"
    click.echo(f"{done} ({out['new_words']} new words); "
               f"{total:,} in the index; {out['seconds']:.1f} s")
    if out["skipped"]:
        click.echo(f"skipped {len(out['skipped'])} with no known word (or stop words only): "
                   f"{', '.join(map(str, out['skipped'][:5]))}" + (" ..." if len(out["skipped"]) > 5 else ""))
    if out["unknown_words"]:
        if sharded:
            where = "a sharded index does not place new words"
        elif vectors:
            where = f"no vector in {vectors}"
        elif learned:
            where = ("the index's vectors were learned from its build's corpus, so they have "
                     "none; --vectors FILE places new words")
        else:
            where = "no vector file to place new words: --vectors FILE"
        click.echo(f"dropped {out['unknown_words']:,} words the index does not know "
                   f"({out['unknown_tokens']:,} occurrences; {where}): "
                   + ", ".join(out["unknown_examples"])
                   + (" ..." if out["unknown_words"] > len(out["unknown_examples"]) else ""))


# ------------------------------------------------------------------ search
@main.command()
@click.argument("index", type=click.Path())
@click.option("--text", "texts", multiple=True, metavar="TEXT", help="Query text (repeatable).")
@click.option("--key", "keys", multiple=True, metavar="KEY", help="A stored document as query (repeatable).")
@click.option("--file", "query_file", default=None, metavar="F",
              help="Queries from a file ('-' for stdin): one per line of plain text, or one per "
                   "document of a corpus (--format); for a point index, point clouds or a "
                   "diagram file.")
@click.option("-k", "k", default=None, type=click.IntRange(1),
              help="Neighbours per query.  [default: 10]")
@click.option("--radius", default=None, type=float, metavar="R",
              help="Every document within distance R instead of the k nearest (0: copies of "
                   "the query).")
@click.option("--limit", default=None, type=click.IntRange(1), metavar="N",
              help="With --radius: at most the N nearest per query.")
@_p_option
@_roots_option
@click.option("--label", "labels", multiple=True, help="Only documents with this label (repeatable).")
@click.option("--vectors", default=None, metavar="FILE",
              help="Vectors to place query words the index does not know.")
@_format_option
@columns_options
@_encoding_option
@click.option("--stats", "show_stats", is_flag=True,
              help="Also print what each query read and the time of each phase.")
@_json_option
@_scheduler_option
def search(index, texts, keys, query_file, k, radius, limit, p, roots, labels, vectors,
           corpus_format, key_column, text_column, label_column, encoding, show_stats, as_json,
           scheduler):
    """The k nearest documents of each query, by ascending S_p, or with
    --radius every document within that distance.

    Queries are answered in this order: --key ones, then --text ones, then
    those of --file. --json prints one list of {"key", "distance", "label"}
    per query, in that order; with --stats, {"results": those lists,
    "stats": {...}}.
    """
    from ..ingest.pipelines import query_measures

    if not (texts or keys or query_file):
        raise click.UsageError("give a query: --text TEXT, --key KEY or --file F")
    sharded = _sharded(index)
    if sharded:
        from ..distributed.files import query_measures
    where = {"label": list(labels)} if labels else None
    with _open_any(index, scheduler=scheduler) as opened, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        query_names, results = [], []
        options = dict(k=k, p=parse_p(p), roots=parse_roots(roots), where=where,
                       radius=radius, limit=limit, stats=show_stats)
        if keys:
            results.append(opened.search(list(keys), **options))
            query_names += [f"key {key}" for key in keys]
        measures, names = query_measures(opened, texts, [query_file] if query_file else [], vectors,
                                         corpus_format, encoding,
                                         columns(key_column, text_column, label_column))
        if measures:
            results.append(opened.search(measures, **options))
            query_names += [_snippet(name, 50) for name in names]
        # One line per distinct warning, although each search call gives one.
        for message in dict.fromkeys(_cli_words(str(w.message)) for w in caught):
            _note(f"warning: {message}")
        records = [r for result in results for r in result.to_records()]
        truncated = [t for result in results for t in result.truncated]
        if not as_json:
            texts_of = _stored_texts(opened, {hit["key"] for hits in records for hit in hits})
    stats = _joined_stats([result.stats for result in results]) if show_stats else None
    if as_json:
        _echo_json(records if stats is None else {"results": records, "stats": stats})
        return
    for name, hits, cut in zip(query_names, records, truncated):
        click.echo(f"query: {name}")
        if radius is not None and not hits:
            click.echo(f"no document within {radius:g}")
        else:
            click.echo(_table(["rank", "distance", "key", "label", "text"],
                              [[j + 1, f"{hit['distance']:.4f}", hit["key"], hit["label"],
                                _snippet(texts_of.get(hit["key"], ""), 50)]
                               for j, hit in enumerate(hits)]))
        if cut:
            click.echo(f"(more within the radius; the {limit} nearest are shown)")
        click.echo("")
    if stats is not None:
        click.echo("statistics:")
        click.echo(_table(
            ["query", "segments", "rows", "bounded", "refined", "read", "blocks", "scored",
             "exact", "ms postings", "ms bounds", "ms scoring", "ms exact"],
            [[_snippet(name, 30), q["segments"], q["rows"], q["bounded"], q["refined"],
              q["rows_read"], q["blocks"], q["blocks_scored"], q["exact"]]
             + [f"{1e3 * q['seconds'].get(phase, 0.0):.2f}"
                for phase in ("postings", "bounds", "scoring", "exact")]
             for name, q in zip(query_names, stats["queries"])]))
        # A single index times features, search and names; a sharded one its
        # fan-out to the shards (search) and the merge (the phases above are
        # summed over the shards).
        seconds = stats["seconds"]
        click.echo("wall time: " + ", ".join(f"{phase} {1e3 * seconds[phase]:.2f} ms"
                                             for phase in ("features", "search", "merge",
                                                           "names", "total")
                                             if phase in seconds))


def _joined_stats(parts):
    """The statistics of the search calls of one command as one: counts
    and seconds added, the queries' lists one after the other."""
    out = {"queries": [q for part in parts for q in part["queries"]], "seconds": {}}
    for part in parts:
        for name, value in part.items():
            if name == "seconds":
                for phase, spent in value.items():
                    out["seconds"][phase] = out["seconds"].get(phase, 0.0) + spent
            elif name != "queries":
                out[name] = out.get(name, 0) + value
    return out


def _stored_texts(index, keys):
    out = {}
    for key in keys:
        fields = index.get(key).get("fields") or {}
        if isinstance(fields.get("text"), str):
            out[key] = fields["text"]
    return out


# --------------------------------------------------------- get and delete
@main.command()
@click.argument("index", type=click.Path())
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
def get(index, keys):
    """Print stored documents as a JSON list: measure, label, fields."""
    with _open_any(index) as opened:
        docs = []
        for key in keys:
            doc = opened.get(key)
            docs.append({"key": doc["key"], "label": doc["label"], "fields": doc["fields"],
                         "added_at": doc["added_at"], "nodes": doc["nodes"].tolist(),
                         "masses": doc["masses"].tolist()})
    _echo_json(docs)


@main.command()
@click.argument("index", type=click.Path())
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@_json_option
@_wait_option
def delete(index, keys, as_json, wait):
    """Delete documents by key (all or none; on a sharded index each shard
    deletes its keys on its own)."""
    with _open_any(index, "a", timeout=wait) as opened:
        count = opened.delete(list(keys))
        left = len(opened)
    if as_json:
        _echo_json({"deleted": count, "documents": left})
    else:
        click.echo(f"deleted {count} document(s); {left:,} left")


@main.command()
@click.argument("index", type=click.Path())
@_json_option
@_wait_option
def compact(index, as_json, wait):
    """Merge the segments and drop deleted documents.

    Into one segment; past 2^27 nonzero features, runs of segments up to
    that per-segment cap, which bounds a merge's memory."""
    started = time.perf_counter()
    with _open_any(index, "a", timeout=wait) as opened:
        before = opened.info()
        opened.compact()
    # After close: the catalog's log is folded in. (Any unlisted files were
    # reported by the first open.)
    with _open_any(index, quiet_unlisted=True) as opened:
        after = opened.info()
    out = {"segments_before": before["segments"], "segments": after["segments"],
           "deleted_dropped": before["deleted"], "bytes_before": before["bytes"],
           "bytes": after["bytes"], "seconds": round(time.perf_counter() - started, 3)}
    if as_json:
        _echo_json(out)
    else:
        click.echo(f"compacted: {out['segments_before']} -> {out['segments']} segment(s), "
                   f"{out['deleted_dropped']} deleted document(s) dropped, "
                   f"{out['bytes_before'] / 1e6:.1f} -> {out['bytes'] / 1e6:.1f} MB")


@main.command()
@click.argument("index", type=click.Path())
@_json_option
@_wait_option
def upgrade(index, as_json, wait):
    """Rewrite an index written by an older release in this release's format.

    Releases older than this one cannot read the index afterwards. Safe to
    interrupt: run it again to finish."""
    from .. import SobolevIndex

    _refuse_sharded(index)
    _refuse_shard_writes(index)
    started = time.perf_counter()
    out = SobolevIndex.upgrade(index, timeout=wait)
    out["seconds"] = round(time.perf_counter() - started, 3)
    if as_json:
        _echo_json(out)
    elif out["from_version"] == out["to_version"] and not out["segments_rewritten"]:
        click.echo(f"already in format {out['to_version']}; nothing to do")
    else:
        click.echo(f"upgraded from format {out['from_version']} to {out['to_version']}: "
                   f"{out['segments_rewritten']} segment(s) rewritten, "
                   f"{out['documents']:,} documents")


@main.command()
@click.argument("index", type=click.Path())
@click.option("--repair", is_flag=True,
              help="Remove temporary and merged-away files; move segment files no commit lists "
                   "to INDEX/lost+found/.")
@_json_option
@_wait_option
def verify(index, repair, as_json, wait):
    """Check checksums, the catalog and a sample of features; exit 1 if a problem is found.

    Works on an index that cannot be opened (a missing or damaged file)."""
    from .. import SobolevIndex

    if _sharded(index):
        return _verify_sharded(index, repair, as_json, wait)
    if repair:
        _refuse_shard_writes(index)
    report = SobolevIndex.verify_path(index, repair=repair, timeout=wait)
    if as_json:
        _echo_json(report)
    else:
        state = "ok" if report["ok"] else "PROBLEMS FOUND"
        if report["documents"] is None:
            click.echo(f"{state}: the catalog could not be read in full")
        else:
            click.echo(f"{state}: {report['documents']:,} documents in {report['segments']} "
                       f"segment(s), {report['checked_rows']} rows recomputed")
        for problem in report["problems"]:
            click.echo(f"  problem: {_cli_words(problem)}")
        for orphan in report["orphans"]:
            click.echo(f"  orphan file: {orphan}" + (" (removed)" if orphan in report["repaired"]
                                                     else ""))
        for entry in report["unlisted"]:
            if entry.get("moved_to"):
                held = ("unreadable" if entry["documents"] is None
                        else f"{entry['documents']:,} document(s)")
                click.echo(f"  segment not in the catalog: {entry['file']} ({held}), moved to "
                           f"{entry['moved_to']}")
    if not report["ok"]:
        sys.exit(1)


@main.command()
@click.argument("index", type=click.Path())
@click.option("--dry-run", is_flag=True,
              help="Report what would be restored; move and add nothing.")
@click.option("--replace-newer", is_flag=True,
              help="Where a key is live but its lost version was added later, replace the live "
                   "document with the lost one (default: keep the live one, and say so).")
@_json_option
@_wait_option
def recover(index, dry_run, replace_newer, as_json, wait):
    """Add again the documents of segment files no commit lists.

    After the catalog lost commits (a deleted catalog.sqlite-wal), their
    segment files stay in INDEX/segments/ (open warns) or were moved to
    INDEX/lost+found/ by verify --repair. This moves the first kind there,
    then adds each document of lost+found/ whose key is not live, as a new
    document. Left out: documents the catalog still has (or deleted since),
    live keys (unless --replace-newer and the lost version is newer), older
    versions. The files read then move to lost+found/recovered/; nothing is
    removed. A write killed before its commit leaves such a file too: its
    documents, never acknowledged, are restored as well. Lists each key
    restored or left out, and why.
    """
    if _sharded(index):
        raise click.ClickException(
            f"{index} is a sharded index; recover works on one index at a time, and a "
            "document restored into a shard directly would bypass the sharded index's routing "
            "(hint: verify the sharded index; restore a shard from a backup)")
    _refuse_shard_writes(index)
    with _open(index, "a", timeout=wait, quiet_unlisted=True) as opened:
        report = opened.recover(dry_run=dry_run, replace_newer=replace_newer)
        report["documents"] = len(opened)
    if as_json:
        _echo_json(report)
        return
    verb = "would restore" if dry_run else "restored"
    for entry in report["restored"]:
        how = ", replacing the live one" if entry["replaced"] else ""
        click.echo(f"{verb} {entry['key']} (id {entry['id']} in {entry['file']}{how})")
    for entry in report["skipped"]:
        what = entry["key"] if entry["key"] is not None else f"document id {entry['id']}"
        click.echo(f"left out {what} ({entry['file']}): {entry['reason']}")
    for entry in report["unreadable"]:
        click.echo(f"could not read {entry['file']}: {_cli_words(entry['reason'])}")
    if report["moved"]:
        click.echo(f"moved {len(report['moved'])} unlisted segment file(s) to lost+found/")
    click.echo(f"{verb} {len(report['restored']):,} document(s), left out "
               f"{len(report['skipped']):,}, from {len(report['files'])} file(s); "
               f"{report['documents']:,} in the index")
    if report["unreadable"]:
        sys.exit(1)


def _verify_sharded(index, repair, as_json, wait):
    """verify on a sharded index: every shard, and its agreement with the
    manifest. A shard that cannot be opened stops it with an error naming
    the shard (verify that shard's directory on its own)."""
    with _open_sharded(index, "a" if repair else "r", timeout=wait) as opened:
        report = opened.verify(repair=repair)
    if as_json:
        _echo_json(report)
    else:
        state = "ok" if report["ok"] else "PROBLEMS FOUND"
        documents = "?" if report["documents"] is None else f"{report['documents']:,}"
        click.echo(f"{state}: {documents} documents in {len(report['shards'])} shards")
        for problem in report["problems"]:
            click.echo(f"  problem: {_cli_words(problem)}")
    if not report["ok"]:
        sys.exit(1)


@main.command()
@click.argument("index", type=click.Path())
@_json_option
@_scheduler_option
def info(index, as_json, scheduler):
    """Counts, graph, roots, segments and size on disk; for a sharded
    index, also each shard's."""
    from ..ingest.pipelines import index_details

    sharded = _sharded(index)
    if sharded:
        from ..distributed.files import sharded_details as index_details
    with _open_any(index, scheduler=scheduler) as opened:
        out = index_details(opened)
    if as_json:
        _echo_json(out)
        return
    rows = [["documents", f"{out['documents']:,}"], ["deleted", f"{out['deleted']:,}"],
            ["segments", out["segments"]], ["nodes", f"{out['nodes']:,}"],
            ["edges", f"{out['edges']:,}"], ["roots", ", ".join(map(str, out["roots"]))],
            ["default p", out["p"]], ["bytes", f"{out['bytes']:,}"]]
    older = out.get("segments_in_older_format", 0)
    if older:
        rows.append(["format", f"{out['format_version']}, {older} segment(s) in an older "
                               "format: `sobolev-index upgrade INDEX` rewrites them"])
    if out.get("words") is not None:
        rows += [["words", f"{out['words']:,}"], ["weighting", out["weighting"]],
                 ["stopwords", f"{out['stopwords']:,}"], ["tokens", out["token_pattern"]]]
    rows.append(["recipe", _recipe_text(out.get("recipe"))])
    if sharded:
        rows.append(["shards", len(out["shards"])])
    click.echo(_table(["", out["path"]], rows))
    if sharded:
        # Each shard's own files; the total adds the manifest.
        click.echo("")
        click.echo(_table(
            ["shard", "documents", "deleted", "segments", "bytes", "path"],
            [[s["shard"], f"{s['documents']:,}", f"{s['deleted']:,}", s["segments"],
              f"{s['bytes']:,}", s["path"]] for s in out["shards"]]
            + [["total", f"{out['documents']:,}", f"{out['deleted']:,}", out["segments"],
                f"{out['bytes']:,}", ""]]))


# --------------------------------------------------------- distance, gram
@main.command()
@click.argument("index", type=click.Path())
@click.argument("a")
@click.argument("b")
@click.option("--text", "as_text", is_flag=True, help="A and B are texts, not keys.")
@_p_option
@_roots_option
@_json_option
def distance(index, a, b, as_text, p, roots, as_json):
    """S_p between two stored keys (or, with --text, two texts)."""
    from ..ingest.pipelines import query_measures

    with _open(index) as opened:
        if as_text:
            (a_item, b_item), _ = query_measures(opened, texts=[a, b])
        else:
            a_item, b_item = a, b
        value = opened.distance(a_item, b_item, p=parse_p(p), roots=parse_roots(roots))
        used_p = opened.p if p is None else parse_p(p)
    if as_json:
        _echo_json({"a": a, "b": b, "p": "inf" if math.isinf(used_p) else used_p, "distance": value})
    else:
        click.echo(f"{value:.10g}")


@main.command()
@click.argument("index", type=click.Path())
@click.argument("output", type=click.Path(), required=False)
@click.option("--keys", "keys", multiple=True, metavar="KEY", help="Documents (repeatable).")
@click.option("--keys-file", default=None, type=click.Path(exists=True, dir_okay=False),
              help="A file with one key per line.")
@click.option("--label", "labels", multiple=True, help="All documents with this label (repeatable).")
@_p_option
@_roots_option
@_encoding_option
@click.option("--kernel", "kernel_t", default=None, type=float, metavar="T",
              help="Write the kernel exp(-T d) instead of distances d.")
@click.option("--power", is_flag=True,
              help="Use d = S_p^p (sum over roots of eta S_p^p): positive definite kernels for p <= 2.")
@click.option("--zarr", "zarr_out", default=None, metavar="OUT", type=click.Path(),
              help="For a sharded index, instead of OUTPUT: write the matrix to a new Zarr "
                   "array OUT in blocks, computed where the shards are (for a matrix larger "
                   "than memory).")
@click.option("--chunk", default=None, type=click.IntRange(1), metavar="N",
              help="With --zarr: rows and columns per block [default: 4096].")
@_silent_option
@_json_option
@_scheduler_option
def gram(index, output, keys, keys_file, labels, p, roots, encoding, kernel_t, power, zarr_out,
         chunk, silent, as_json, scheduler):
    """Write the distance (or kernel) matrix of documents to OUTPUT (.npy or .h5),
    or of a sharded index's documents to a Zarr array (--zarr OUT).

    An .h5 file also holds the keys and labels in row order; for .npy,
    --json prints them. A Zarr array holds the keys in its attributes
    (``keys``, with ``p``, ``roots``, ``t`` and ``power``); without --keys
    it has every document, in insertion order.
    """
    import numpy as np

    from ..ingest.pipelines import read_keys

    if (output is None) == (zarr_out is None):
        raise click.UsageError("give OUTPUT (.npy or .h5), or --zarr OUT for a sharded index")
    if chunk is not None and zarr_out is None:
        raise click.UsageError("--chunk sets the blocks of --zarr OUT; give --zarr OUT")
    sharded = _sharded(index)
    if zarr_out is not None and not sharded:
        raise click.UsageError(f"--zarr writes the matrix of a sharded index, and {index} is "
                               "not one; give OUTPUT (.npy or .h5)")
    if sharded and zarr_out is None:
        raise click.UsageError(f"{index} is a sharded index: its matrix is written to Zarr "
                               "(--zarr OUT), block by block")
    if zarr_out is not None and labels:
        raise click.UsageError("--label chooses documents of a single index; for --zarr give "
                               "--keys or --keys-file (default: every document)")
    if output is not None and not output.endswith((".npy", ".h5", ".hdf5")):
        raise click.BadParameter(f"{output!r}; expected a .npy or .h5 file name", param_hint="OUTPUT")
    wanted = list(keys)
    if keys_file:
        wanted += read_keys(keys_file, encoding)
    started = time.perf_counter()
    if zarr_out is not None:
        _check_scheduler(index, scheduler)
        options = {} if chunk is None else {"chunk": chunk}
        with _open_sharded(index, scheduler=scheduler) as opened:
            written = opened.write_distance_matrix(
                zarr_out, keys=wanted or None, p=parse_p(p), roots=parse_roots(roots),
                t=kernel_t, power=power, **options)
        out = {**written, "output": zarr_out, "rows": written["shape"][0],
               "kind": "kernel" if kernel_t else "distance",
               "seconds": round(time.perf_counter() - started, 3)}
        if as_json:
            _echo_json(out)
        else:
            click.echo(f"wrote a {out['rows']} x {out['rows']} {out['kind']} matrix to "
                       f"{zarr_out} in blocks of {out['chunks'][0]} ({out['seconds']:.2f} s)")
        return
    _check_scheduler(index, scheduler)
    with _open(index) as opened:
        matrix, row_keys, row_labels = opened.gram(wanted, list(labels), p=parse_p(p),
                                                   roots=parse_roots(roots), t=kernel_t,
                                                   power=power)
    if output.endswith(".npy"):
        np.save(output, matrix)
    else:
        import h5py

        with h5py.File(output, "w") as f:
            f.create_dataset("matrix", data=matrix)
            f.create_dataset("keys", data=np.array(row_keys, dtype=object), dtype=h5py.string_dtype())
            f.create_dataset("labels", data=np.array([lab or "" for lab in row_labels], dtype=object),
                             dtype=h5py.string_dtype())
            f.attrs["kind"] = "kernel" if kernel_t else "distance"
    out = {"output": output, "rows": len(row_keys), "kind": "kernel" if kernel_t else "distance",
           "keys": row_keys, "labels": row_labels,
           "seconds": round(time.perf_counter() - started, 3)}
    if as_json:
        _echo_json(out)
    else:
        click.echo(f"wrote a {len(row_keys)} x {len(row_keys)} {out['kind']} matrix to {output} "
                   f"({out['seconds']:.2f} s)")


@main.command("knn-graph")
@click.argument("index", type=click.Path())
@click.argument("output", type=click.Path())
@click.option("-k", "k", default=15, show_default=True, type=click.IntRange(1),
              help="Neighbours per document.")
@_p_option
@_roots_option
@click.option("--include-self", is_flag=True,
              help="Count each document as one of its own k neighbours (distance 0).")
@_silent_option
@_json_option
def knn_graph(index, output, k, p, roots, include_self, silent, as_json):
    """Write the exact k-nearest-neighbour graph of every live document to
    OUTPUT (.npz for scipy.sparse.load_npz, or .mtx Matrix Market).

    Row i holds the distances from document i to its k nearest documents;
    the keys, in row order, go to OUTPUT.keys.json. Documents at distance 0
    are explicit zeros. In .npz each row is in increasing distance, as
    sklearn's precomputed neighbours read it; .mtx comes back in column order
    (sklearn.neighbors.sort_graph_by_row_values sorts it). For
    sklearn.cluster.HDBSCAN(metric="precomputed") or UMAP.
    """
    from ..ingest.pipelines import check_knn_graph_output, save_knn_graph

    check_knn_graph_output(output)
    started = time.perf_counter()
    progress = _progress(silent)
    try:
        with _open_any(index) as opened, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            keys = opened.keys_in_order()
            graph = opened.knn_graph(k, p=parse_p(p), roots=parse_roots(roots),
                                     include_self=include_self,
                                     progress=lambda done, total: progress("neighbours", done,
                                                                           total))
            used_p = opened.p if p is None else parse_p(p)
    finally:
        progress.finish()
    for warning in caught:
        if issubclass(warning.category, UserWarning) and str(warning.message).startswith("k is"):
            _note(f"note: {warning.message}")  # k capped at the documents there are
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename,
                                 warning.lineno)
    keys_file = save_knn_graph(output, graph, keys)
    out = {"output": output, "keys": keys_file, "documents": len(keys), "k": k,
           "p": "inf" if math.isinf(used_p) else used_p, "include_self": include_self,
           "entries": int(graph.nnz), "seconds": round(time.perf_counter() - started, 3)}
    if as_json:
        _echo_json(out)
    else:
        click.echo(f"wrote the {k}-NN graph of {len(keys):,} documents ({graph.nnz:,} entries) to "
                   f"{output}, keys to {keys_file} ({out['seconds']:.2f} s)")


@main.command()
@click.argument("index", type=click.Path())
@click.option("--radius", default=0.0, show_default=True, type=float, metavar="R",
              help="Join documents within distance R of each other (0: equal measures).")
@_p_option
@_roots_option
@click.option("--edges", "max_edges", default=10, show_default=True, type=click.IntRange(0),
              metavar="N", help="Pairs listed per group in the table (--json lists all).")
@_silent_option
@_json_option
def duplicates(index, radius, p, roots, max_edges, silent, as_json):
    """Groups of near-duplicate documents, the largest first.

    Documents within distance R of each other are joined, and a group is
    all the documents joined to each other directly or through others (so
    its members can be farther apart than R). Each group lists its keys and
    the pairs within R with their distances. --json prints a list of
    {"keys": [...], "edges": [[key, key, distance], ...]}.
    """
    started = time.perf_counter()
    progress = _progress(silent)
    try:
        with _open(index) as opened:
            groups = opened.duplicates(radius, p=parse_p(p), roots=parse_roots(roots),
                                       progress=lambda done, total: progress("documents", done,
                                                                             total))
            texts_of = {} if as_json else _stored_texts(
                opened, {key for group in groups for key in group["keys"]})
            labels_of = {} if as_json else {key: opened.get(key)["label"]
                                            for group in groups for key in group["keys"]}
            n_documents = len(opened)
    finally:
        progress.finish()
    if as_json:
        _echo_json([{"keys": g["keys"], "edges": [list(e) for e in g["edges"]]}
                    for g in groups])
        return
    in_groups = sum(len(g["keys"]) for g in groups)
    click.echo(f"{len(groups):,} groups of documents within {radius:g} of each other "
               f"({in_groups:,} of {n_documents:,} documents; "
               f"{time.perf_counter() - started:.2f} s)")
    for number, group in enumerate(groups, 1):
        click.echo("")
        click.echo(f"group {number}: {len(group['keys'])} documents")
        click.echo(_table(["key", "label", "text"],
                          [[key, labels_of[key], _snippet(texts_of.get(key, ""), 60)]
                           for key in group["keys"]]))
        shown = group["edges"][:max_edges]
        if shown:
            click.echo(_table(["key", "key", "distance"],
                              [[a, b, f"{d:.4f}"] for a, b, d in shown]))
        if len(group["edges"]) > len(shown):
            click.echo(f"... and {len(group['edges']) - len(shown):,} more pairs (--json lists "
                       "them all)")


# ------------------------------------------------------------------- shard
@main.command()
@click.argument("source", type=click.Path())
@click.argument("dest", type=click.Path())
@click.option("--shards", required=True, type=click.IntRange(1), metavar="S",
              help="Number of shards.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1),
              help="Documents copied per committed batch.")
@_silent_option
@_json_option
def shard(source, dest, shards, batch_size, silent, as_json):
    """Split the index SOURCE into a new sharded index DEST of S shards.

    Every shard gets SOURCE's graph file, roots, eta and p, its text
    settings and words table (each shard stays a complete index), and the
    documents whose keys route to it, copied as stored in insertion order:
    searches on DEST give SOURCE's keys and distances. SOURCE is read, not
    changed. DEST is built in a hidden sibling (.sobolev-split-*) and
    renamed into place when complete: a split that fails or is killed
    leaves no index at DEST (a killed one may leave that sibling).
    """
    from ..distributed import shard_index

    started = time.perf_counter()
    progress = _progress(silent)
    try:
        report = shard_index(source, dest, shards, batch_size=batch_size, progress=progress)
    finally:
        progress.finish()
    report["seconds"] = round(time.perf_counter() - started, 3)
    if as_json:
        _echo_json(report)
        return
    click.echo(f"split {source} into {report['shards']} shards at {report['path']}: "
               f"{report['documents']:,} documents ({report['seconds']:.1f} s)")
    click.echo(_table(["shard", "documents"],
                      [[i, f"{n:,}"] for i, n in enumerate(report["per_shard"])]))


# --------------------------------------------------------------------- sql
@main.command()
@click.argument("index", type=click.Path())
@click.argument("query")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row.")
@click.option("--table", "as_table", is_flag=True, help="Print an aligned table.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the default).")
@click.option("--timeout", default=60.0, show_default=True, type=SECONDS,
              metavar="SECONDS", help="Stop a query that runs longer (0: no limit).")
@click.option("--max-work", type=click.IntRange(0), default=None, metavar="UNITS",
              help="Work the S_p functions of the query may do, about one unit per document "
                   "compared (default 20,000,000; 0: no limit).")
@click.option("--max-value-bytes", type=click.IntRange(1, 1_000_000_000), default=None,
              metavar="BYTES", help="Largest string or blob the query may read or make "
                                    "(default 1,048,576).")
def sql(index, query, as_csv, as_table, as_json, timeout, max_work, max_value_bytes):
    """Run a read-only SQL QUERY on the catalog, with S_p functions.

    Tables: documents (id, key, label, fields, deleted, ...), segments,
    roots, meta, words. Functions: sobolev_distance(key_a, key_b[, p]) and
    sobolev_knn(query_key, k[, p]) (a JSON list). Example:

        SELECT key, label, sobolev_distance(key, 'doc-17') AS d FROM documents
        WHERE deleted = 0 ORDER BY d LIMIT 10
    """
    from ..index.sql import DEFAULT_MAX_WORK, MAX_VALUE_BYTES, iter_query

    if as_csv and as_table:
        raise click.UsageError("choose one of --csv and --table")
    with _open(index) as opened:
        # Rows are printed as they come (a table needs them all for its widths).
        columns, rows = iter_query(
            opened, query, timeout=timeout or None,
            max_work=DEFAULT_MAX_WORK if max_work is None else (max_work or None),
            max_value_bytes=max_value_bytes or MAX_VALUE_BYTES)
        if as_table:
            click.echo(_table(columns, list(rows)))
        elif as_csv:
            buffer = io.StringIO()
            writer = csv.writer(buffer)
            writer.writerow(columns)
            for row in rows:
                writer.writerow(row)
                if buffer.tell() > 1 << 16:
                    click.echo(buffer.getvalue(), nl=False)
                    buffer.seek(0)
                    buffer.truncate()
            click.echo(buffer.getvalue(), nl=False)
        else:
            _echo_json_rows(columns, rows)


def _echo_json_rows(columns, rows):
    """A JSON list of objects, written one object at a time (as _echo_json
    would print the whole list)."""
    first = True
    for row in rows:
        item = json.dumps(dict(zip(columns, row)), indent=2, default=_json_default,
                          ensure_ascii=False)
        click.echo(("[\n" if first else ",\n") + "\n".join("  " + line
                                                          for line in item.splitlines()), nl=False)
        first = False
    click.echo("[]" if first else "\n]")


# -------------------------------------------------------------- quickstart
@main.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="Seed for the graph.")
@_silent_option
@_json_option
def quickstart(directory, seed, silent, as_json):
    """Build and search an index of Python's own documentation.

    The corpus is the standard library's docstrings (read with ast, nothing
    imported) and pydoc topics; the word vectors are learned from it (PPMI +
    SVD). Everything is written to DIRECTORY (default: a temporary folder,
    removed at the end), so you can go on with the other commands there.
    """
    from ..ingest.quickstart import run_quickstart

    log = (lambda line: None) if (as_json or silent) else click.echo
    report = run_quickstart(directory, seed=seed, log=log)
    if as_json:
        _echo_json(report)


# Commands kept in modules of their own register themselves on ``main``
# when imported; they use the helpers above, so they come last.
from . import explain, export, serve  # noqa: E402,F401
from . import vectors as _vectors  # noqa: E402,F401  (commands take a 'vectors' option)

if __name__ == "__main__":  # pragma: no cover
    main()
