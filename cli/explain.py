"""``sobolev-index explain``: which subtrees carry a distance."""
import math
import os

import click

from . import (
    _echo_json,
    _json_option,
    _open,
    _p_option,
    _roots_option,
    _snippet,
    _stored_texts,
    _table,
    main,
)
from .params import parse_p, parse_roots

# What --plot can write: Matplotlib's raster and vector formats by extension.
PLOT_SUFFIXES = (".png", ".pdf", ".svg")
PLOT_INSTALL = 'pip install "sobolev-index[plot]"'


@main.command()
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
