"""Graph metrics, unique-path roots and shortest-path trees.

A :class:`Graph` is an undirected, connected graph with positive edge lengths,
optionally with node coordinates. It is either built from support points
(farthest-point clustering into nodes, then random or k-NN edges, as in the
paper's experiments) or given by the user as an edge list.

``graph.tree(root)`` returns the :class:`ShortestPathTree` of a root that
satisfies Assumption 2.1 (every node has a unique shortest path to the root).
The tree maps measures on nodes to their edge-mass feature vectors.
"""
import math
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from . import _cluster, _features
from .errors import AssumptionError, AssumptionWarning, InvalidGraphError
from .measures import as_measure_batch

__all__ = ["Graph", "ShortestPathTree", "EDGE_KINDS"]

#: The kinds of edges :meth:`Graph.from_points` can draw: ``"log"`` and ``"sqrt"`` (the
#: paper's random graphs) and ``"knn"`` (each node to its k nearest nodes).
EDGE_KINDS = ("log", "sqrt", "knn")

# Two paths whose lengths agree to this relative tolerance count as equal.
TIE_RTOL = 1e-12
# First relative size of the length perturbation that breaks ties, and how
# many times it may grow tenfold before giving up.
PERTURB_START = 1e-9
PERTURB_TRIES = 4
# Rows per block when distances between many points are formed at once.
BLOCK_ROWS = 2048


def _check_int(name, value, low, high=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} is {value!r}; expected an integer")
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f" and <= {high}"
        raise ValueError(f"{name} is {value}; expected an integer >= {low}{upper}")
    return int(value)


def _pairwise_lengths(coords, u, v):
    """Euclidean lengths of edges (u, v), formed by direct differences."""
    out = np.empty(len(u), dtype=np.float64)
    step = max(1, (1 << 24) // max(1, coords.shape[1]))
    for start in range(0, len(u), step):
        stop = start + step
        diff = coords[u[start:stop]] - coords[v[start:stop]]
        out[start:stop] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


class Graph:
    """An undirected connected graph with positive edge lengths.

    The graph metric on which S_p is defined: its nodes carry the measures,
    and the shortest-path tree of a root (:meth:`tree`) maps each measure to
    its edge-mass features. Build one with :meth:`from_points` (the paper's
    graphs over support points) or :meth:`from_edges` (an edge list of your
    own), which check their input.

    Parameters
    ----------
    n_nodes : int
        Number of nodes, numbered 0 to ``n_nodes - 1``.
    edges : ndarray of shape (n_edges, 2), int64
        The edges, each as ``(u, v)`` with ``u < v``, no edge twice.
    lengths : ndarray of shape (n_edges,), float64
        Positive, finite length of each edge.
    coords : ndarray of shape (n_nodes, dim), float64, optional
        Coordinates of the nodes; None (the default) for a graph without them.
    assignment : ndarray of shape (n_points,), int64, optional
        For a graph built over support points, the node of each point; None
        (the default) otherwise.
    params : dict, optional
        How the graph was built (kept as a copy); None (the default) means
        an empty dict.

    Attributes
    ----------
    n_nodes : int
        Number of nodes.
    edges : ndarray of shape (n_edges, 2), int64
        The edges, ``edges[:, 0] < edges[:, 1]``, no duplicates.
    lengths : ndarray of shape (n_edges,), float64
        Positive edge lengths.
    coords : ndarray of shape (n_nodes, dim), float64, or None
        Node coordinates, if any.
    assignment : ndarray of shape (n_points,), int64, or None
        Maps each support point given to :meth:`from_points` to its node.
    params : dict
        Describes how the graph was built.

    See Also
    --------
    ShortestPathTree : The tree of one root, which makes the features.

    Notes
    -----
    The constructor trusts its arguments and checks nothing: use
    :meth:`from_edges` or :meth:`from_points` for user input.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index import Graph
    >>> points = np.random.default_rng(0).normal(size=(200, 2))
    >>> graph = Graph.from_points(points, n_nodes=30, edges="knn", k=4, seed=0)
    >>> graph
    Graph(n_nodes=30, n_edges=73, dim=2)
    >>> graph.assignment.shape
    (200,)
    >>> graph.tree(root=0)
    ShortestPathTree(root=0, n_nodes=30, height=4, perturbed=False)

    A graph of your own, from an edge list:

    >>> square = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> square
    Graph(n_nodes=4, n_edges=4)
    >>> square.tree(0).parent.tolist()
    [-1, 0, 3, 0]
    """

    def __init__(self, n_nodes, edges, lengths, coords=None, assignment=None, params=None):
        # Trusted constructor: use from_edges / from_points for user input.
        self.n_nodes = int(n_nodes)
        self.edges = edges
        self.lengths = lengths
        self.coords = coords
        self.assignment = assignment
        self.params = dict(params or {})
        self._adjacency = None
        self._trees = {}

    def __repr__(self):
        dim = "" if self.coords is None else f", dim={self.coords.shape[1]}"
        return f"Graph(n_nodes={self.n_nodes}, n_edges={len(self.edges)}{dim})"

    @property
    def n_edges(self):
        """int: Number of edges, ``len(edges)``."""
        return len(self.edges)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_edges(cls, n_nodes, edges, lengths, coords=None):
        """Check a graph given as an edge list and build it.

        Lengths must be positive and finite, there may be no self-loops, and
        the graph must be connected. An edge listed twice (in either
        direction) must have the same length both times and is kept once.
        Each edge is stored as ``(u, v)`` with ``u < v``.

        Parameters
        ----------
        n_nodes : int
            Number of nodes (at least 1); the nodes are 0 to ``n_nodes - 1``.
        edges : array-like of shape (n_edges, 2)
            The node pairs the edges join, in either direction. Integer node
            ids, or floats with whole values.
        lengths : array-like of shape (n_edges,)
            The length of each edge: real, positive and finite.
        coords : array-like of shape (n_nodes, dim), optional
            Finite coordinates of the nodes, needed by :meth:`nearest_nodes`.
            None (the default): the graph has none.

        Returns
        -------
        Graph
            The graph, with ``params`` ``{"source": "edges"}`` and no
            ``assignment``.

        Raises
        ------
        ValueError
            If ``n_nodes`` is not an integer >= 1.
        InvalidGraphError
            If an array has the wrong shape or type, an edge names an unknown
            node or is a self-loop, a length is not positive and finite, an
            edge is given twice with two lengths, ``coords`` has the wrong
            shape or a non-finite value, or the graph is disconnected. The
            message names the first offending edge or the components.

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> graph = Graph.from_edges(3, [(0, 1), (2, 1)], [1.0, 2.5])
        >>> graph.edges.tolist(), graph.lengths.tolist()
        ([[0, 1], [1, 2]], [1.0, 2.5])
        >>> Graph.from_edges(3, [(0, 1)], [1.0])
        Traceback (most recent call last):
            ...
        sobolev_index.errors.InvalidGraphError: the graph is disconnected: 2 components: ...
        """
        n_nodes = _check_int("n_nodes", n_nodes, 1)
        edges = np.asarray(edges)
        lengths = np.asarray(lengths)
        if edges.size == 0:
            edges = edges.reshape(0, 2)
        if edges.ndim != 2 or edges.shape[1] != 2:
            raise InvalidGraphError(f"edges has shape {edges.shape}; expected (n_edges, 2)")
        if not np.issubdtype(edges.dtype, np.integer):
            if edges.size and not np.all(edges == np.round(edges)):
                raise InvalidGraphError(f"edges has dtype {edges.dtype}; expected integer node ids")
            edges = edges.astype(np.int64)
        if lengths.shape != (len(edges),):
            raise InvalidGraphError(
                f"lengths has shape {lengths.shape}; expected one length per edge, ({len(edges)},)"
            )
        if len(edges) and not np.issubdtype(lengths.dtype, np.number):
            raise InvalidGraphError(f"lengths has dtype {lengths.dtype}; expected real numbers")
        edges = edges.astype(np.int64)
        lengths = lengths.astype(np.float64)

        bad = np.flatnonzero((edges < 0).any(axis=1) | (edges >= n_nodes).any(axis=1))
        if len(bad):
            e = bad[0]
            raise InvalidGraphError(
                f"edge {e} is ({edges[e, 0]}, {edges[e, 1]}), but the nodes are 0..{n_nodes - 1}"
            )
        bad = np.flatnonzero(edges[:, 0] == edges[:, 1])
        if len(bad):
            e = bad[0]
            raise InvalidGraphError(
                f"edge {e} is a self-loop at node {edges[e, 0]}; edges must join two different nodes"
            )
        bad = np.flatnonzero(~np.isfinite(lengths) | (lengths <= 0))
        if len(bad):
            e = bad[0]
            raise InvalidGraphError(
                f"edge {e} ({edges[e, 0]}, {edges[e, 1]}) has length {lengths[e]}; "
                "lengths must be positive and finite"
            )

        edges = np.sort(edges, axis=1)
        codes = edges[:, 0] * n_nodes + edges[:, 1]
        order = np.argsort(codes, kind="stable")
        same = np.flatnonzero(codes[order][1:] == codes[order][:-1])
        if len(same):
            first, second = order[same], order[same + 1]
            conflict = np.flatnonzero(lengths[first] != lengths[second])
            if len(conflict):
                a, b = first[conflict[0]], second[conflict[0]]
                raise InvalidGraphError(
                    f"edges {a} and {b} both join nodes {edges[a, 0]} and {edges[a, 1]} "
                    f"with different lengths {lengths[a]} and {lengths[b]}; give each edge once"
                )
            keep = np.ones(len(edges), dtype=bool)
            keep[second] = False
            edges, lengths = edges[keep], lengths[keep]

        if coords is not None:
            coords = np.asarray(coords, dtype=np.float64)
            if coords.ndim != 2 or coords.shape[0] != n_nodes:
                raise InvalidGraphError(
                    f"coords has shape {coords.shape}; expected ({n_nodes}, dim)"
                )
            if not np.all(np.isfinite(coords)):
                raise InvalidGraphError("coords has NaN or infinite values; expected finite coordinates")

        graph = cls(n_nodes, np.ascontiguousarray(edges), np.ascontiguousarray(lengths), coords,
                    params={"source": "edges"})
        graph._check_connected()
        return graph

    @classmethod
    def from_points(cls, X, n_nodes, edges="log", k=10, seed=0, n_threads=None, progress=None):
        """Build the paper's graph metric over support points.

        The steps:

        1. Farthest-point (Gonzalez) clustering of the rows of X into at most
           ``n_nodes`` clusters; the nodes are the cluster centres (support
           points) and ``assignment`` maps each row of X to its nearest centre.
           With ``n_nodes`` >= the number of rows, every distinct row is a
           node (in sorted order) and no clustering is run.
           It is exact: each new centre is the point farthest from its
           nearest centre (the first row among equally far ones), and a
           point belongs to the earliest of its equally near centres, with
           distances summed in float64 whatever the dtype of X (float32 X
           is not converted, and its distance estimates run in float32).
           It uses a working copy as large as X. Identical points collapse,
           so fewer nodes may come back.
        2. Edges: ``"log"`` draws ceil(M ln M) distinct random node pairs,
           ``"sqrt"`` ceil(M^1.5) (both capped at all M(M-1)/2 pairs), and
           ``"knn"`` joins each node to its ``k`` nearest nodes.
        3. Components are joined: for ``"knn"`` by their shortest gaps (each
           component to its nearest node outside it, until one is left);
           for ``"log"`` and ``"sqrt"`` in label order by one random edge
           between each pair of consecutive components.
        4. Lengths are Euclidean. The same ``seed`` gives the same graph.

        Which edges: ``"log"`` and ``"sqrt"`` are the paper's random graphs.
        Their long random edges make the shortest-path tree of a root cut
        across the points' geometry, so S_p on them classifies worse than on
        ``"knn"``, whose trees follow local geometry; ``build`` uses
        ``"knn"`` with k = 5 (docs/quality.md measures both against Word
        Mover's Distance). Use ``"log"`` or ``"sqrt"`` to reproduce the paper.

        Parameters
        ----------
        X : array-like of shape (n_points, dim)
            The support points: finite real numbers, n_points >= 1 and
            dim >= 1. float32 and float64 are used as they are; other real
            dtypes are converted to float64.
        n_nodes : int
            The most nodes the graph may have (an integer >= 1). Fewer come
            back when X has fewer distinct points.
        edges : {"log", "sqrt", "knn"}, default "log"
            Which edges join the nodes (see above; :data:`EDGE_KINDS`).
        k : int, default 10
            For ``edges="knn"``, how many nearest nodes each node is joined
            to (an integer >= 1; at most the number of nodes minus 1 are
            used). Ignored for the other kinds.
        seed : int, default 0
            Seed of the random choices (the first centre and the random
            edges), given to ``numpy.random.default_rng``.
        n_threads : int, optional
            Threads of the clustering. None (the default) or <= 0 means
            every thread OpenMP offers; the graph does not depend on it.
        progress : callable, optional
            Called as ``progress(n_centres_so_far)`` while the centres are
            chosen. None (the default): no reports.

        Returns
        -------
        Graph
            The graph, with ``coords`` (the centres, float64),
            ``assignment`` (the node of each row of X) and ``params``
            (``source`` ``"points"``, ``requested_nodes``, ``edges``, ``k``
            (None unless ``"knn"``), ``seed``, ``n_points`` and
            ``covering_radius``, the clustering's radius: 0.0 when every
            distinct point is a node).

        Raises
        ------
        ValueError
            If X is not a non-empty 2-D array of finite real numbers, or
            ``n_nodes``, ``edges`` or (for ``"knn"``) ``k`` is not one of
            the values above.

        Examples
        --------
        >>> import numpy as np
        >>> from sobolev_index import Graph
        >>> points = np.random.default_rng(0).normal(size=(500, 3))
        >>> graph = Graph.from_points(points, n_nodes=50, edges="log", seed=0)
        >>> graph
        Graph(n_nodes=50, n_edges=196, dim=3)
        >>> graph.assignment[:5].tolist()
        [19, 19, 44, 8, 23]
        >>> knn = Graph.from_points(points, n_nodes=50, edges="knn", k=5, seed=0)
        >>> knn.params["edges"], knn.params["k"], knn.n_nodes
        ('knn', 5, 50)
        """
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"X has shape {X.shape}; expected (n_points, dim) with both >= 1")
        if not np.issubdtype(X.dtype, np.number) or np.issubdtype(X.dtype, np.complexfloating):
            raise ValueError(f"X has dtype {X.dtype}; expected real numbers")
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        X = np.ascontiguousarray(X)
        finite = np.isfinite(X).all(axis=1)
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            raise ValueError(f"X row {row} has NaN or infinite values; expected finite points")
        max_nodes = _check_int("n_nodes", n_nodes, 1)
        if edges not in EDGE_KINDS:
            raise ValueError(f"edges is {edges!r}; expected one of {', '.join(map(repr, EDGE_KINDS))}")
        if edges == "knn":
            k = _check_int("k", k, 1)
        rng = np.random.default_rng(seed)

        first = int(rng.integers(X.shape[0]))
        edge_state = rng.bit_generator.state
        distinct = max_nodes >= X.shape[0]
        while True:
            if distinct:
                # Room for every point: each distinct point is its own
                # cluster, which is what the clustering would find, in
                # O(n log n) rather than O(n^2 dim). Nodes are in the points'
                # sorted order.
                _, centres, assignment = np.unique(X, axis=0, return_index=True,
                                                   return_inverse=True)
                assignment = assignment.reshape(-1).astype(np.int64)
                radius = 0.0
                if progress is not None:
                    progress(len(centres))
            else:
                centres, assignment, _, radius = _cluster.farthest_point_clustering(
                    X, min(max_nodes, X.shape[0]), first, n_threads=n_threads, progress=progress
                )
            coords = X[centres].astype(np.float64)
            m = len(centres)
            rng.bit_generator.state = edge_state
            if edges == "knn":
                u, v = _join_nearest(coords, *_knn_pairs(coords, min(k, m - 1)))
            else:
                target = math.ceil(m * math.log(m)) if edges == "log" else math.ceil(m ** 1.5)
                u, v = _join_components(m, *_random_pairs(m, target, rng), rng)
            lengths = _pairwise_lengths(coords, u, v)
            if not (distinct and (lengths <= 0).any()):
                break
            # Distinct points so close that their distance is 0 in float64
            # (a squared difference that underflows): the clustering merges
            # them, as it does identical points.
            distinct = False
        params = {
            "source": "points", "requested_nodes": max_nodes, "edges": edges,
            "k": k if edges == "knn" else None, "seed": seed,
            "n_points": int(X.shape[0]), "covering_radius": float(radius),
        }
        graph = cls(m, np.stack([u, v], axis=1), lengths, coords, assignment, params)
        bad = np.flatnonzero(~(lengths > 0))
        if len(bad):  # cannot happen for distinct centres; guard the invariant
            raise InvalidGraphError(f"edge {bad[0]} has length {lengths[bad[0]]}")
        return graph

    def _check_connected(self):
        n_comp, labels = csgraph.connected_components(self.adjacency(), directed=False)
        if n_comp > 1:
            sizes = np.bincount(labels)
            examples = ", ".join(
                f"component {c} ({sizes[c]} nodes, e.g. node {int(np.flatnonzero(labels == c)[0])})"
                for c in range(min(n_comp, 4))
            )
            more = "" if n_comp <= 4 else f", and {n_comp - 4} more"
            raise InvalidGraphError(
                f"the graph is disconnected: {n_comp} components: {examples}{more}; "
                "add edges so that every node is reachable"
            )

    # ---------------------------------------------------------------- queries
    def adjacency(self):
        """The symmetric matrix of edge lengths.

        Built on the first call and kept: later calls return the same matrix.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (n_nodes, n_nodes)
            Entry (u, v) and entry (v, u) hold the length of the edge
            joining u and v; nodes that no edge joins have no entry.

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> graph = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.5])
        >>> graph.adjacency().toarray().tolist()
        [[0.0, 1.0, 0.0], [1.0, 0.0, 2.5], [0.0, 2.5, 0.0]]
        """
        if self._adjacency is None:
            u, v = self.edges[:, 0], self.edges[:, 1]
            self._adjacency = sp.csr_matrix(
                (np.concatenate([self.lengths, self.lengths]),
                 (np.concatenate([u, v]), np.concatenate([v, u]))),
                shape=(self.n_nodes, self.n_nodes),
            )
        return self._adjacency

    def nearest_nodes(self, points):
        """The node nearest to each point, by Euclidean distance to the node coordinates.

        Squared distances are formed as ``|c|^2 - 2 x.c`` (the term of the
        point itself left out), block by block; among equally near nodes
        the lowest id is taken.

        Parameters
        ----------
        points : array-like of shape (n, dim)
            The points, with the dimension of ``coords``; converted to
            float64.

        Returns
        -------
        ndarray of shape (n,), int64
            The id of each point's nearest node.

        Raises
        ------
        ValueError
            If the graph has no coordinates, or ``points`` does not have
            the shape (n, dim), or holds a value that is not finite.

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> graph = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.0], coords=[[0.0], [1.0], [3.0]])
        >>> graph.nearest_nodes([[0.4], [2.5]]).tolist()
        [0, 2]
        """
        if self.coords is None:
            raise ValueError("this graph has no node coordinates; build it with coords to map points")
        points = np.asarray(points, dtype=np.float64)
        if points.ndim != 2 or points.shape[1] != self.coords.shape[1]:
            raise ValueError(
                f"points have shape {points.shape}; expected (n, {self.coords.shape[1]})"
            )
        finite = np.isfinite(points).all(axis=1)
        if not finite.all():
            # argmin over NaN distances would map such a point to node 0
            row = int(np.flatnonzero(~finite)[0])
            raise ValueError(f"point {row} is {points[row].tolist()}; expected finite coordinates")
        sq_nodes = np.einsum("ij,ij->i", self.coords, self.coords)
        out = np.empty(len(points), dtype=np.int64)
        for start in range(0, len(points), BLOCK_ROWS):
            block = points[start:start + BLOCK_ROWS]
            d2 = sq_nodes[None, :] - 2.0 * block @ self.coords.T
            out[start:start + BLOCK_ROWS] = np.argmin(d2, axis=1)
        return out

    def tree(self, root, on_violation="raise", seed=0):
        """The shortest-path tree of ``root``.

        Assumption 2.1 needs every node to have exactly one shortest path to
        the root; paths whose lengths agree to a relative 1e-12 count as
        ties. With ``on_violation="raise"`` a tie raises
        :class:`~sobolev_index.AssumptionError` naming the node. With
        ``"perturb"`` the edge lengths are multiplied by ``1 + eps * u`` (u
        uniform in [-1, 1] from ``seed``, eps from 1e-9 up, tenfold per try
        up to 1e-6), which breaks ties as the paper suggests, and an
        :class:`~sobolev_index.AssumptionWarning` says so; the tree then
        holds the perturbed lengths. Trees are cached: the same arguments
        return the same object.

        Parameters
        ----------
        root : int
            The root node, 0 to ``n_nodes - 1``.
        on_violation : {"raise", "perturb"}, default "raise"
            What a root that violates Assumption 2.1 does: raise, or break
            the ties by perturbing the lengths.
        seed : int, default 0
            Seed of the perturbation (used only by ``"perturb"``).

        Returns
        -------
        ShortestPathTree
            The tree, with ``perturbed`` True when lengths were perturbed.

        Raises
        ------
        ValueError
            If ``root`` is not a node or ``on_violation`` is not one of the
            values above.
        AssumptionError
            If some node has two shortest paths to the root and
            ``on_violation="raise"``, or the ties remain after the largest
            perturbation.

        Warns
        -----
        AssumptionWarning
            When the lengths were perturbed to make the paths unique.

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
        >>> tree = graph.tree(0)
        >>> tree.parent.tolist(), tree.distance.tolist()
        ([-1, 0, 3, 0], [0.0, 1.0, 2.5, 1.0])

        Node 2 of a square with equal sides has two shortest paths to node 0:

        >>> square = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0] * 4)
        >>> square.tree(0)
        Traceback (most recent call last):
            ...
        sobolev_index.errors.AssumptionError: root 0 violates Assumption 2.1: node 2 has 2 shortest ...
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     square.tree(0, on_violation="perturb")
        ShortestPathTree(root=0, n_nodes=4, height=2, perturbed=True)
        """
        root = _check_int("root", root, 0, self.n_nodes - 1)
        if on_violation not in ("raise", "perturb"):
            raise ValueError(f"on_violation is {on_violation!r}; expected 'raise' or 'perturb'")
        key = (root, on_violation, seed)
        if key not in self._trees:
            self._trees[key] = self._build_tree(root, on_violation, seed)
        return self._trees[key]

    def trees(self, roots, on_violation="raise", seed=0):
        """The shortest-path trees of several roots, as :meth:`tree` makes them.

        Parameters
        ----------
        roots : iterable of int
            The root nodes, such as the first array :meth:`roots` returns.
        on_violation : {"raise", "perturb"}, default "raise"
            As for :meth:`tree`.
        seed : int, default 0
            As for :meth:`tree`.

        Returns
        -------
        list of ShortestPathTree
            One tree per root, in the order of ``roots``.

        Raises
        ------
        ValueError
            If a root is not a node, or ``on_violation`` is not valid.
        AssumptionError
            If a root violates Assumption 2.1 (see :meth:`tree`).

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> graph = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.5])
        >>> [tree.parent.tolist() for tree in graph.trees([0, 2])]
        [[-1, 0, 1], [1, 2, -1]]
        """
        return [self.tree(int(r), on_violation=on_violation, seed=seed) for r in roots]

    def _build_tree(self, root, on_violation, seed):
        lengths = self.lengths
        found = _shortest_paths(self, root, lengths)
        if found.tie is None:
            return ShortestPathTree._from_search(root, found, perturbed=False)
        if on_violation == "raise":
            raise AssumptionError(
                f"root {root} violates Assumption 2.1: {found.tie}. "
                "Choose another root, or pass on_violation='perturb' to break ties "
                "by a tiny deterministic change of lengths"
            )
        rng = np.random.default_rng(seed)
        noise = rng.uniform(-1.0, 1.0, len(lengths))
        eps = PERTURB_START
        for _ in range(PERTURB_TRIES):
            found = _shortest_paths(self, root, lengths * (1.0 + eps * noise))
            if found.tie is None:
                warnings.warn(
                    f"root {root}: shortest paths were not unique, so edge lengths were "
                    f"multiplied by 1 + {eps:g} * u (u uniform in [-1, 1], seed {seed})",
                    AssumptionWarning,
                    stacklevel=3,
                )
                return ShortestPathTree._from_search(root, found, perturbed=True)
            eps *= 10.0
        raise AssumptionError(
            f"root {root} violates Assumption 2.1 even after perturbing lengths by {eps / 10:g}: "
            f"{found.tie}"
        )

    def roots(self, n, strategy="random", seed=0, eta=None, on_violation="raise"):
        """Pick ``n`` roots that satisfy Assumption 2.1, with weights ``eta``.

        Candidates that violate the assumption are skipped (unless given
        explicitly, which raises; or ``on_violation="perturb"``, which
        perturbs their lengths instead). The trees of the chosen roots are
        built on the way, and cached for :meth:`tree`.

        Parameters
        ----------
        n : int or None
            How many roots, 1 to ``n_nodes``. With a sequence of node ids as
            ``strategy`` it may be None, or else must be their number.
        strategy : {"random", "center"} or sequence of int, default "random"
            How roots are chosen:

            - ``"random"``: distinct nodes drawn at random (``seed``);
            - ``"center"``: the nodes of smallest eccentricity, measured
              against every node when the graph has at most 256 nodes and
              against 64 random landmark nodes otherwise (ties by the sum
              of those distances);
            - a sequence of distinct node ids, used as given.
        seed : int, default 0
            Seed of the random draw, of the landmarks and of any
            perturbation.
        eta : array-like of shape (n,), optional
            Weights of the roots: finite, >= 0, with a positive sum; they
            are normalised to sum 1. None (the default) means equal weights.
        on_violation : {"raise", "perturb"}, default "raise"
            As for :meth:`tree`.

        Returns
        -------
        roots : ndarray of shape (n,), int64
            The root nodes.
        eta : ndarray of shape (n,), float64
            Their weights, summing to 1.

        Raises
        ------
        ValueError
            If ``n``, ``strategy``, ``eta`` or a given root is not valid, or
            given roots repeat a node.
        AssumptionError
            If fewer than ``n`` nodes satisfy Assumption 2.1, or a root
            given explicitly violates it (with ``on_violation="raise"``).

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
        >>> roots, eta = graph.roots(2, strategy="center")
        >>> roots.tolist(), eta.tolist()
        ([3, 1], [0.5, 0.5])
        >>> roots, eta = graph.roots(None, strategy=[0, 2], eta=[3, 1])
        >>> roots.tolist(), eta.tolist()
        ([0, 2], [0.75, 0.25])
        """
        if isinstance(strategy, str):
            n = _check_int("n", n, 1, self.n_nodes)
            if strategy == "random":
                candidates = np.random.default_rng(seed).permutation(self.n_nodes)
            elif strategy == "center":
                candidates = self._by_eccentricity(seed)
            else:
                raise ValueError(
                    f"strategy is {strategy!r}; expected 'random', 'center' or a list of node ids"
                )
            chosen = []
            for node in candidates:
                try:
                    self.tree(int(node), on_violation=on_violation, seed=seed)
                except AssumptionError:
                    continue
                chosen.append(int(node))
                if len(chosen) == n:
                    break
            if len(chosen) < n:
                raise AssumptionError(
                    f"only {len(chosen)} of the graph's {self.n_nodes} nodes satisfy Assumption 2.1; "
                    f"{n} roots were asked for. Pass on_violation='perturb' to break ties"
                )
            roots = np.asarray(chosen, dtype=np.int64)
        else:
            roots = np.asarray(strategy)
            if roots.ndim != 1 or len(roots) == 0 or not np.issubdtype(roots.dtype, np.integer):
                raise ValueError(f"roots {strategy!r} must be a non-empty list of node ids")
            if n is not None and n != len(roots):
                raise ValueError(f"n is {n} but {len(roots)} roots were given")
            for r in roots:
                _check_int("root", int(r), 0, self.n_nodes - 1)
            if len(np.unique(roots)) != len(roots):
                raise ValueError(f"roots {roots.tolist()} contain duplicates; expected distinct nodes")
            for r in roots:
                self.tree(int(r), on_violation=on_violation, seed=seed)
            roots = roots.astype(np.int64)
        return roots, normalise_eta(eta, len(roots))

    def _by_eccentricity(self, seed):
        if self.n_nodes <= 256:
            landmarks = np.arange(self.n_nodes)
        else:
            landmarks = np.random.default_rng(seed).choice(self.n_nodes, 64, replace=False)
        dist = csgraph.dijkstra(self.adjacency(), directed=True, indices=landmarks)
        eccentricity = dist.max(axis=0)
        return np.lexsort((dist.sum(axis=0), eccentricity))


def normalise_eta(eta, n_roots):
    """Weights of the sliced distance: equal by default, else normalised."""
    if eta is None:
        return np.full(n_roots, 1.0 / n_roots)
    eta = np.asarray(eta, dtype=np.float64)
    if eta.shape != (n_roots,):
        raise ValueError(f"eta has shape {eta.shape}; expected one weight per root, ({n_roots},)")
    total = eta.sum()
    if not np.all(np.isfinite(eta)) or np.any(eta < 0) or total <= 0:
        raise ValueError(f"eta is {eta.tolist()}; expected finite weights >= 0 with a positive sum")
    # Weights that sum to 1 up to the rounding of their sum are kept as
    # given: normalising twice then changes nothing, so a stored eta given
    # to a new index (a rebuild from an export) comes back bit for bit.
    if abs(total - 1.0) <= n_roots * 2.0 ** -52:
        return eta.copy()
    return eta / total


class _Search:
    __slots__ = ("distance", "predecessor", "lengths", "tie")


def _shortest_paths(graph, root, lengths):
    """Dijkstra from root, plus a check that every shortest path is unique."""
    u, v = graph.edges[:, 0], graph.edges[:, 1]
    adjacency = sp.csr_matrix(
        (np.concatenate([lengths, lengths]), (np.concatenate([u, v]), np.concatenate([v, u]))),
        shape=(graph.n_nodes, graph.n_nodes),
    )
    distance, predecessor = csgraph.dijkstra(
        adjacency, directed=True, indices=root, return_predecessors=True
    )
    found = _Search()
    found.distance, found.predecessor, found.lengths, found.tie = distance, predecessor, adjacency, None
    # An edge (a, b) is tight for b when it lies on a shortest path to b.
    # Assumption 2.1 holds when every non-root node has exactly one tight edge.
    heads = np.concatenate([u, v])
    tails = np.concatenate([v, u])
    w = np.concatenate([lengths, lengths])
    gap = np.abs(distance[heads] + w - distance[tails])
    tight = gap <= TIE_RTOL * distance[tails]
    counts = np.bincount(tails[tight], minlength=graph.n_nodes)
    tied = np.flatnonzero(counts > 1)
    if len(tied):
        node = int(tied[0])
        via = sorted(int(h) for h in heads[tight & (tails == node)])
        found.tie = (
            f"node {node} has {len(via)} shortest paths of length {distance[node]:.17g} "
            f"(arriving from nodes {', '.join(map(str, via[:5]))}); "
            f"{len(tied)} node(s) have ties in all"
        )
    return found


class ShortestPathTree:
    """The shortest-path tree of one root, as a parent array.

    Edge ``v`` is (v, parent[v]): every node but the root names the tree
    edge above it. The tree maps a measure mu on the nodes to its edge
    masses, ``alpha_mu(v)``, the mass of mu in the subtree below edge v;
    on these features S_p is a weighted l_p distance (see
    :func:`~sobolev_index.pairwise_sobolev`). Get a tree from
    :meth:`Graph.tree`, which checks Assumption 2.1.

    Parameters
    ----------
    root : int
        The root node.
    parent : array-like of shape (n_nodes,)
        The parent of each node, -1 at the root.
    length : array-like of shape (n_nodes,)
        The length of edge v, positive and finite (0 at the root).
    distance : array-like of shape (n_nodes,)
        Each node's distance to the root.
    perturbed : bool, default False
        Whether lengths were perturbed to satisfy Assumption 2.1.

    Attributes
    ----------
    root : int
        The root node.
    n_nodes : int
        Number of nodes.
    parent : ndarray of shape (n_nodes,), int64
        Parent of each node, -1 at the root.
    length : ndarray of shape (n_nodes,), float64
        Length of edge v, 0 at the root.
    depth : ndarray of shape (n_nodes,), int64
        Hop count from each node to the root.
    distance : ndarray of shape (n_nodes,), float64
        Distance from each node to the root.
    perturbed : bool
        Whether lengths were perturbed to satisfy Assumption 2.1.

    Raises
    ------
    InvalidGraphError
        If ``root`` is not a node whose parent is -1, a non-root node has no
        parent or an unknown one, a length is not positive and finite, or
        the parents form a cycle.

    Examples
    --------
    >>> from sobolev_index import Graph
    >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> tree = graph.tree(0)
    >>> tree
    ShortestPathTree(root=0, n_nodes=4, height=2, perturbed=False)
    >>> tree.parent.tolist(), tree.length.tolist(), tree.depth.tolist()
    ([-1, 0, 3, 0], [0.0, 1.0, 1.5, 1.0], [0, 1, 2, 1])
    >>> F = tree.features_of([([1, 2], [0.5, 0.5]), ([3], None)])
    >>> F.toarray().tolist()
    [[0.0, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 1.0]]
    """

    def __init__(self, root, parent, length, distance, perturbed=False):
        self.root = int(root)
        self.parent = np.ascontiguousarray(parent, dtype=np.int64)
        self.length = np.ascontiguousarray(length, dtype=np.float64)
        self.distance = np.ascontiguousarray(distance, dtype=np.float64)
        self.perturbed = bool(perturbed)
        self.n_nodes = len(self.parent)
        self.depth = _depths(self.parent)
        self._parent32 = self.parent.astype(np.int32)
        self._validate()

    @property
    def parent32(self):
        """The parent pointers as int32, as the compiled loops read them."""
        return self._parent32

    @classmethod
    def _from_search(cls, root, found, perturbed):
        parent = found.predecessor.astype(np.int64)
        parent[root] = -1
        children = np.flatnonzero(parent >= 0)
        length = np.zeros(len(parent))
        length[children] = np.asarray(found.lengths[children, parent[children]]).ravel()
        return cls(root, parent, length, found.distance, perturbed)

    def _validate(self):
        if not 0 <= self.root < self.n_nodes or self.parent[self.root] != -1:
            raise InvalidGraphError(f"root {self.root} must be a node whose parent is -1")
        others = np.flatnonzero(np.arange(self.n_nodes) != self.root)
        if np.any(self.parent[others] < 0) or np.any(self.parent >= self.n_nodes):
            raise InvalidGraphError("parent array must name a node for every non-root node")
        if np.any(~(self.length[others] > 0)) or not np.all(np.isfinite(self.length)):
            raise InvalidGraphError("tree edge lengths must be positive and finite")

    def __repr__(self):
        return (f"ShortestPathTree(root={self.root}, n_nodes={self.n_nodes}, "
                f"height={int(self.depth.max(initial=0))}, perturbed={self.perturbed})")

    # ---------------------------------------------------------- feature map
    def features(self, indptr, nodes, masses, normalize=True, n_threads=None):
        """Edge masses of a batch of measures given in CSR form.

        Measure i is ``nodes[indptr[i]:indptr[i+1]]`` with ``masses`` likewise.
        A node listed twice in a measure gets the sum of its masses.

        Parameters
        ----------
        indptr : array-like of shape (N + 1,)
            Integer offsets: 0 first, never decreasing, ``len(nodes)`` last.
        nodes : array-like of shape (nnz,)
            Node ids (integers, or floats with whole values), 0 to
            ``n_nodes - 1``; every measure has at least one.
        masses : array-like of shape (nnz,)
            The mass at each node: real, finite and >= 0, with a positive
            sum per measure.
        normalize : bool, default True
            Divide each measure's masses by their sum (so that it is a
            probability measure). With False they are used as given.
        n_threads : int, optional
            Threads of the computation. None (the default) or <= 0 means
            every thread OpenMP offers; the result does not depend on it.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (N, n_nodes)
            float64 features, sorted indices: column v is the mass below
            edge (v, parent[v]), and the root's column is empty.

        Raises
        ------
        InvalidMeasureError
            If the arrays do not describe N measures on this tree's nodes
            with valid masses; the message names the measure.

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> tree = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.5]).tree(0)
        >>> F = tree.features([0, 2, 3], [1, 2, 2], [1.0, 3.0, 1.0])
        >>> F.toarray().tolist()
        [[0.0, 1.0, 0.75], [0.0, 1.0, 1.0]]
        """
        batch = as_measure_batch(indptr=indptr, nodes=nodes, masses=masses,
                                 n_nodes=self.n_nodes, normalize=normalize)
        return self.features_of_batch(batch, n_threads)

    def features_of(self, measures, normalize=True, n_threads=None):
        """Edge masses of measures given as pairs or as a matrix, as :meth:`features` computes them.

        Parameters
        ----------
        measures : sequence of (nodes, masses) pairs, or array-like or sparse matrix
            The measures: ``(nodes, masses)`` pairs, where ``masses=None``
            means equal masses, or an N x n_nodes array or SciPy sparse
            matrix of node masses. Masses are real, finite and >= 0 with a
            positive sum per measure.
        normalize : bool, default True
            Divide each measure's masses by their sum. With False they are
            used as given.
        n_threads : int, optional
            Threads of the computation. None (the default) or <= 0 means
            every thread OpenMP offers; the result does not depend on it.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (N, n_nodes)
            float64 features with sorted indices, as :meth:`features`
            returns them.

        Raises
        ------
        InvalidMeasureError
            If a measure is empty, names an unknown node or has bad masses.
        TypeError
            If ``measures`` is not a sequence, an array or a sparse matrix.

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> tree = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.5]).tree(0)
        >>> tree.features_of([([2], None), ([0, 1], [1.0, 3.0])]).toarray().tolist()
        [[0.0, 1.0, 1.0], [0.0, 0.75, 0.0]]
        """
        batch = as_measure_batch(measures, n_nodes=self.n_nodes, normalize=normalize)
        return self.features_of_batch(batch, n_threads)

    def feature_arrays_of_batch(self, batch, n_threads=None):
        """The CSR arrays of the features of a checked batch of measures.

        The arrays of :meth:`features_of_batch`, without building a SciPy
        matrix.

        Parameters
        ----------
        batch : MeasureBatch
            Measures that ``sobolev_index.measures.as_measure_batch`` made
            for this tree's graph; they are not checked again.
        n_threads : int, optional
            Threads of the computation. None (the default) or <= 0 means
            every thread OpenMP offers; the result does not depend on it.

        Returns
        -------
        indptr : ndarray of shape (N + 1,), int64
            Row offsets.
        indices : ndarray of shape (nnz,), int32
            Columns (edges), sorted within each row.
        data : ndarray of shape (nnz,), float64
            Edge masses.
        """
        return _features.edge_masses(
            self._parent32, self.root, batch.indptr, batch.nodes, batch.masses,
            batch.row_scale, n_threads=n_threads,
        )

    def powers_to_batch(self, q_indices, q_data, batch, p):
        """S_p to the power p between one feature row and each measure of a batch.

        Computes ``sum_v w_v |q_v - x_v|^p`` (``max_v |q_v - x_v|`` for p =
        inf) between the feature row q and the features x of each measure,
        without building those features as a matrix: S_p^p for finite p.

        Parameters
        ----------
        q_indices : array-like of shape (m,)
            The columns (edges) of the row's nonzero values, distinct;
            converted to int32.
        q_data : array-like of shape (m,)
            The row's values at those columns; converted to float64.
        batch : MeasureBatch
            Measures that ``sobolev_index.measures.as_measure_batch`` checked
            for this tree's graph; they are not checked again.
        p : float
            The order, in [1, inf]; not checked.

        Returns
        -------
        ndarray of shape (len(batch),), float64
            The value for each measure of the batch.
        """
        out = np.zeros(len(batch), dtype=np.float64)
        _features.powers_to_measures(
            self._parent32, self.root, self.length,
            np.ascontiguousarray(q_indices, dtype=np.int32),
            np.ascontiguousarray(q_data, dtype=np.float64),
            batch.indptr, batch.nodes, batch.masses, batch.row_scale, float(p), out)
        return out

    def features_of_batch(self, batch, n_threads=None):
        """The features of a batch of measures that was checked already.

        As :meth:`features` computes them, for a batch that
        ``sobolev_index.measures.as_measure_batch`` made for this tree's
        graph (nothing is checked again).

        Parameters
        ----------
        batch : MeasureBatch
            The checked measures.
        n_threads : int, optional
            Threads of the computation. None (the default) or <= 0 means
            every thread OpenMP offers; the result does not depend on it.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (len(batch), n_nodes)
            float64 features with sorted indices.
        """
        out_indptr, out_indices, out_data = self.feature_arrays_of_batch(batch, n_threads)
        matrix = sp.csr_matrix((out_data, out_indices, out_indptr), shape=(len(batch), self.n_nodes))
        matrix.has_sorted_indices = True
        return matrix

    def measures_from_features(self, F):
        """Inverse feature map (Prop. 4.4): node masses from edge masses.

        ``rho(v) = alpha(v) - sum of alpha over v's children``, and the root
        gets what is left of the total mass 1. Negative masses of rounding
        size (down to -1e-9) are set to 0.

        Parameters
        ----------
        F : array-like or sparse matrix of shape (N, n_nodes)
            Edge masses, one row per measure, as :meth:`features` makes them
            for probability measures.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (N, n_nodes)
            float64 node masses, explicit zeros removed, indices sorted.

        Raises
        ------
        ValueError
            If ``F`` does not have ``n_nodes`` columns, or a row has more
            mass below a node than above it (it is not the feature vector of
            a measure).

        Examples
        --------
        >>> from sobolev_index import Graph
        >>> tree = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.5]).tree(0)
        >>> F = tree.features_of([([0, 2], [1.0, 3.0])])
        >>> tree.measures_from_features(F).toarray().tolist()
        [[0.25, 0.0, 0.75]]
        """
        F = sp.csr_matrix(F, dtype=np.float64)
        if F.shape[1] != self.n_nodes:
            raise ValueError(f"features have {F.shape[1]} columns; expected {self.n_nodes}")
        children = np.flatnonzero(self.parent >= 0)
        to_parent = sp.csr_matrix(
            (np.ones(len(children)), (children, self.parent[children])),
            shape=(self.n_nodes, self.n_nodes),
        )
        from_children = F @ to_parent
        rho = (F - from_children).tolil()
        rho[:, self.root] = 1.0 - from_children[:, self.root].toarray()
        rho = rho.tocsr()
        # Subtraction leaves rounding noise; a clearly negative mass means F
        # is not the feature vector of any measure (it is outside the set K).
        negative = rho.data < -1e-9
        if np.any(negative):
            row = int(np.searchsorted(rho.indptr, np.flatnonzero(negative)[0], side="right") - 1)
            raise ValueError(
                f"features row {row} has more mass below a node than above it; "
                "it is not the feature vector of a measure"
            )
        rho.data[rho.data < 0] = 0.0
        rho.eliminate_zeros()
        rho.sort_indices()
        return rho


def _depths(parent):
    """Hop counts to the root by pointer jumping (O(log height) passes)."""
    depth = (parent >= 0).astype(np.int64)
    ancestor = parent.copy()
    for _ in range(64):  # 2**64 hops: only a cycle gets this far
        active = np.flatnonzero(ancestor >= 0)
        if len(active) == 0:
            return depth
        up = ancestor[active]
        depth_up = depth[up]
        ancestor_up = ancestor[up]
        depth[active] += depth_up
        ancestor[active] = ancestor_up
    raise InvalidGraphError("the parent array has a cycle; it is not a tree")


def _random_pairs(m, target, rng):
    """``target`` distinct random node pairs (u < v), capped at all pairs."""
    all_pairs = m * (m - 1) // 2
    target = min(target, all_pairs)
    if target == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if target > all_pairs // 2:
        iu, iv = np.triu_indices(m, k=1)
        pick = np.sort(rng.choice(all_pairs, target, replace=False))
        return iu[pick].astype(np.int64), iv[pick].astype(np.int64)
    codes = np.zeros(0, np.int64)
    while len(codes) < target:
        draw = int((target - len(codes)) * 1.2) + 16
        a = rng.integers(0, m, draw)
        b = rng.integers(0, m, draw)
        keep = a != b
        lo, hi = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
        codes = np.concatenate([codes, lo * m + hi])
        _, first = np.unique(codes, return_index=True)
        codes = codes[np.sort(first)]  # distinct, in the order drawn
    codes = codes[:target]
    return codes // m, codes % m


def _knn_pairs(coords, k):
    """Undirected edges joining each node to its k nearest nodes."""
    m = len(coords)
    if k < 1:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    sq = np.einsum("ij,ij->i", coords, coords)
    heads, tails = [], []
    for start in range(0, m, BLOCK_ROWS):
        block = coords[start:start + BLOCK_ROWS]
        d2 = sq[start:start + BLOCK_ROWS, None] + sq[None, :] - 2.0 * block @ coords.T
        rows = np.arange(len(block))
        d2[rows, start + rows] = np.inf
        nearest = np.argpartition(d2, k - 1, axis=1)[:, :k]
        heads.append(np.repeat(start + rows, k))
        tails.append(nearest.ravel())
    a, b = np.concatenate(heads), np.concatenate(tails)
    codes = np.unique(np.minimum(a, b) * m + np.maximum(a, b))
    return codes // m, codes % m


def _join_nearest(coords, u, v):
    """Join the connected components of edges (u, v) by their shortest gaps.

    Each round adds, for every component, the edge from it to its nearest
    node outside it (Boruvka's step of a minimum spanning forest over the
    components), so the number of components at least halves per round and
    the joins are the shortest available, not edges across the geometry.
    Each round costs one pass of squared distances, O(m^2 dim).
    """
    m = len(coords)
    sq = np.einsum("ij,ij->i", coords, coords)
    u, v = u.astype(np.int64), v.astype(np.int64)
    while True:
        adjacency = sp.csr_matrix((np.ones(len(u)), (u, v)), shape=(m, m))
        n_comp, labels = csgraph.connected_components(adjacency, directed=False)
        if n_comp == 1:
            return u, v
        gap = np.full(n_comp, np.inf)
        pair = np.zeros((n_comp, 2), dtype=np.int64)
        for start in range(0, m, BLOCK_ROWS):
            block = coords[start:start + BLOCK_ROWS]
            d2 = sq[start:start + BLOCK_ROWS, None] + sq[None, :] - 2.0 * block @ coords.T
            own = labels[start:start + BLOCK_ROWS]
            d2[own[:, None] == labels[None, :]] = np.inf
            nearest = np.argmin(d2, axis=1)
            best = d2[np.arange(len(block)), nearest]
            for row in np.flatnonzero(best < gap[own]):
                c = own[row]
                if best[row] < gap[c]:  # several rows of one component in a block
                    gap[c] = best[row]
                    pair[c] = start + row, nearest[row]
        a, b = np.minimum(pair[:, 0], pair[:, 1]), np.maximum(pair[:, 0], pair[:, 1])
        codes = np.setdiff1d(np.unique(a * m + b), u * m + v)
        u, v = np.concatenate([u, codes // m]), np.concatenate([v, codes % m])


def _join_components(m, u, v, rng):
    """Add one random edge between consecutive connected components."""
    adjacency = sp.csr_matrix((np.ones(len(u)), (u, v)), shape=(m, m))
    n_comp, labels = csgraph.connected_components(adjacency, directed=False)
    if n_comp == 1:
        return u.astype(np.int64), v.astype(np.int64)
    members = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[members], np.arange(n_comp + 1))
    picks = np.array([
        members[starts[c] + rng.integers(starts[c + 1] - starts[c])] for c in range(n_comp)
    ])
    a, b = picks[:-1], picks[1:]
    return (np.concatenate([u, np.minimum(a, b)]).astype(np.int64),
            np.concatenate([v, np.maximum(a, b)]).astype(np.int64))
