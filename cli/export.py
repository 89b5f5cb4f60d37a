"""``sobolev-index export``: every live document as JSON lines, and the CLI
side of ``build --from-export FILE --graph-from INDEX``, which rebuilds an
identical index from such a file (see :mod:`sobolev_index.ingest.export`)."""
import json
import time

import click

from ._common import _echo_json, _json_option, _note, _open, _progress, _silent_option

__all__ = ["export", "build_from_export_cli"]

# The build options a build from an export takes from the export and from
# --graph-from instead (by their parameter names in `build`).
_BUILD_FROM_CORPUS = ("corpus", "vectors", "points", "diagrams", "diagram_weights", "recipe",
                      "nodes", "edges", "k", "roots", "seed", "p", "weighting", "stopwords",
                      "token_pattern", "fold_case", "skip_empty", "no_text", "corpus_format",
                      "encoding")


@click.command()
@click.argument("index", type=click.Path())
@click.argument("output", type=click.Path())
@_silent_option
@_json_option
def export(index, output, silent, as_json):
    """Write every live document of INDEX to OUTPUT (a new file, or '-' for
    standard output) as JSON lines.

    Line 1 describes the index (graph checksum, p, roots, text settings, the
    words table of a text index); each other line is one document in
    insertion order: key, label, fields, text, and its measure (nodes and
    masses, exactly as stored). `build NEW --from-export OUTPUT --graph-from
    INDEX` rebuilds an identical index from it: the backup and migration
    path.
    """
    from ..ingest.export import check_export_output, export_index

    check_export_output(output)
    started = time.perf_counter()
    progress = _progress(silent)
    try:
        with _open(index) as opened:
            report = export_index(opened, output, progress=progress)
    finally:
        progress.finish()
    out = {"output": report["path"] or "-", "documents": report["documents"],
           "bytes": report["bytes"], "kind": report["kind"], "words": report["words"],
           "seconds": round(time.perf_counter() - started, 3)}
    to_stdout = output == "-"
    if as_json:
        # Standard output holds the export itself: the report goes to stderr.
        click.echo(json.dumps(out, indent=2, ensure_ascii=False), err=to_stdout)
        return
    words = "" if out["words"] is None else f" and {out['words']:,} words"
    line = (f"exported {out['documents']:,} documents{words} to "
            f"{'standard output' if to_stdout else output} "
            f"({out['bytes'] / 1e6:.1f} MB, {out['seconds']:.2f} s)")
    if to_stdout:
        _note(line, silent)
    else:
        click.echo(line)


def _given_build_options(ctx):
    """The options of the running `build` that the user set (not left at
    their defaults) among those a build from an export cannot take."""
    if ctx is None:
        return []
    given = []
    for param in ctx.command.params:
        if param.name not in _BUILD_FROM_CORPUS:
            continue
        source = ctx.get_parameter_source(param.name)
        if source is not None and source != click.core.ParameterSource.DEFAULT:
            given.append(param.opts[0])
    return given


def build_from_export_cli(index, export_file, graph_from, silent, as_json):
    """What `build INDEX --from-export FILE --graph-from SOURCE` does: check
    the options, rebuild INDEX from the export on SOURCE's graph, print a
    summary (a few lines, or JSON with --json). Options of the corpus and
    point builds (graph, roots, p, text settings...) are refused: they come
    from the export and from SOURCE."""
    from ..ingest.export import build_from_export

    if not export_file or not graph_from:
        raise click.UsageError("--from-export FILE and --graph-from INDEX go together: the "
                               "export holds the documents, the index its graph")
    conflicting = _given_build_options(click.get_current_context(silent=True))
    if conflicting:
        raise click.UsageError(
            f"{', '.join(conflicting)} cannot be used with --from-export: the documents, "
            "text settings and recipe come from the export, and the graph, roots and p from "
            "--graph-from")
    started = time.perf_counter()
    progress = _progress(silent)
    try:
        built, report = build_from_export(index, export_file, graph_from, progress=progress)
    finally:
        progress.finish()
    with built:
        info = built.info()
    out = {"index": info["path"], "from_export": export_file, "graph_from": graph_from,
           "documents": info["documents"], "kind": report["kind"], "words": report["words"],
           "nodes": info["nodes"], "edges": info["edges"], "roots": info["roots"],
           "p": info["p"], "graph_checksum": report["graph_checksum"], "bytes": info["bytes"],
           "seconds": round(time.perf_counter() - started, 3)}
    if as_json:
        _echo_json(out)
        return
    words = "" if out["words"] is None else f", {out['words']:,} words"
    source = "standard input" if export_file == "-" else export_file
    click.echo(f"built {out['index']} from {source}: {out['documents']:,} documents{words}")
    click.echo(f"  graph of {graph_from}: {out['nodes']:,} nodes, {out['edges']:,} edges, "
               f"root(s) {out['roots']}, p = {out['p']}")
    click.echo(f"  {out['bytes'] / 1e6:.1f} MB on disk, {out['seconds']:.1f} s")
