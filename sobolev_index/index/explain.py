"""Which edges of the tree carry a distance: :meth:`SobolevIndex.explain`.

For one root, S_p(a, b)^p = sum_v w_v |alpha_a(v) - alpha_b(v)|^p is a sum
of one term per tree edge v (the edge from v to its parent, whose subtree
holds mass alpha_a(v) of a and alpha_b(v) of b), so each edge's share of
S_p^p is its term over the sum. Over several roots the index's distance is
sliced, sum_r eta_r S_p^(r); the edges of root r then share root r's part
eta_r S_p^(r) in proportion to their terms, so that the shares of every
(root, edge) pair together sum to 1 and the distance is recomputed from the
terms as sum_r eta_r (sum_v term_rv)^(1/p). At p = inf the distance of a
root is its largest difference: that edge carries the root's whole part (an
equal split among edges with the same largest difference, such as a chain
of edges whose nodes hold no mass) and every other edge a share of 0, so
the shares still sum to 1; the other edges are ordered by their difference.

The same node appears once per root: the edge (v, parent_r(v)) above a
node v is an edge of every root r's tree (but r = v), though the subtree
below it differs from tree to tree. The listing groups the pairs by v, a
group's share being the sum of its pairs' shares, so that no node is listed
twice; it shows the subtree of its largest pair, and the pairs stay
available one by one.
"""
import math

import numpy as np

from ..distances import check_p
from ..measures import as_measure_batch
from .arguments import check_positive
from .catalog import WORDS_TABLE

__all__ = ["Explain", "Explanation"]

# Nodes per SQL statement (SQLite's limit on parameters is 999 in old builds).
_SQL_CHUNK = 500


class Explanation:
    """What :meth:`SobolevIndex.explain` found: which subtrees carry S_p(a, b).

    Made by :meth:`SobolevIndex.explain <sobolev_index.SobolevIndex.explain>`;
    each parameter is kept as the attribute of the same name. A (root,
    edge) pair's share is its part of the distance: with one root, its
    term of S_p^p over S_p^p; over several roots, each root's part
    ``eta_r S_p^(r)`` is split among its edges in proportion to their
    terms; at p = inf the edge with a root's largest difference carries
    that root's whole part (split equally among ties) and the other edges
    a share of 0. The shares of all pairs sum to 1, and so do those of all
    groups.

    Parameters
    ----------
    a : str or None
        The first item: its key when a stored key was given, None for a
        measure given directly.
    b : str or None
        The second item, as ``a``.
    p : float
        The order of S_p.
    distance : float
        S_p(a, b), sliced over the roots used.
    roots : list of dict
        One dict per root used: ``position``, ``node``, ``eta``
        (renormalised over the roots used), ``distance`` (S_p of that
        root), ``share`` (eta times that over the distance; None at
        distance 0) and ``edges`` (how many of its edges have a nonzero
        difference).
    edges : list of dict
        The ``top`` (root, edge) pairs themselves by decreasing share (for
        programs that want one root's tree at a time), each a dict:
        ``root`` (position into the index's roots), ``root_node``, ``edge``
        (the child node v naming the edge (v, parent)), ``parent``,
        ``length`` (w_v), ``mass_a`` and ``mass_b`` (the two measures'
        masses in the subtree below the edge), ``term`` (``w_v |mass_a -
        mass_b|^p``, the edge's term of its root's S_p^p; at p = inf the
        difference ``|mass_a - mass_b|``), ``share`` (of the distance),
        ``nodes_a``/``nodes_b`` (the measure's nodes in the subtree with
        most mass, ``[{"node", "mass"}]``), ``words_a``/``words_b`` (for a
        text index, the words of those nodes, ``[{"word", "node",
        "mass"}]``, by the measure's mass on their node; None for other
        indexes) and, for an index whose graph has node coordinates and no
        words (a point index), ``coords`` (``{"edge": coordinates of v,
        "parent": of its parent}``).
    n_edges : int
        How many (root, edge) pairs have a nonzero difference over all
        roots: ``edges`` holds min(top, n_edges) of them.
    groups : list of dict
        What the command line, :meth:`plot` and the web pages show: the
        ``top`` subtrees by decreasing share, one per child node v. A group
        gathers every (root, edge) pair with a nonzero difference whose
        edge is (v, parent_r(v)), the subtree below v in each root r's
        tree, so that no node is listed twice however many roots are used.
        Each group is a dict: ``edge`` (v), ``share`` (the sum of its
        pairs' shares; the shares of all groups sum to 1), ``roots`` (the
        root positions of its pairs, the largest share first), ``parts``
        (its pairs, in that order, as the dicts of ``edges``), and for
        display the ``root``, ``root_node``, ``parent``, ``length``,
        ``mass_a`` and ``mass_b`` of its largest pair, ``parts[0]``, and so
        are its ``nodes_a``/``nodes_b``, ``words_a``/``words_b`` and
        ``coords`` (the subtree below v differs from root to root, and so
        do the masses and words in it: a row shows one tree's, and
        ``parts`` lists every tree's). With one root each group is exactly
        one pair, with the same share and in the same order as in
        ``edges``. Groups are ordered by share, then by the sum over their
        pairs of eta times the difference (which orders the groups of share
        0 at p = inf), then by node.
    n_groups : int
        How many nodes v have a nonzero difference in some root:
        ``groups`` holds min(top, n_groups) of them.

    Notes
    -----
    At distance 0 (equal measures) no subtree carries anything and
    ``groups`` and ``edges`` are empty.

    Examples
    --------
    >>> from sobolev_index import Graph, SobolevIndex
    >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> with SobolevIndex.create("explain-example.idx", graph, roots=[0]) as index:
    ...     _ = index.add([([1], None), ([2], None)], keys=["a", "b"])
    ...     explanation = index.explain("a", "b")
    >>> explanation
    Explanation(a='a', b='b', p=1.0, distance=3.5, groups=3 of 3, edges=3 of 3)
    >>> [(g["edge"], g["parent"], round(g["share"], 4)) for g in explanation.groups]
    [(2, 3, 0.4286), (1, 0, 0.2857), (3, 0, 0.2857)]
    >>> explanation.groups[0]["nodes_b"]
    [{'node': 2, 'mass': 1.0}]
    """

    def __init__(self, a, b, p, distance, roots, edges, n_edges, groups, n_groups):
        self.a = a
        self.b = b
        self.p = p
        self.distance = distance
        self.roots = roots
        self.edges = edges
        self.n_edges = n_edges
        self.groups = groups
        self.n_groups = n_groups

    def __repr__(self):
        return (f"Explanation(a={self.a!r}, b={self.b!r}, p={self.p}, "
                f"distance={self.distance:.6g}, groups={len(self.groups)} of {self.n_groups}, "
                f"edges={len(self.edges)} of {self.n_edges})")

    @property
    def shown_share(self):
        """The share of the distance that the listed groups (the subtrees
        the tables and the chart show) carry together."""
        return float(sum(group["share"] for group in self.groups))

    def to_dict(self):
        """Everything as plain JSON-ready values: both the groups and the (root, edge) pairs.

        Returns
        -------
        dict
            ``a``, ``b``, ``p`` (p = inf as ``"inf"``), ``distance``,
            ``n_groups``, ``n_edges``, ``shown_share``, ``roots``, ``groups``
            and ``edges``, as the attributes hold them.
        """
        return {"a": self.a, "b": self.b, "p": "inf" if math.isinf(self.p) else self.p,
                "distance": self.distance, "n_groups": self.n_groups, "n_edges": self.n_edges,
                "shown_share": self.shown_share, "roots": self.roots, "groups": self.groups,
                "edges": self.edges}

    def plot(self, path=None, ax=None, label_words=3):
        """A horizontal bar chart of the listed groups' shares.

        One bar per subtree node (however many roots it spans), largest on
        top, each bar labelled with its subtree's words (``label_words`` per
        side, ``"A: ... | B: ... (node v)"``), or its edge and root (or how
        many roots it spans) for an index without words. Bars are coloured
        by the measure with more mass in the subtree of the group's largest
        pair. Needs Matplotlib: ``pip install "sobolev-index[plot]"``.

        Parameters
        ----------
        path : str or path-like, optional
            Where to save the chart when ``ax`` is not given; its extension
            names the format, as for ``Figure.savefig``.
        ax : matplotlib.axes.Axes, optional
            An Axes to draw on. None (the default): a figure of its own
            (not pyplot's), saved to ``path``.
        label_words : int, default 3
            How many words of each side a bar's label shows.

        Returns
        -------
        matplotlib.axes.Axes or None
            ``ax`` when it was given; else None (the chart is saved to
            ``path``).

        Raises
        ------
        ImportError
            If Matplotlib is not installed.
        ValueError
            If neither ``path`` nor ``ax`` is given.
        """
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise ImportError('plotting needs Matplotlib: pip install "sobolev-index[plot]"') \
                from exc
        if ax is None and path is None:
            raise ValueError("give path (a file to save the chart to) or ax (an Axes to draw on)")
        own_figure = ax is None
        if own_figure:
            # A Figure of its own, not pyplot's: saving it needs no display
            # and leaves the caller's backend and open figures alone.
            from matplotlib.figure import Figure

            fig = Figure(figsize=(9, 1.2 + 0.45 * max(1, len(self.groups))))
            ax = fig.add_subplot()
        groups = self.groups[::-1]  # the largest share at the top
        labels = [_bar_label(group, label_words) for group in groups]
        colours = ["tab:blue" if group["mass_a"] >= group["mass_b"] else "tab:orange"
                   for group in groups]
        ax.barh(range(len(groups)), [100.0 * group["share"] for group in groups], color=colours)
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xlabel("share of the distance (%)")
        p = "inf" if math.isinf(self.p) else f"{self.p:g}"
        ax.set_title(f"S_{p}({self.a or 'A'}, {self.b or 'B'}) = {self.distance:.4g}: top "
                     f"{len(self.groups)} of {self.n_groups} subtrees "
                     f"({100.0 * self.shown_share:.1f}% of it)\n"
                     "blue: more of A in the subtree, orange: more of B", fontsize=9)
        if not own_figure:
            return ax
        fig.tight_layout()
        fig.savefig(path)
        return None


def _bar_label(group, n):
    """A bar's label: the subtree's words and its node (two nodes on a chain
    without mass have the same words), or its edge and root(s)."""
    if group.get("words_a") is not None:
        a = ", ".join(w["word"] for w in group["words_a"][:n]) or "-"
        b = ", ".join(w["word"] for w in group["words_b"][:n]) or "-"
        return f"A: {a} | B: {b} (node {group['edge']})"
    if len(group["roots"]) > 1:
        return f"edge {group['edge']} ({len(group['roots'])} roots)"
    return f"edge {group['edge']} (root {group['root_node']})"


class Explain:
    """Explanations of distances over the snapshot ``snap``, with the query
    features of ``query`` (a :class:`~sobolev_index.index.query.Query` of
    the same snapshot)."""

    def __init__(self, snap, query):
        self.snap = snap
        self.query = query

    def explain(self, a, b, p=None, top=10, roots=None, n_words=5):
        """SobolevIndex.explain: the pair's features per root, split into
        one term per tree edge and grouped by node."""
        p = self.snap.p if p is None else check_p(p)
        if top is not None:
            check_positive("top", top)
        check_positive("n_words", n_words)
        positions, eta = self.snap.selected_roots(roots)
        fa = self.query.features_of(a, positions)
        fb = self.query.features_of(b, positions)

        parts = [self._root_terms(fa[i], fb[i], self.snap.trees[r], p)
                 for i, r in enumerate(positions)]
        distance = float(sum(e * part["distance"] for e, part in zip(eta, parts)))
        root_rows = []
        for position, e, part in zip(positions, eta, parts):
            root_rows.append({
                "position": int(position), "node": int(self.snap.roots[position]), "eta": float(e),
                "distance": part["distance"],
                "share": float(e * part["distance"] / distance) if distance > 0 else None,
                "edges": int(len(part["edges"]))})
        n_edges = sum(len(part["edges"]) for part in parts)
        if distance == 0.0:
            return Explanation(_name(a), _name(b), p, 0.0, root_rows, [], 0, [], 0)

        # Every (root, edge) pair with a nonzero difference.
        which = np.concatenate([np.full(len(part["edges"]), i) for i, part in enumerate(parts)])
        edge = np.concatenate([part["edges"] for part in parts])
        share = np.concatenate([e * part["distance"] / distance * part["weights"]
                                for e, part in zip(eta, parts)])
        # Ordered by share, then (at p = inf, where only the largest
        # differences have one) by eta times the difference, then by root
        # and edge, so that the order is the same run after run.
        size = np.concatenate([e * part["difference"] for e, part in zip(eta, parts)])
        order = np.lexsort((edge, which, -size, -share))
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))

        # The groups: the pairs of one child node v over the roots. A
        # group's share and size are its pairs' sums; groups are ordered as
        # the pairs are (share, then size, then node). With one root every
        # group is one pair, in the pairs' order.
        group_node, group_of = np.unique(edge, return_inverse=True)
        group_share = np.bincount(group_of, weights=share, minlength=len(group_node))
        group_size = np.bincount(group_of, weights=size, minlength=len(group_node))
        group_order = np.lexsort((group_node, -group_size, -group_share))
        n_groups = int(len(group_node))
        if top is not None:
            order = order[:int(top)]
            group_order = group_order[:int(top)]
        # The pairs of the listed groups, in the pairs' order: a group's
        # first pair is its largest.
        listed = np.zeros(n_groups, dtype=bool)
        listed[group_order] = True
        members = np.flatnonzero(listed[group_of])
        members = members[np.argsort(rank[members])]

        # The subtree masses of every pair shown, as a pair or in a group:
        # _masses_below walks each root's tree once, for all its pairs.
        needed = sorted(set(order.tolist()) | set(members.tolist()), key=lambda k: rank[k])
        picked = [(int(which[k]), int(edge[k])) for k in needed]
        below_a = self._masses_below(a, picked, positions)
        below_b = self._masses_below(b, picked, positions)
        pairs_of = {}
        for k in members.tolist():
            pairs_of.setdefault(int(group_of[k]), []).append(k)
        shown_nodes = [nodes for found in (below_a, below_b) for nodes in found.values()]
        words = self._words_of_nodes(
            {node for nodes in shown_nodes for node, _ in nodes[:n_words]})
        coords = self.snap.graph.coords if words is None else None

        rows = {}
        for k, (i, v) in zip(needed, picked):
            part, tree = parts[i], self.snap.trees[positions[i]]
            j = int(np.searchsorted(part["edges"], v))
            row = {
                "root": int(positions[i]), "root_node": int(tree.root), "edge": v,
                "parent": int(tree.parent[v]), "length": float(tree.length[v]),
                "mass_a": float(part["mass_a"][j]), "mass_b": float(part["mass_b"][j]),
                "term": float(part["terms"][j]), "share": float(share[k]),
                **_sides(below_a[i, v], below_b[i, v], words, n_words),
            }
            if coords is not None:
                row["coords"] = {"edge": coords[v].tolist(),
                                 "parent": coords[tree.parent[v]].tolist()}
            rows[k] = row

        groups = []
        for g in group_order.tolist():
            group_parts = [rows[k] for k in pairs_of[g]]
            main = group_parts[0]
            group = {
                "edge": int(group_node[g]), "share": float(group_share[g]),
                "roots": [row["root"] for row in group_parts],
                "root": main["root"], "root_node": main["root_node"], "parent": main["parent"],
                "length": main["length"], "mass_a": main["mass_a"], "mass_b": main["mass_b"],
                **{side: main[side] for side in ("nodes_a", "nodes_b", "words_a", "words_b")},
            }
            if "coords" in main:
                group["coords"] = main["coords"]
            group["parts"] = group_parts
            groups.append(group)
        return Explanation(_name(a), _name(b), p, distance, root_rows,
                           [rows[k] for k in order.tolist()], n_edges, groups, n_groups)

    @staticmethod
    def _root_terms(fa, fb, tree, p):
        """One root's edges with a nonzero difference (sorted), the two
        subtree masses on them, their terms, S_p of the root, and each
        edge's weight within the root (the shares of its part, summing to 1)."""
        edges = np.union1d(fa.indices, fb.indices)
        mass_a = np.zeros(len(edges))
        mass_b = np.zeros(len(edges))
        mass_a[np.searchsorted(edges, fa.indices)] = fa.data
        mass_b[np.searchsorted(edges, fb.indices)] = fb.data
        difference = np.abs(mass_a - mass_b)
        keep = difference > 0
        edges, mass_a, mass_b, difference = edges[keep], mass_a[keep], mass_b[keep], difference[keep]
        largest = float(difference.max(initial=0.0))
        if largest == 0.0:
            weights = terms = np.zeros(0)
            distance = 0.0
        elif math.isinf(p):
            terms = difference
            distance = largest
            ties = difference == largest
            weights = ties / np.count_nonzero(ties)
        else:
            length = tree.length[edges]
            terms = length * difference ** p
            # Relative to the largest difference, as distances.difference_distance
            # computes S_p: no term underflows for large p.
            relative = length * (difference / largest) ** p
            total = float(np.sum(relative))
            distance = largest * total ** (1.0 / p)
            weights = relative / total
        return {"edges": edges, "mass_a": mass_a, "mass_b": mass_b, "difference": difference,
                "terms": terms, "distance": float(distance), "weights": weights}

    def _masses_below(self, item, picked, positions):
        """{(i, v): [(node, mass), ...]} for each picked (root index i, edge
        v): the nodes of ``item``'s measure in v's subtree of root
        ``positions[i]``, by decreasing mass (ties by node)."""
        nodes, masses = self._node_masses(item)
        found = {key: [] for key in picked}
        by_root = {}
        for i, v in picked:
            by_root.setdefault(i, []).append(v)
        for i, wanted in by_root.items():
            tree = self.snap.trees[positions[i]]
            mark = np.zeros(tree.n_nodes, dtype=bool)
            mark[wanted] = True
            # Every support node walks up to the root at once; each step
            # records the nodes now standing on a picked edge.
            current = nodes.copy()
            alive = current != tree.root
            while alive.any():
                at = np.flatnonzero(alive)
                hits = at[mark[current[at]]]
                for s in hits.tolist():
                    found[i, int(current[s])].append((int(nodes[s]), float(masses[s])))
                current[at] = tree.parent[current[at]]
                alive[at] = current[at] != tree.root
        for pairs in found.values():
            pairs.sort(key=lambda pair: (-pair[1], pair[0]))
        return found

    def _node_masses(self, item):
        """The distinct nodes of a stored key's or a measure's support and
        its normalised masses on them."""
        if isinstance(item, str):
            doc = self.snap.get(item)
            nodes, masses = doc["nodes"], doc["masses"]
        else:
            batch = as_measure_batch([item], n_nodes=self.snap.graph.n_nodes)
            nodes, masses = batch.nodes, batch.masses * batch.row_scale[0]
        unique, inverse = np.unique(np.asarray(nodes, dtype=np.int64), return_inverse=True)
        return unique, np.bincount(inverse, weights=masses, minlength=len(unique))

    def _words_of_nodes(self, nodes):
        """{node: [words]} from the catalog's words table, most frequent word
        first (then alphabetical); None when the index has no words table."""
        if not self.snap.catalog.has_table(WORDS_TABLE):
            return None
        out = {}
        nodes = sorted(nodes)
        for start in range(0, len(nodes), _SQL_CHUNK):
            chunk = nodes[start:start + _SQL_CHUNK]
            rows = self.snap.catalog.query(
                f"SELECT word, node, df FROM {WORDS_TABLE} WHERE node IN "
                f"({', '.join('?' * len(chunk))})", chunk)
            for word, node, df in rows:
                out.setdefault(int(node), []).append((-int(df or 0), str(word)))
        return {node: [word for _, word in sorted(pairs)] for node, pairs in out.items()}


def _sides(nodes_a, nodes_b, words, n):
    """A row's ``nodes_a``/``nodes_b`` and ``words_a``/``words_b`` (None
    without a words table) from the two measures' [(node, mass)] lists."""
    return {
        "nodes_a": [{"node": node, "mass": mass} for node, mass in nodes_a[:n]],
        "nodes_b": [{"node": node, "mass": mass} for node, mass in nodes_b[:n]],
        "words_a": None if words is None else _words(nodes_a, words, n),
        "words_b": None if words is None else _words(nodes_b, words, n),
    }


def _words(nodes, words, n):
    """The first ``n`` words of ``nodes`` ([(node, mass)] by decreasing
    mass) as [{"word", "node", "mass"}]."""
    out = []
    for node, mass in nodes:
        for word in words.get(node, ()):
            if len(out) == n:
                return out
            out.append({"word": word, "node": node, "mass": mass})
    return out


def _name(item):
    """A stored key as it is; None for a measure given directly."""
    return item if isinstance(item, str) else None
