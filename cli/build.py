"""Commands that make and fill indexes: ``build``, ``add`` and ``quickstart``."""
import os
import sys
import time
import warnings

import click

from ..errors import (
    CorruptIndexError,
    DiskFullError,
    NotAnIndexError,
    SkippedDocumentsWarning,
    UnlistedSegmentsWarning,
    UnsupportedFormatError,
)
from ._common import (
    _check_scheduler,
    _cli_words,
    _echo_json,
    _encoding_option,
    _format_option,
    _json_option,
    _note,
    _open_any,
    _progress,
    _recipe_text,
    _refuse_shard_writes,
    _scheduler_option,
    _sharded,
    _silent_option,
    _wait_option,
)
from .params import (
    P_ORDER,
    columns,
    columns_options,
    parse_p,
    refuse_columns,
)


# ------------------------------------------------------------------- build
@click.command()
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
                   "uses one (3 to 10 times faster queries and half to a fifth of the disk, "
                   "depending on the corpus; 1.8 to 2.9 points more k-NN error; see "
                   "docs/quality.md).")
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


# --------------------------------------------------------------------- add
@click.command()
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
        try:
            files_read = read_files(index, files, corpus_format=corpus_format,
                                    encoding=encoding,
                                    columns=columns(key_column, text_column, label_column))
        except CorruptIndexError as exc:
            # Damage found opening the index: as for every command's open.
            if not sharded:
                exc.at_open = not isinstance(exc, (NotAnIndexError, UnsupportedFormatError))
            raise
    for w in read_warnings:
        # Unlisted segment files are reported by the open below.
        if not issubclass(w.category, UnlistedSegmentsWarning):
            _note(f"warning: {_cli_words(str(w.message))}", silent)
    with _open_any(index, "a", timeout=wait, scheduler=scheduler) as opened:
        if sharded:
            vectors = None  # words a sharded index does not know are left out
        elif vectors is None:
            learned = vectors_learned(opened)
            # Vectors learned from the build's corpus know no word the index
            # does not know already: they place nothing, and are not used.
            vectors = stored_vectors_path(opened, placing=True)
            if vectors:
                _note(f"new words get nodes from {vectors} (--vectors none to skip)", silent)
        elif vectors == "none":
            vectors = None
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                report = add_files(opened, files_read, skip_empty=skip_empty,
                                   batch_size=batch_size, upsert=upsert,
                                   store_text=not no_text, progress=progress,
                                   skip_existing=skip_existing, vectors=vectors)
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


# -------------------------------------------------------------- quickstart
@click.command()
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
