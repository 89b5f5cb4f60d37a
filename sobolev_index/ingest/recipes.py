"""Build recipes: the graph, the roots and the text settings a build uses
for whatever the caller leaves unset.

Measured by ``bench/quality.py`` (``docs/quality.md``: k-NN error against
exact Word Mover's Distance on TWITTER and on standard-library docstrings,
and SVM accuracy on Orbit persistence diagrams against graph OT), one
setting changed at a time from the recipe:

- tf-idf weights with English stop words removed: counts instead of tf-idf
  cost 0.5 to 1.5 points of k-NN error; keeping stop words gained 0.4 on
  TWITTER and cost 2.7 on the docstrings (both together: 0.8 to 5.7);
- S_1 sliced over 10 random roots: one root costs 1.8 to 2.9 points (and
  7 points of SVM accuracy on Orbit); 20 roots gain nothing more;
- p = 1: p = 2 costs 1.9 to 6.7 points;
- every word its own node: 1,000 clusters of the words cost 0.9 to 1.9
  points (2,000 were as good or better: the gain is in not clustering
  coarsely);
- edges to each node's 5 nearest nodes: the paper's random edges (M ln M
  "log" / M^1.5 "sqrt") cost 1.1 / 0.6 points on TWITTER and gained 0.7 /
  0.7 on the docstrings, but on Orbit, where the points are 2-dimensional,
  "sqrt" edges cost 20 points of SVM accuracy (their long edges make a
  root's shortest-path tree cut across the geometry).

With all of it, the build's defaults are within 0.3 points of WMD
on both text corpora and 1.3 points of SVM accuracy below graph OT on
Orbit (within one split's standard deviation).

``"quality"`` (the default) is all of that; ``"fast"`` keeps the graph
and the text settings but uses one root (the most central node): at
10^5 documents of the benchmark's topic corpus about 3 times faster
single queries (2.6 times in a batch) and half the disk, for 1.8 to 2.9
points more k-NN error. (Ten roots cost this little where most of their
trees' edges cut off the same subtrees: an index stores such posting
lists once, and a search at p = 1 reads each once; docs/quality.md
measures it. Where the trees share few subtrees, as on TWITTER's graph,
on uniformly spread words or with random edges, ten roots cost up to
ten times one root's search and five times its disk.) Both take every word (or point)
as a node up to :data:`MAX_NODES`; above it the words are clustered into
that many nodes.

Point and diagram builds take the same graph recipe and roots, and
diagrams are weighted by persistence (:data:`DEFAULT_DIAGRAM_WEIGHTS`); the
text settings of a recipe (English stop words, tf-idf) are in
:func:`sobolev_index.ingest.documents.text_defaults`. This module is shared
by both pipelines and imports neither.
"""
import operator

import numpy as np

from ..graph import EDGE_KINDS

__all__ = ["RECIPES", "DEFAULT_RECIPE", "RECIPE_META", "MAX_NODES", "DEFAULT_DIAGRAM_WEIGHTS", "check_recipe",
           "resolve", "fit_to_graph", "create_roots", "recipe_info"]

RECIPES = ("quality", "fast")
DEFAULT_RECIPE = "quality"
# The catalog meta name of what a build chose and why.
RECIPE_META = "recipe"
# Nodes of a recipe: every distinct word (or point) up to this many. The
# graph costs O(n_points * MAX_NODES * dim) to cluster and O(MAX_NODES^2 *
# dim) for its nearest-node edges: seconds to a minute or two at 10^4 for
# 300-dimensional vectors.
MAX_NODES = 10_000
# Nearest nodes each node is joined to.
KNN_EDGES = 5
ROOTS = {"quality": 10, "fast": 1}
# Persistence diagrams: each point weighted by its persistence (death -
# birth). Most points of a diagram lie near the diagonal; with uniform
# weights they outweigh the few long-lived features that tell classes apart.
DEFAULT_DIAGRAM_WEIGHTS = "persistence"


def check_recipe(recipe):
    if recipe not in RECIPES:
        raise ValueError(f"recipe is {recipe!r}; expected one of {', '.join(map(repr, RECIPES))}")
    return recipe


def _count(name, value, low):
    """``value`` as a Python int >= ``low`` (NumPy integers too, not
    booleans), or a ValueError naming it."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} is {value!r}; expected an integer >= {low}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} is {value!r}; expected an integer >= {low}") from None
    if number < low:
        raise ValueError(f"{name} is {number}; expected an integer >= {low}")
    return number


def _roots(roots):
    """A root count (int >= 1) or a list of node ids (ints), from ints,
    NumPy integers, sequences or arrays of them."""
    try:
        return _count("roots", roots, 1)
    except ValueError:
        if isinstance(roots, (str, bytes)) or not hasattr(roots, "__iter__"):
            raise
    nodes = [_count("a root node", node, 0) for node in roots]
    if not nodes:
        raise ValueError("roots is an empty list; expected a number of roots or a list of nodes")
    return nodes


def resolve(recipe, n_points, *, nodes=None, edges=None, k=None, roots=None):
    """The graph and roots of a build of ``n_points`` points (words with
    vectors, or the points of every set, repeats included): each option the caller gave
    (not None) is kept, the rest come from ``recipe``.

    Returns a dict: ``recipe``, ``nodes`` (requested; identical points
    collapse, so the graph may have fewer), ``edges``, ``k`` (None unless
    ``edges`` is "knn"), ``roots`` (a count, or the list given) and
    ``given`` (the names the caller set).
    """
    check_recipe(recipe)
    given = [name for name, value in (("nodes", nodes), ("edges", edges), ("k", k),
                                      ("roots", roots)) if value is not None]
    nodes = None if nodes is None else _count("nodes", nodes, 1)
    k = None if k is None else _count("k", k, 1)
    roots = None if roots is None else _roots(roots)
    if edges is not None and edges not in EDGE_KINDS:
        raise ValueError(f"edges is {edges!r}; expected one of {', '.join(map(repr, EDGE_KINDS))}")
    edges = "knn" if edges is None else edges
    if k is not None and edges != "knn":
        raise ValueError(f"k is {k!r} but edges is {edges!r}; k is the number of nearest "
                         "nodes of edges='knn'")
    return {
        "recipe": recipe,
        "nodes": max(1, min(int(n_points), MAX_NODES)) if nodes is None else nodes,
        "edges": edges,
        "k": (KNN_EDGES if k is None else k) if edges == "knn" else None,
        "roots": ROOTS[recipe] if roots is None else roots,
        "given": given,
    }


def fit_to_graph(chosen, graph):
    """``chosen`` (from :func:`resolve`) fitted to the graph made from it: a
    recipe's root count is cut to the graph's nodes (a small corpus may have
    fewer nodes than roots), a count the caller gave that the graph cannot
    hold is a ValueError, and ``k`` is what the edges used (at most the
    nodes less one)."""
    roots, m = chosen["roots"], graph.n_nodes
    if isinstance(roots, int) and roots > m:
        if "roots" in chosen["given"]:
            raise ValueError(f"roots is {roots}, but the graph has only {m} node(s); give at "
                             f"most {m} roots")
        chosen["roots"] = m
    if chosen["k"] is not None:
        chosen["k"] = min(chosen["k"], max(m - 1, 0))
    return chosen


def create_roots(roots):
    """``roots`` (from :func:`resolve`) as :meth:`SobolevIndex.create` takes
    it: a count of 1 is the graph's most central node (None; ``create``
    reads the integer 1 as one random root), a count above 1 that many
    random roots, a list the nodes given."""
    return None if roots == 1 else roots


def recipe_info(index):
    """What the build of ``index`` chose (the meta of :func:`resolve`, with
    the text settings of a text build), or None for an index built without
    a recipe (by an earlier release, or through :meth:`SobolevIndex.create`)."""
    return index.catalog.meta_value(RECIPE_META)
