"""Commands that read an index: ``search``, ``get``, ``distance``, ``gram``,
``knn-graph``, ``duplicates``, ``sql`` and ``explain``."""
import csv
import io
import json
import math
import os
import time
import warnings

import click

from ._common import (
    _check_scheduler,
    _cli_words,
    _echo_json,
    _encoding_option,
    _format_option,
    _json_default,
    _json_option,
    _note,
    _open,
    _open_any,
    _opened,
    _p_option,
    _progress,
    _roots_option,
    _scheduler_option,
    _sharded,
    _silent_option,
    _snippet,
    _table,
)
from .params import (
    SECONDS,
    columns,
    columns_options,
    parse_p,
    parse_roots,
)


# ------------------------------------------------------------------ search
@click.command()
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
@click.option("--candidates", default=None, type=click.IntRange(1), metavar="N",
              help="Approximate search: rank the N nearest on the first roots by the "
                   "distance over all roots (N >= k).")
@click.option("--candidate-roots", default=None, type=click.IntRange(1), metavar="R",
              help="With --candidates: how many roots the candidates come from.  [default: 2]")
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
def search(index, texts, keys, query_file, k, radius, limit, p, roots, candidates,
           candidate_roots, labels, vectors, corpus_format, key_column, text_column,
           label_column, encoding, show_stats, as_json, scheduler):
    """The k nearest documents of each query, by ascending S_p, or with
    --radius every document within that distance.

    Queries are answered in this order: --key ones, then --text ones, then
    those of --file. --json prints one list of {"key", "distance", "label"}
    per query, in that order; with --stats or --candidates,
    {"results": those lists, "stats": {...}, "certified": [...]}, each key
    present when its option is given.

    --candidates N searches approximately, for an index with several roots:
    the N nearest on the first --candidate-roots roots are ranked by their
    exact distance over all roots. "certified" (per query) says when the
    answer is provably the exact one.
    """
    from ..ingest.pipelines import query_measures

    if not (texts or keys or query_file):
        raise click.UsageError("give a query: --text TEXT, --key KEY or --file F")
    where = {"label": list(labels)} if labels else None
    with _open_any(index, scheduler=scheduler) as opened, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        query_names, results = [], []
        options = dict(k=k, p=parse_p(p), roots=parse_roots(roots), where=where,
                       radius=radius, limit=limit, stats=show_stats)
        if candidates is not None or candidate_roots is not None:
            options.update(candidates=candidates, candidate_roots=candidate_roots)
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
        certified = None
        if candidates is not None:
            certified = [bool(c) for result in results
                         for c in (result.certified or [True] * len(result))]
        if not as_json:
            texts_of = _stored_texts(opened, {hit["key"] for hits in records for hit in hits})
    stats = _joined_stats([result.stats for result in results]) if show_stats else None
    if as_json:
        if stats is None and certified is None:
            _echo_json(records)
        else:
            out = {"results": records}
            if stats is not None:
                out["stats"] = stats
            if certified is not None:
                out["certified"] = certified
            _echo_json(out)
        return
    for q, (name, hits, cut) in enumerate(zip(query_names, records, truncated)):
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
        if certified is not None:
            click.echo("(approximate search: certified exact)" if certified[q] else
                       "(approximate search: a nearer document may have been missed)")
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
@click.command()
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


# --------------------------------------------------------- distance, gram
@click.command()
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


@click.command()
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
        with _opened(index, scheduler=scheduler) as opened:
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


@click.command("knn-graph")
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


@click.command()
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


# --------------------------------------------------------------------- sql
@click.command()
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


# What --plot can write: Matplotlib's raster and vector formats by extension.
PLOT_SUFFIXES = (".png", ".pdf", ".svg")
PLOT_INSTALL = 'pip install "sobolev-index[plot]"'


@click.command()
@click.argument("index", type=click.Path())
@click.argument("a")
@click.argument("b")
@_p_option
@_roots_option
@click.option("--top", "top", default=10, show_default=True, type=click.IntRange(1),
              help="How many subtrees to list, by decreasing share.")
@click.option("--words", "n_words", default=3, show_default=True, type=click.IntRange(1),
              help="Words (or nodes) per document and subtree.")
@click.option("--text", "show_text", is_flag=True,
              help="Show the two documents' stored texts above the table.")
@click.option("--plot", "plot", default=None, type=click.Path(dir_okay=False), metavar="FILE.png",
              help="Draw the shares as a bar chart to FILE (.png, .pdf or .svg; needs "
                   "Matplotlib: " + PLOT_INSTALL + ").")
@_json_option
def explain(index, a, b, p, roots, top, n_words, show_text, plot, as_json):
    """Which subtrees (edges of the shortest-path trees) carry S_p between
    the stored documents A and B.

    Each row is one node v, the subtree below it: its share of the
    distance, the two documents' masses in it, and, for a text index, each
    document's words there (most mass first). With one root a share is the
    edge (v, parent)'s term of S_p^p over S_p^p. Over several roots each
    root's part eta S_p is split among its edges by their terms, and the
    edges above the same node v in every root's tree make one row, whose
    share is their sum (the "roots" column says how many trees it spans;
    the subtree below v differs from tree to tree, and the length, masses
    and words shown are those of the tree where v's share is largest), so
    all shares sum to 1 and no node is listed twice. At p = inf the edge of each root's
    largest difference carries that root's part. --roots 0 explains one
    root's tree on its own. --json gives both the rows ("groups") and each
    root's edges ("edges").
    """
    if plot is not None:
        _check_plot_target(plot)
    with _open(index) as opened:
        explanation = opened.explain(a, b, p=parse_p(p), top=top, roots=parse_roots(roots),
                                     n_words=n_words)
        texts = _stored_texts(opened, [a, b]) if show_text else {}
    if plot is not None:
        explanation.plot(plot, label_words=n_words)
    if as_json:
        out = explanation.to_dict()
        if show_text:
            out["texts"] = {key: texts.get(key) for key in (a, b)}
        if plot is not None:
            out["plot"] = plot
        _echo_json(out)
        return
    if show_text:
        for name, key in (("A", a), ("B", b)):
            click.echo(f"{name}: {key}: {_snippet(texts.get(key, '(no stored text)'), 100)}")
        click.echo("")
    click.echo(_summary(explanation))
    if explanation.groups:
        click.echo(_group_table(explanation))
    if plot is not None:
        click.echo(f"chart written to {plot}", err=True)


def _check_plot_target(plot):
    """Before any work: a file name Matplotlib can write, in an existing
    folder, and Matplotlib itself."""
    if not plot.lower().endswith(PLOT_SUFFIXES):
        raise click.BadParameter(f"{plot!r}; expected a file name ending in "
                                 f"{', '.join(PLOT_SUFFIXES)}", param_hint="--plot")
    folder = os.path.dirname(os.path.abspath(plot))
    if not os.path.isdir(folder):
        raise click.BadParameter(f"{plot!r}: the folder {folder} does not exist",
                                 param_hint="--plot")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.ClickException(f"--plot needs Matplotlib: {PLOT_INSTALL}") from None


def _summary(explanation):
    p = "inf" if math.isinf(explanation.p) else f"{explanation.p:g}"
    roots = len(explanation.roots)
    head = (f"S_{p}({explanation.a}, {explanation.b}) = {explanation.distance:.6g} over "
            f"{roots} root{'s' if roots != 1 else ''}")
    if not explanation.groups:
        return head + ": the two measures are equal, so no subtree carries any of it"
    # Over several roots a subtree is an edge of each tree: say how many.
    edges = f" ({explanation.n_edges:,} edges of the {roots} trees)" if roots > 1 else ""
    return (head + f"; {explanation.n_groups:,} subtrees differ{edges}, the top "
            f"{len(explanation.groups)} carry {100.0 * explanation.shown_share:.1f}% of it")


def _side(row, side):
    words = row[f"words_{side}"]
    if words is not None:
        return ", ".join(w["word"] for w in words) or "-"
    return ", ".join(f"{n['node']} ({n['mass']:.3f})" for n in row[f"nodes_{side}"]) or "-"


def _group_table(explanation):
    """One row per group (subtree node): over several roots, how many of the
    roots' trees it spans; length, masses and words are its largest pair's."""
    several = len(explanation.roots) > 1
    text = explanation.groups[0]["words_a"] is not None
    coords = "coords" in explanation.groups[0]
    headers = ["share"] + (["roots"] if several else []) + ["edge", "length", "mass A", "mass B"]
    headers += ["words A", "words B"] if text else ["nodes A", "nodes B"]
    headers += ["edge coordinates"] if coords else []
    rows = []
    for group in explanation.groups:
        row = [f"{100.0 * group['share']:.2f}%"] + ([len(group["roots"])] if several else [])
        row += [group["edge"], f"{group['length']:.4g}", f"{group['mass_a']:.4f}",
                f"{group['mass_b']:.4f}", _side(group, "a"), _side(group, "b")]
        if coords:
            row.append(_coordinates(group["coords"]["edge"]))
        rows.append(row)
    return _table(headers, rows)


def _coordinates(values, shown=4):
    text = ", ".join(f"{v:.4g}" for v in values[:shown])
    return f"({text}{', …' if len(values) > shown else ''})"
