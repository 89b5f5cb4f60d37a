"""Draw the README's concept figure: Sobolev transport S_1 on a shortest-path tree.

    python bench/figure_concept.py [--out PATH]

writes docs/figures/sobolev-transport.png (1200 x 600 px) unless ``--out``
says otherwise, and prints the value of S_1 it shows.

Left panel: nine nodes at fixed points of the plane, each joined to its
three nearest neighbours by an edge whose length is the Euclidean distance;
the shortest-path tree of node 0 (the root) is drawn bold and the other
edges faint. Two probability measures, mu and nu, sit on three nodes each as
discs whose area is proportional to mass. Each tree edge e, from a node v up
to its parent, is labelled ``alpha_mu(e) / alpha_nu(e)``: the mass of each
measure in the subtree below e.

Right panel: the per-edge terms w_e |alpha_mu(e) - alpha_nu(e)| as bars;
their sum is S_1(mu, nu), which on a tree is the 1-Wasserstein distance for
the tree's path metric.

The value is computed three or four ways and the script stops if they
disagree: with the package (``sobolev_distance`` and ``pairwise_sobolev`` on
the features of ``ShortestPathTree.features_of``), with a plain NumPy sum
over the drawn tree edges, and, when POT is installed, as the exact optimal
transport cost ``ot.emd2`` under the tree's path metric. The tree itself is
checked against SciPy's Dijkstra.
"""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from scipy.sparse import coo_matrix  # noqa: E402
from scipy.sparse.csgraph import dijkstra, shortest_path  # noqa: E402

from sobolev_index import Graph, pairwise_sobolev, sobolev_distance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, os.pardir, "docs", "figures", "sobolev-transport.png"))

# Node positions (node 0 is the root), chosen by hand so that the tree
# branches and no two labels collide.
POSITIONS = np.array([
    [1.0, 3.0],
    [2.7, 4.7],
    [3.0, 1.3],
    [4.6, 3.1],
    [5.2, 5.5],
    [6.6, 1.2],
    [7.1, 3.9],
    [8.9, 2.5],
    [9.0, 5.4],
])
ROOT = 0
NEIGHBOURS = 3

# The two measures: node -> mass.
MU = {1: 0.25, 2: 0.50, 8: 0.25}
NU = {3: 0.25, 6: 0.50, 7: 0.25}

MU_COLOUR = "#1f77b4"
NU_COLOUR = "#ff7f0e"
TREE_COLOUR = "#333333"
TERM_COLOUR = "#7b5ea7"
DISC_AREA = 2400.0  # marker area (pt^2) of a unit mass

TOLERANCE = 1e-12


def knn_edges(points, k):
    """Each point joined to its k nearest others, as sorted (u, v) pairs, u < v."""
    gaps = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=2)
    pairs = set()
    for u in range(len(points)):
        for v in np.argsort(gaps[u])[1:k + 1]:
            pairs.add((min(u, int(v)), max(u, int(v))))
    edges = np.array(sorted(pairs), dtype=np.int64)
    lengths = gaps[edges[:, 0], edges[:, 1]]
    return edges, lengths


def as_pair(measure):
    """A node -> mass dict as the (nodes, masses) pair the package takes."""
    nodes = sorted(measure)
    return nodes, [measure[v] for v in nodes]


def subtree_masses(parent, measure):
    """alpha(v) for every node v: the mass of ``measure`` at v and below it,
    found by carrying each node's mass up its path to the root."""
    alpha = np.zeros(len(parent))
    for node, mass in measure.items():
        v = node
        while parent[v] >= 0:
            alpha[v] += mass
            v = parent[v]
    return alpha


def compute(points):
    """Build the graph and tree, and compute S_1 in every available way."""
    edges, lengths = knn_edges(points, NEIGHBOURS)
    graph = Graph.from_edges(len(points), edges, lengths, coords=points)
    tree = graph.tree(ROOT)
    parent = tree.parent

    # The package's tree is the shortest-path tree SciPy finds.
    n = len(points)
    adjacency = coo_matrix((lengths, (edges[:, 0], edges[:, 1])), shape=(n, n)).tocsr()
    _, predecessors = dijkstra(adjacency, directed=False, indices=ROOT, return_predecessors=True)
    predecessors = np.where(predecessors < 0, -1, predecessors)
    assert np.array_equal(predecessors, parent), (predecessors, parent)

    tree_nodes = np.array([v for v in range(n) if v != ROOT])
    weight = np.linalg.norm(points[tree_nodes] - points[parent[tree_nodes]], axis=1)
    alpha_mu = subtree_masses(parent, MU)
    alpha_nu = subtree_masses(parent, NU)
    terms = weight * np.abs(alpha_mu[tree_nodes] - alpha_nu[tree_nodes])
    by_numpy = float(terms.sum())

    mu, nu = as_pair(MU), as_pair(NU)
    features = tree.features_of([mu, nu]).toarray()
    assert np.allclose(features[0], alpha_mu, rtol=0, atol=TOLERANCE)
    assert np.allclose(features[1], alpha_nu, rtol=0, atol=TOLERANCE)
    by_distance = float(sobolev_distance(mu, nu, tree, p=1))
    by_pairwise = float(pairwise_sobolev(features, trees=tree, p=1)[0, 1])

    checks = {
        "numpy sum over tree edges": by_numpy,
        "sobolev_distance": by_distance,
        "pairwise_sobolev": by_pairwise,
    }
    try:
        import ot
    except ImportError:
        ot = None
    if ot is not None:
        tree_adjacency = coo_matrix((weight, (tree_nodes, parent[tree_nodes])), shape=(n, n)).tocsr()
        path_metric = shortest_path(tree_adjacency, directed=False)
        a = np.zeros(n)
        b = np.zeros(n)
        for node, mass in MU.items():
            a[node] = mass
        for node, mass in NU.items():
            b[node] = mass
        checks["ot.emd2 (tree path metric)"] = float(ot.emd2(a, b, path_metric))

    for name, value in checks.items():
        assert abs(value - by_numpy) <= 1e-9 * max(1.0, by_numpy), (name, value, by_numpy)

    return {
        "edges": edges,
        "parent": parent,
        "tree_nodes": tree_nodes,
        "weight": weight,
        "alpha_mu": alpha_mu,
        "alpha_nu": alpha_nu,
        "terms": terms,
        "value": by_distance,
        "checks": checks,
    }


def draw_graph(ax, points, result):
    parent = result["parent"]
    tree_pairs = {(min(v, int(parent[v])), max(v, int(parent[v]))) for v in result["tree_nodes"]}

    for u, v in result["edges"]:
        (x0, y0), (x1, y1) = points[u], points[v]
        if (int(u), int(v)) in tree_pairs:
            ax.plot([x0, x1], [y0, y1], color=TREE_COLOUR, lw=3.2, solid_capstyle="round", zorder=1)
        else:
            ax.plot([x0, x1], [y0, y1], color="#b8b8b8", lw=1.2, ls=(0, (4, 3)), zorder=0)

    for measure, colour in ((MU, MU_COLOUR), (NU, NU_COLOUR)):
        nodes = list(measure)
        ax.scatter(points[nodes, 0], points[nodes, 1], s=[DISC_AREA * measure[v] for v in nodes],
                   color=colour, alpha=0.55, edgecolor=colour, linewidth=1.5, zorder=2)

    for v, (x, y) in enumerate(points):
        is_root = v == ROOT
        ax.scatter([x], [y], s=210, color=TREE_COLOUR if is_root else "white",
                   edgecolor=TREE_COLOUR, linewidth=1.4, zorder=3)
        ax.text(x, y, str(v), ha="center", va="center", fontsize=9, zorder=4,
                color="white" if is_root else "black", fontweight="bold")
    x, y = points[ROOT]
    ax.text(x, y - 0.42, "root", ha="center", va="top", fontsize=11, fontstyle="italic")

    # alpha_mu(e) / alpha_nu(e) on each tree edge, in the measures' colours.
    for v in result["tree_nodes"]:
        mid = (points[v] + points[parent[v]]) / 2
        left = f"{result['alpha_mu'][v]:.2f}"
        right = f"{result['alpha_nu'][v]:.2f}"
        ax.text(mid[0], mid[1], f"{left} / {right}", ha="center", va="center", fontsize=10,
                fontweight="bold", color="none", zorder=5,
                bbox=dict(boxstyle="round,pad=0.35", fc="white", ec="#999999", lw=0.8))
        ax.annotate("/", mid, ha="center", va="center", fontsize=10, color="#555555", zorder=6)
        ax.annotate(left, mid, xytext=(-5, 0), textcoords="offset points", ha="right", va="center",
                    fontsize=10, color=MU_COLOUR, fontweight="bold", zorder=6)
        ax.annotate(right, mid, xytext=(5, 0), textcoords="offset points", ha="left", va="center",
                    fontsize=10, color=NU_COLOUR, fontweight="bold", zorder=6)

    handles = [
        Line2D([], [], ls="", marker="o", ms=12, color=MU_COLOUR, alpha=0.6, label=r"$\mu$ (area = mass)"),
        Line2D([], [], ls="", marker="o", ms=12, color=NU_COLOUR, alpha=0.6, label=r"$\nu$ (area = mass)"),
        Line2D([], [], color=TREE_COLOUR, lw=3.2, label="shortest-path tree"),
        Line2D([], [], color="#b8b8b8", lw=1.2, ls=(0, (4, 3)), label="other graph edges"),
    ]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, -0.02), ncol=4, fontsize=10,
              frameon=False, handlelength=1.8, columnspacing=1.4)
    ax.set_title(r"edge label: $\alpha_\mu(e)\;/\;\alpha_\nu(e)$ = mass of $\mu$ / $\nu$ below edge $e$",
                 fontsize=11)
    ax.set_xlim(0.3, 9.7)
    ax.set_ylim(0.0, 6.1)
    ax.set_aspect("equal")
    ax.axis("off")


def draw_terms(ax, result):
    parent = result["parent"]
    nodes = result["tree_nodes"]
    terms = result["terms"]
    rows = np.arange(len(nodes))
    ax.barh(rows, terms, color=TERM_COLOUR, alpha=0.8, height=0.62)
    ax.set_yticks(rows, [f"{v}→{parent[v]}" for v in nodes], fontsize=10)
    ax.invert_yaxis()
    ax.set_ylabel("tree edge e (node → parent)", fontsize=10)
    ax.set_xlabel(r"$w_e\,|\alpha_\mu(e)-\alpha_\nu(e)|$", fontsize=11)
    top = max(terms.max(), 1e-12)
    ax.set_xlim(0, top * 2.05)
    for row, v, term in zip(rows, nodes, terms):
        gap = abs(result["alpha_mu"][v] - result["alpha_nu"][v])
        ax.text(term + top * 0.04, row, f"{result['weight'][row]:.2f} × {gap:.2f} = {term:.2f}",
                va="center", fontsize=9.5, color="#333333")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="x", labelsize=9)
    ax.set_title(r"per-edge terms, $w_e$ = Euclidean length of $e$", fontsize=11)
    ax.text(0.98, 0.985, f"sum = S$_1$ = {result['value']:.3f}", transform=ax.transAxes,
            ha="right", va="top", fontsize=12, fontweight="bold", color=TERM_COLOUR)


def draw(points, result, out):
    fig = plt.figure(figsize=(12, 6), dpi=100, facecolor="white")
    grid = fig.add_gridspec(1, 2, width_ratios=[1.65, 1], left=0.01, right=0.98, top=0.79, bottom=0.1,
                            wspace=0.16)
    draw_graph(fig.add_subplot(grid[0]), points, result)
    draw_terms(fig.add_subplot(grid[1]), result)
    fig.suptitle("Sobolev transport on a shortest-path tree", fontsize=16, fontweight="bold", y=0.98)
    fig.text(0.5, 0.885,
             r"$S_p(\mu,\nu) = \left(\sum_{e}\, w_e\,|\alpha_\mu(e)-\alpha_\nu(e)|^p\right)^{1/p}$"
             rf"$\qquad$ for $p = 1$: $S_1(\mu,\nu) = {result['value']:.3f}$"
             r"$\;=\;W_1(\mu,\nu)$ on the tree",
             ha="center", va="center", fontsize=14)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=100, facecolor="white", metadata={"Software": None})
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help="where to write the PNG (default: docs/figures/sobolev-transport.png)")
    args = parser.parse_args(argv)

    result = compute(POSITIONS)
    draw(POSITIONS, result, args.out)
    for name, value in result["checks"].items():
        print(f"{name:>28}: {value:.12f}")
    print(f"S_1(mu, nu) = {result['value']:.6f}; all {len(result['checks'])} agree. Wrote {args.out}")


if __name__ == "__main__":
    main()
