"""SobolevIndex.explain and `sobolev-index explain`: which subtrees carry S_p.

The per-edge terms, subtree masses and shares are checked against
``reference.py`` (features and S_p from the paper's formula, written apart
from the library) and against a small text index built by hand, whose
shares, distances and words are worked out in the comments below. The
groups (one per child node v over every root's tree) are checked against
the reference's (root, edge) terms grouped by v here, and against the same
hand-built tree explained from two roots.
"""
import json
import math
import re

import numpy as np
import pytest
import reference as ref
from _support import corpus as tc
from _support.cli import run
from _support.graphs import pick_roots, random_graph
from _support.measures import random_measures

from sobolev_index import Graph, SobolevIndex
from sobolev_index.errors import KeyNotFoundError

P_VALUES = [1.0, 1.5, 2.0, 3.0, math.inf]


# --------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    """An index over three roots of a random graph (with coordinates, no
    words table: a point index), its GraphSpec, roots and measures."""
    spec = random_graph(seed=1607, n=30, extra=25, kind="euclidean")
    roots = pick_roots(spec, 3, seed=3)
    rng = np.random.default_rng(11)
    measures = random_measures(rng, spec.n, 6, k=6)
    path = tmp_path_factory.mktemp("explain") / "sliced"
    eta = [0.5, 0.3, 0.2]
    with SobolevIndex.create(str(path), spec.lib(), roots=roots, eta=eta) as index:
        index.add(measures, keys=[f"m{i}" for i in range(len(measures))])
    index = SobolevIndex.open(str(path))
    yield index, spec, roots, eta, measures
    index.close()


# A tree on six nodes, root 0, and a word table written by hand:
#
#              0 thing
#        1.0 /   \ 2.0
#   1 fruit        2 animal
#   0.5 /  \ 1.5      \ 1.0
# 3 apple,pear  4 banana  5 cat
#
# "apple" (df 5) and "pear" (df 2) share node 3. A puts 0.5 on node 3, 0.3
# on 4 and 0.2 on 0; B puts 0.6 on 5 and 0.4 on 1. Subtree masses (A, B):
# edge 1 (0.8, 0.4), edge 2 (0, 0.6), edge 3 (0.5, 0), edge 4 (0.3, 0),
# edge 5 (0, 0.6). S_1 terms: 0.4, 1.2, 0.25, 0.45, 0.6, so S_1 = 2.9;
# S_2^2 terms: 0.16, 0.72, 0.125, 0.135, 0.36, so S_2^2 = 1.5; S_inf = 0.6,
# reached on edges 2 and 5 both.
HAND_EDGES = [(0, 1, 1.0), (0, 2, 2.0), (1, 3, 0.5), (1, 4, 1.5), (2, 5, 1.0)]
HAND_WORDS = [("thing", 0, 1), ("fruit", 1, 3), ("apple", 3, 5), ("pear", 3, 2),
              ("banana", 4, 4), ("animal", 2, 1), ("cat", 5, 6)]
HAND_A = ([3, 4, 0], [0.5, 0.3, 0.2])
HAND_B = ([5, 1], [0.6, 0.4])
HAND_S1_TERMS = {1: 0.4, 2: 1.2, 3: 0.25, 4: 0.45, 5: 0.6}


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    from sobolev_index.ingest.words import add_words

    edges = np.array([(u, v) for u, v, _ in HAND_EDGES])
    lengths = np.array([w for _, _, w in HAND_EDGES])
    graph = Graph.from_edges(6, edges, lengths)
    path = tmp_path_factory.mktemp("explain") / "hand"
    with SobolevIndex.create(str(path), graph, roots=[0]) as index:
        add_words(index.catalog, HAND_WORDS)
        index.add([HAND_A, HAND_B, HAND_A], keys=["A", "B", "A2"],
                  fields=[{"text": "apple apple pear banana thing"}, {"text": "cat fruit"},
                          None])
    index = SobolevIndex.open(str(path))
    yield index
    index.close()


@pytest.fixture(scope="module")
def text_index(tmp_path_factory):
    """A text index built by the command line from the synthetic corpus."""
    directory = tmp_path_factory.mktemp("explain-cli")
    corpus_path, vectors_path = tc.make_files(str(directory))
    index = directory / "index"
    run("build", index, "--corpus", corpus_path, "--vectors", vectors_path, "--nodes", 12,
        "--roots", 2, "--silent")
    return index


def _reference_edges(spec, roots, eta, mu, nu, p):
    """{(root position, edge): (mass_a, mass_b, term, share)} over the edges
    with a nonzero difference, and the sliced distance, from reference.py."""
    return _reference_pairs([spec.ref_tree(r) for r in roots], eta, mu, nu, p)


def _reference_pairs(trees, eta, mu, nu, p):
    """_reference_edges over reference trees (RefTree) and their eta."""
    distance = ref.ref_sliced(mu, nu, trees, p, eta)
    out = {}
    for position, (tree, e) in enumerate(zip(trees, eta)):
        a, b = ref.ref_features(tree, *mu), ref.ref_features(tree, *nu)
        part = ref.ref_sobolev(mu, nu, tree, p)
        diffs = {v: abs(a[v] - b[v]) for v in tree.edge_nodes() if a[v] != b[v]}
        if math.isinf(p):
            ties = [v for v, d in diffs.items() if d == max(diffs.values())]
            terms = diffs
            weight = {v: (1.0 / len(ties) if v in ties else 0.0) for v in diffs}
        else:
            terms = {v: tree.w[v] * d ** p for v, d in diffs.items()}
            weight = {v: t / math.fsum(terms.values()) for v, t in terms.items()}
        for v in diffs:
            out[position, v] = (a[v], b[v], terms[v], e * part / distance * weight[v])
    return out, distance


def _reference_groups(pairs, eta):
    """The pairs of _reference_edges grouped by their edge's child node v:
    {v: {"share": the sum of its pairs' shares, "size": the sum of eta times
    their differences, "roots": {root position: pair share}}}."""
    out = {}
    for (position, v), (mass_a, mass_b, _, share) in pairs.items():
        group = out.setdefault(v, {"share": 0.0, "size": 0.0, "roots": {}})
        group["share"] += share
        group["size"] += eta[position] * abs(mass_a - mass_b)
        group["roots"][position] = share
    return out


def _index_reference(index, a, b, p):
    """The reference pairs, distance, groups and trees of two stored keys of
    ``index``, from its graph's arrays, its roots and eta alone."""
    graph = index.graph
    trees = [ref.ref_tree(graph.n_nodes, graph.edges, graph.lengths, int(r))
             for r in index.roots]
    eta = (index.eta / index.eta.sum()).tolist()
    mu, nu = ((index.get(key)["nodes"], index.get(key)["masses"]) for key in (a, b))
    pairs, distance = _reference_pairs(trees, eta, mu, nu, p)
    return pairs, distance, _reference_groups(pairs, eta)


# ------------------------------------------------- against the reference
@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("pair", [(0, 1), (2, 5), (4, 3)])
def test_every_edge_matches_the_reference(sliced, p, pair):
    index, spec, roots, eta, measures = sliced
    mu, nu = measures[pair[0]], measures[pair[1]]
    expected, distance = _reference_edges(spec, roots, eta, mu, nu, p)
    found = index.explain(f"m{pair[0]}", f"m{pair[1]}", p=p, top=None)

    assert found.distance == pytest.approx(distance, rel=1e-12)
    assert found.distance == pytest.approx(index.distance(f"m{pair[0]}", f"m{pair[1]}", p=p),
                                           rel=1e-13)
    assert found.n_edges == len(expected) == len(found.edges)
    assert {(e["root"], e["edge"]) for e in found.edges} == set(expected)
    for edge in found.edges:
        mass_a, mass_b, term, share = expected[edge["root"], edge["edge"]]
        assert edge["mass_a"] == pytest.approx(mass_a, rel=1e-12, abs=1e-15)
        assert edge["mass_b"] == pytest.approx(mass_b, rel=1e-12, abs=1e-15)
        assert edge["term"] == pytest.approx(term, rel=1e-9, abs=1e-300)
        assert edge["share"] == pytest.approx(share, rel=1e-9, abs=1e-15)
        assert edge["root_node"] == roots[edge["root"]]
        assert edge["length"] == spec.ref_tree(roots[edge["root"]]).w[edge["edge"]]
    # The shares of all edges sum to 1 ...
    assert math.fsum(e["share"] for e in found.edges) == pytest.approx(1.0, rel=1e-12)
    # ... and the distance comes back from the terms.
    by_root = [[e["term"] for e in found.edges if e["root"] == r] for r in range(len(roots))]
    if math.isinf(p):
        again = math.fsum(e * max(t, default=0.0) for e, t in zip(eta, by_root))
    else:
        again = math.fsum(e * math.fsum(t) ** (1 / p) for e, t in zip(eta, by_root))
    assert again == pytest.approx(distance, rel=1e-12)
    for info, e in zip(found.roots, eta):
        assert info["eta"] == pytest.approx(e)
        assert info["distance"] == pytest.approx(
            ref.ref_sobolev(mu, nu, spec.ref_tree(roots[info["position"]]), p), rel=1e-12)


@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("top", [1, 3, 10])
def test_the_top_edges_are_the_reference_largest(sliced, p, top):
    index, spec, roots, eta, measures = sliced
    expected, _ = _reference_edges(spec, roots, eta, measures[1], measures[3], p)
    found = index.explain("m1", "m3", p=p, top=top)
    assert len(found.edges) == min(top, len(expected))
    # Compared by value, so that ties may be broken either way.
    best = sorted((share for *_, share in expected.values()), reverse=True)[:top]
    np.testing.assert_allclose([e["share"] for e in found.edges], best, rtol=1e-9, atol=1e-15)
    # The shown share is that of the listed groups, what the tables show.
    groups = _reference_groups(expected, eta)
    best_groups = sorted((g["share"] for g in groups.values()), reverse=True)[:top]
    assert found.shown_share == pytest.approx(math.fsum(best_groups), rel=1e-9, abs=1e-15)
    for edge in found.edges:
        assert edge["share"] == pytest.approx(expected[edge["root"], edge["edge"]][3],
                                              rel=1e-9, abs=1e-15)


def test_the_measures_nodes_in_each_subtree(sliced):
    index, spec, roots, eta, measures = sliced
    mu, nu = measures[0], measures[2]
    found = index.explain("m0", "m2", top=None, n_words=100)
    for edge in found.edges:
        tree = spec.ref_tree(roots[edge["root"]])
        for side, measure in (("a", mu), ("b", nu)):
            rho = ref.dense_measure(*measure, spec.n)
            expected = {u: rho[u] for u in tree.gamma[edge["edge"]] if rho[u] > 0}
            listed = edge[f"nodes_{side}"]
            assert {n["node"] for n in listed} == set(expected)
            for n in listed:
                assert n["mass"] == pytest.approx(expected[n["node"]], rel=1e-12)
            masses = [n["mass"] for n in listed]
            assert masses == sorted(masses, reverse=True)
            assert math.fsum(masses) == pytest.approx(edge[f"mass_{side}"], rel=1e-12)


def test_n_words_caps_the_nodes_listed(sliced):
    index = sliced[0]
    found = index.explain("m0", "m2", top=None, n_words=1)
    assert max(len(e["nodes_a"]) for e in found.edges) == 1
    assert any(len(e["nodes_a"]) > 1
               for e in index.explain("m0", "m2", top=None, n_words=50).edges)


def test_a_point_index_gives_the_edge_coordinates_and_no_words(sliced):
    index, spec, roots, _, _ = sliced
    for edge in index.explain("m0", "m1", top=5).edges:
        parent = spec.ref_tree(roots[edge["root"]]).parent[edge["edge"]]
        assert edge["parent"] == parent
        assert edge["coords"]["edge"] == spec.coords[edge["edge"]].tolist()
        assert edge["coords"]["parent"] == spec.coords[parent].tolist()
        assert edge["words_a"] is None and edge["words_b"] is None


def test_one_root_of_a_sliced_index(sliced):
    index, spec, roots, _, measures = sliced
    found = index.explain("m0", "m4", p=2, top=None, roots=[1])
    tree = spec.ref_tree(roots[1])
    assert found.distance == pytest.approx(ref.ref_sobolev(measures[0], measures[4], tree, 2),
                                           rel=1e-12)
    assert {e["root"] for e in found.edges} == {1}
    power = math.fsum(e["term"] for e in found.edges)
    for edge in found.edges:  # one root: a share is the term over S_p^p
        assert edge["share"] == pytest.approx(edge["term"] / power, rel=1e-12)


def test_a_measure_can_stand_for_b(sliced):
    index, spec, roots, eta, measures = sliced
    query = (np.array([0, 5, 7]), np.array([1.0, 2.0, 1.0]))
    found = index.explain("m2", query, top=None)
    assert found.b is None and found.a == "m2"
    assert found.distance == pytest.approx(index.distance("m2", query), rel=1e-13)
    assert found.distance == pytest.approx(
        ref.ref_sliced(measures[2], query, [spec.ref_tree(r) for r in roots], 1.0, eta),
        rel=1e-12)
    assert math.fsum(e["share"] for e in found.edges) == pytest.approx(1.0, rel=1e-12)


def test_a_large_p_has_finite_shares_that_sum_to_one(sliced):
    index, spec, roots, eta, measures = sliced
    found = index.explain("m0", "m5", p=60, top=None)
    assert found.distance == pytest.approx(
        ref.ref_sliced(measures[0], measures[5], [spec.ref_tree(r) for r in roots], 60, eta),
        rel=1e-12)
    shares = [e["share"] for e in found.edges]
    assert all(math.isfinite(s) and s >= 0 for s in shares)
    assert math.fsum(shares) == pytest.approx(1.0, rel=1e-12)


# ----------------------------------------------- groups over the roots
def _assert_group_order(groups, expected):
    """By share, then (groups of equal share, such as those of share 0 at
    p = inf) by the reference's size, then by node."""
    keys = [(-expected[g["edge"]]["share"], -expected[g["edge"]]["size"], g["edge"])
            for g in groups]
    for (share, size, node), (share2, size2, node2) in zip(keys, keys[1:]):
        assert share <= share2 + 1e-12
        if share == share2:
            assert size < size2 - 1e-12 or (abs(size - size2) <= 1e-12 and node < node2)


@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("pair", [(0, 1), (2, 5), (4, 3)])
def test_groups_are_the_reference_pairs_summed_by_node(sliced, p, pair):
    index, spec, roots, eta, measures = sliced
    pairs, distance = _reference_edges(spec, roots, eta, measures[pair[0]], measures[pair[1]], p)
    expected = _reference_groups(pairs, eta)
    found = index.explain(f"m{pair[0]}", f"m{pair[1]}", p=p, top=None)

    # One group per node with a nonzero difference in some root: none twice.
    nodes = [g["edge"] for g in found.groups]
    assert len(nodes) == len(set(nodes)) == found.n_groups == len(expected)
    assert set(nodes) == set(expected)
    assert found.n_groups < found.n_edges  # three roots share most of their nodes
    for group in found.groups:
        want = expected[group["edge"]]
        assert group["share"] == pytest.approx(want["share"], rel=1e-9, abs=1e-15)
        # Its roots, the largest pair share first, and its pairs in that order.
        assert sorted(group["roots"]) == sorted(want["roots"])
        shares = [want["roots"][r] for r in group["roots"]]
        assert shares == sorted(shares, reverse=True)
        assert [(part["root"], part["edge"]) for part in group["parts"]] == \
            [(r, group["edge"]) for r in group["roots"]]
        for part in group["parts"]:
            assert part["share"] == pytest.approx(want["roots"][part["root"]], rel=1e-9,
                                                  abs=1e-15)
        # Shown with its largest pair's edge and masses.
        mass_a, mass_b, _, _ = pairs[group["roots"][0], group["edge"]]
        main = spec.ref_tree(roots[group["roots"][0]])
        assert group["root"] == group["roots"][0]
        assert group["root_node"] == roots[group["roots"][0]]
        assert group["parent"] == main.parent[group["edge"]]
        assert group["length"] == main.w[group["edge"]]
        assert group["mass_a"] == pytest.approx(mass_a, rel=1e-12, abs=1e-15)
        assert group["mass_b"] == pytest.approx(mass_b, rel=1e-12, abs=1e-15)
        assert group["coords"]["edge"] == spec.coords[group["edge"]].tolist()
    _assert_group_order(found.groups, expected)
    assert math.fsum(g["share"] for g in found.groups) == pytest.approx(1.0, rel=1e-12)
    assert found.shown_share == pytest.approx(1.0, rel=1e-12)
    assert found.distance == pytest.approx(distance, rel=1e-12)


@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("top", [1, 3, 10])
def test_the_top_groups_are_the_reference_largest(sliced, p, top):
    index, spec, roots, eta, measures = sliced
    pairs, _ = _reference_edges(spec, roots, eta, measures[1], measures[3], p)
    expected = _reference_groups(pairs, eta)
    found = index.explain("m1", "m3", p=p, top=top)
    assert len(found.groups) == min(top, len(expected))
    assert found.n_groups == len(expected)
    best = sorted((g["share"] for g in expected.values()), reverse=True)[:top]
    np.testing.assert_allclose([g["share"] for g in found.groups], best, rtol=1e-9, atol=1e-15)
    assert found.shown_share == pytest.approx(math.fsum(best), rel=1e-9, abs=1e-15)
    # The first groups of the whole list, whole: every root of each.
    everything = index.explain("m1", "m3", p=p, top=None)
    assert found.groups == everything.groups[:top]
    assert [len(g["parts"]) for g in found.groups] == [len(expected[g["edge"]]["roots"])
                                                        for g in found.groups]


def test_a_group_lists_each_trees_nodes_and_shows_its_largest(sliced):
    index, spec, roots, eta, measures = sliced
    mu, nu = measures[0], measures[2]
    found = index.explain("m0", "m2", top=None, n_words=100)
    capped = {g["edge"]: g for g in index.explain("m0", "m2", top=None, n_words=2).groups}
    differs_somewhere = False
    for group in found.groups:
        v = group["edge"]
        for side, measure in (("a", mu), ("b", nu)):
            rho = ref.dense_measure(*measure, spec.n)
            listed = []
            for part in group["parts"]:
                below = spec.ref_tree(roots[part["root"]]).gamma[v]
                expected = sorted(((u, rho[u]) for u in below if rho[u] > 0),
                                  key=lambda pair: (-pair[1], pair[0]))
                listed.append(part[f"nodes_{side}"])
                assert [n["node"] for n in listed[-1]] == [u for u, _ in expected]
                np.testing.assert_allclose([n["mass"] for n in listed[-1]],
                                           [m for _, m in expected], rtol=1e-12)
            # The row shows the nodes of its largest pair, as it shows its masses.
            assert group[f"nodes_{side}"] == listed[0]
            assert capped[v][f"nodes_{side}"] == listed[0][:2]
            differs_somewhere |= any(nodes != listed[0] for nodes in listed)
    # Some subtree holds other nodes in another root's tree.
    assert differs_somewhere


def test_with_one_root_each_group_is_its_pair(sliced, hand):
    index, _, _, _, _ = sliced
    for found in (hand.explain("A", "B", top=None), hand.explain("A", "B", p="inf", top=3),
                  index.explain("m0", "m4", p=2, top=None, roots=[1]),
                  index.explain("m0", "m4", p="inf", top=4, roots=[2])):
        assert found.n_groups == found.n_edges
        assert len(found.groups) == len(found.edges)
        for group, edge in zip(found.groups, found.edges):
            assert group["parts"] == [edge] and group["roots"] == [edge["root"]]
            shown = {key: value for key, value in group.items() if key not in ("roots", "parts")}
            assert shown == {key: value for key, value in edge.items() if key != "term"}
        assert found.shown_share == pytest.approx(math.fsum(e["share"] for e in found.edges),
                                                  rel=1e-15)
        assert found.to_dict()["groups"] == found.groups


# -------------------------------------------------- the hand-built index
def test_hand_built_shares_and_distances(hand):
    found = hand.explain("A", "B", p=1, top=None)
    assert found.distance == pytest.approx(2.9, rel=1e-12)
    assert [e["edge"] for e in found.edges] == [2, 5, 4, 1, 3]
    for edge in found.edges:
        assert edge["term"] == pytest.approx(HAND_S1_TERMS[edge["edge"]], rel=1e-12)
        assert edge["share"] == pytest.approx(HAND_S1_TERMS[edge["edge"]] / 2.9, rel=1e-12)
    assert hand.explain("A", "B", p=2, top=None).distance == pytest.approx(math.sqrt(1.5),
                                                                          rel=1e-12)
    # At p = inf edges 2 and 5 both reach the largest difference, 0.6:
    # they split the distance, and the others carry none of it.
    inf = hand.explain("A", "B", p="inf", top=None)
    assert inf.distance == pytest.approx(0.6, rel=1e-12)
    assert {e["edge"]: e["share"] for e in inf.edges} == pytest.approx(
        {2: 0.5, 5: 0.5, 1: 0.0, 3: 0.0, 4: 0.0})
    # Then the others by their difference: 0.5 (edge 3), 0.4 (1), 0.3 (4).
    assert [e["edge"] for e in inf.edges[2:]] == [3, 1, 4]
    assert [e["term"] for e in inf.edges] == pytest.approx([0.6, 0.6, 0.5, 0.4, 0.3])


def test_hand_built_words_of_each_subtree(hand):
    edges = {e["edge"]: e for e in hand.explain("A", "B", top=None, n_words=10).edges}
    words = {v: ([w["word"] for w in e["words_a"]], [w["word"] for w in e["words_b"]])
             for v, e in edges.items()}
    # Node 3 (mass 0.5 of A) holds apple and pear, the more frequent first;
    # then node 4 (0.3): banana. Of B only node 1 (fruit) is below edge 1.
    assert words[1] == (["apple", "pear", "banana"], ["fruit"])
    assert words[2] == ([], ["cat"])
    assert words[3] == (["apple", "pear"], [])
    assert words[4] == (["banana"], [])
    assert words[5] == ([], ["cat"])
    assert edges[1]["words_a"][2] == {"word": "banana", "node": 4, "mass": pytest.approx(0.3)}
    assert "coords" not in edges[1]  # a text index: words, not coordinates
    # n_words caps the words per side.
    capped = {e["edge"]: e for e in hand.explain("A", "B", top=None, n_words=2).edges}
    assert [w["word"] for w in capped[1]["words_a"]] == ["apple", "pear"]


def test_identical_documents_have_no_shares(hand):
    found = hand.explain("A", "A2", top=None)
    assert found.distance == 0.0
    assert found.edges == [] and found.n_edges == 0
    assert found.shown_share == 0.0
    assert found.roots[0]["share"] is None and found.roots[0]["distance"] == 0.0
    for p in (2, "inf", 40):
        assert hand.explain("A", "A2", p=p).edges == []


# ------------------------------------------------------------ bad input
@pytest.mark.parametrize("top", [0, -1, 1.5, True, "3"])
def test_bad_top(hand, top):
    with pytest.raises(ValueError, match="top is"):
        hand.explain("A", "B", top=top)


@pytest.mark.parametrize("p", [0.5, 0, -1, float("nan"), "two"])
def test_bad_p(hand, p):
    with pytest.raises(ValueError, match="p is"):
        hand.explain("A", "B", p=p)


def test_unknown_keys(hand):
    with pytest.raises(KeyNotFoundError, match="'nope'"):
        hand.explain("A", "nope")
    with pytest.raises(KeyNotFoundError, match="'gone'"):
        hand.explain("gone", "B")


def test_bad_roots_and_n_words(hand):
    with pytest.raises(ValueError, match="roots is"):
        hand.explain("A", "B", roots=[3])
    with pytest.raises(ValueError, match="n_words is"):
        hand.explain("A", "B", n_words=0)


# ------------------------------------------------------------------ plot
@pytest.mark.slow
def test_plot_draws_one_bar_per_edge(hand, tmp_path):
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is not installed "
                                     "(the optional extra sobolev-index[plot])")
    from matplotlib.figure import Figure

    found = hand.explain("A", "B", top=4)
    ax = Figure().add_subplot()
    assert found.plot(ax=ax) is ax
    widths = sorted(patch.get_width() for patch in ax.patches)
    np.testing.assert_allclose(widths, sorted(100 * e["share"] for e in found.edges))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    # The largest share on top; edges 2 and 5 hold the same words (node 2
    # has no mass), so each label names its node.
    assert labels[-2:] == ["A: - | B: cat (node 5)", "A: - | B: cat (node 2)"]
    path = tmp_path / "shares.png"
    assert found.plot(path) is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.get_backend()  # untouched, still answers
    with pytest.raises(ValueError, match="give path"):
        found.plot()


def _bar_nodes(ax, pattern):
    """The node each bar of a chart names, from the bottom bar up."""
    labels = [t.get_text() for t in ax.get_yticklabels()]
    nodes = [re.search(pattern, label) for label in labels]
    assert all(nodes), labels
    return [int(node.group(1)) for node in nodes]


@pytest.mark.parametrize("p", [1.0, math.inf])
def test_plot_draws_one_bar_per_subtree_over_the_roots(sliced, p):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed "
                        "(the optional extra sobolev-index[plot])")
    from matplotlib.figure import Figure

    index, spec, roots, eta, measures = sliced
    pairs, _ = _reference_edges(spec, roots, eta, measures[2], measures[5], p)
    expected = _reference_groups(pairs, eta)
    found = index.explain("m2", "m5", p=p, top=5)
    ax = found.plot(ax=Figure().add_subplot())
    nodes = _bar_nodes(ax, r"^edge (\d+) \(")
    assert len(ax.patches) == len(nodes) == 5
    assert len(set(nodes)) == 5  # no node twice
    # Bottom to top: the reference groups' shares, the largest on top.
    widths = [patch.get_width() for patch in ax.patches]
    np.testing.assert_allclose(widths, [100 * expected[v]["share"] for v in nodes],
                               rtol=1e-9, atol=1e-12)
    best = sorted((g["share"] for g in expected.values()), reverse=True)[:5]
    np.testing.assert_allclose(sorted(widths, reverse=True), [100 * s for s in best],
                               rtol=1e-9, atol=1e-12)
    assert f"top 5 of {len(expected)} subtrees" in ax.get_title()
    # A subtree of several roots' trees says how many.
    for node, label in zip(nodes, (t.get_text() for t in ax.get_yticklabels())):
        count = len(expected[node]["roots"])
        assert label.endswith(f"({count} roots)" if count > 1 else
                              f"(root {roots[next(iter(expected[node]['roots']))]})")


# ---------------------------------------------- the hand tree from two roots
# The hand-built tree again, explained from root 0 and root 5 with eta 1/2
# each. From root 5 the parents are 2 -> 5, 0 -> 2, 1 -> 0, 3 -> 1, 4 -> 1,
# so the subtree below 2 is {2, 0, 1, 3, 4} and the one below 0 is
# {0, 1, 3, 4}. Subtree masses (A, B) from root 5: 2 (1.0, 0.4), 0 (1.0,
# 0.4), 1 (0.8, 0.4), 3 (0.5, 0), 4 (0.3, 0); S_1 terms 0.6, 1.2, 0.4, 0.25,
# 0.45, so S_1 = 2.9 from either root (S_1 on a tree is the tree metric).
# Each root carries half of 2.9; the groups' S_1 shares, in units of 1/2.9:
# node 2: (1.2 + 0.6) / 2 = 0.9, node 0: 1.2 / 2 = 0.6 (root 5 only),
# node 4: 0.45, node 1: 0.4, node 5: 0.6 / 2 = 0.3 (root 0 only), node 3:
# 0.25. At p = inf each root's largest difference is 0.6: edges 2 and 5 of
# root 0, 2 and 0 of root 5, a quarter each; so node 2 has 1/2 and nodes 0
# and 5 1/4 each (equal eta times difference: by node), then by eta times
# the differences: node 3 (0.5), 1 (0.4), 4 (0.3). At p = 2 both roots'
# S_2^2 is 1.5 and the shares are 0.5 * terms / 1.5: node 2 (0.72 + 0.36),
# 0 (0.72), 5 (0.36), 1 (0.16 + 0.16), 4 (0.135 + 0.135), 3 (0.125 + 0.125).
HAND2_S1 = {2: 0.9, 0: 0.6, 4: 0.45, 1: 0.4, 5: 0.3, 3: 0.25}
HAND2_S2 = {2: 1.08, 0: 0.72, 5: 0.36, 1: 0.32, 4: 0.27, 3: 0.25}


@pytest.fixture(scope="module")
def hand2(tmp_path_factory):
    from sobolev_index.ingest.words import add_words

    edges = np.array([(u, v) for u, v, _ in HAND_EDGES])
    lengths = np.array([w for _, _, w in HAND_EDGES])
    graph = Graph.from_edges(6, edges, lengths)
    path = tmp_path_factory.mktemp("explain") / "hand2"
    with SobolevIndex.create(str(path), graph, roots=[0, 5], eta=[0.5, 0.5]) as index:
        add_words(index.catalog, HAND_WORDS)
        index.add([HAND_A, HAND_B], keys=["A", "B"])
    index = SobolevIndex.open(str(path))
    yield index
    index.close()


def test_hand_built_groups_over_two_roots(hand2):
    found = hand2.explain("A", "B", p=1, top=None, n_words=10)
    assert found.distance == pytest.approx(2.9, rel=1e-12)
    assert found.n_edges == 10 and found.n_groups == 6
    assert [g["edge"] for g in found.groups] == [2, 0, 4, 1, 5, 3]
    assert [g["share"] for g in found.groups] == pytest.approx(
        [HAND2_S1[v] / 2.9 for v in (2, 0, 4, 1, 5, 3)], rel=1e-12)
    groups = {g["edge"]: g for g in found.groups}
    # Node 2: its edge to 0 (root 0, term 1.2) before its edge to 5 (root
    # 5, term 0.6); shown with the first one's length and masses.
    assert groups[2]["roots"] == [0, 1]
    assert (groups[2]["parent"], groups[2]["length"]) == (0, 2.0)
    assert (groups[2]["mass_a"], groups[2]["mass_b"]) == pytest.approx((0.0, 0.6))
    assert [part["parent"] for part in groups[2]["parts"]] == [0, 5]
    # Below 2 lie only node 5 in root 0's tree, but 0, 1, 3 and 4 in root
    # 5's: the row shows root 0's, as its masses, and its parts both.
    def words_of(row):
        return [w["word"] for w in row["words_a"]], [w["word"] for w in row["words_b"]]

    words = {v: words_of(g) for v, g in groups.items()}
    assert words[2] == ([], ["cat"])
    assert groups[2]["nodes_a"] == [] and [n["node"] for n in groups[2]["nodes_b"]] == [5]
    assert words_of(groups[2]["parts"][1]) == (["apple", "pear", "banana", "thing"], ["fruit"])
    assert [n["node"] for n in groups[2]["parts"][1]["nodes_a"]] == [3, 4, 0]
    assert words[0] == (["apple", "pear", "banana", "thing"], ["fruit"])
    assert groups[0]["roots"] == [1] and groups[0]["root_node"] == 5
    assert words[5] == ([], ["cat"]) and groups[5]["roots"] == [0]
    # Equal pair shares: by root position.
    assert groups[1]["roots"] == [0, 1] and groups[4]["roots"] == [0, 1]
    assert words[1] == (["apple", "pear", "banana"], ["fruit"])
    # The first two groups are the two largest; the pairs stay listed.
    top = hand2.explain("A", "B", p=1, top=2, n_words=10)
    assert top.groups == found.groups[:2] and len(top.edges) == 2
    assert top.shown_share == pytest.approx(1.5 / 2.9, rel=1e-12)
    assert top.to_dict()["n_groups"] == 6

    inf = hand2.explain("A", "B", p="inf", top=None)
    assert inf.distance == pytest.approx(0.6, rel=1e-12)
    assert [g["edge"] for g in inf.groups] == [2, 0, 5, 3, 1, 4]
    assert [g["share"] for g in inf.groups] == pytest.approx([0.5, 0.25, 0.25, 0, 0, 0])
    two = hand2.explain("A", "B", p=2, top=None)
    assert two.distance == pytest.approx(math.sqrt(1.5), rel=1e-12)
    assert [g["edge"] for g in two.groups] == [2, 0, 5, 1, 4, 3]
    assert [g["share"] for g in two.groups] == pytest.approx(
        [HAND2_S2[v] / 3.0 for v in (2, 0, 5, 1, 4, 3)], rel=1e-12)


def test_plot_of_a_text_index_names_each_subtree_once(hand2):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed "
                        "(the optional extra sobolev-index[plot])")
    from matplotlib.figure import Figure

    ax = hand2.explain("A", "B", top=4).plot(ax=Figure().add_subplot())
    labels = [t.get_text() for t in ax.get_yticklabels()]
    # Each bar: the words of its subtree in the tree of its largest share.
    assert labels[::-1] == ["A: - | B: cat (node 2)",
                            "A: apple, pear, banana | B: fruit (node 0)",
                            "A: banana | B: - (node 4)",
                            "A: apple, pear, banana | B: fruit (node 1)"]
    np.testing.assert_allclose([patch.get_width() for patch in ax.patches][::-1],
                               [100 * HAND2_S1[v] / 2.9 for v in (2, 0, 4, 1)], rtol=1e-12)


# ------------------------------------------------------------------- CLI
def test_cli_table(text_index):
    keys = ["space-0", "music-3"]
    out = run("explain", text_index, *keys, "--top", 4).output
    lines = out.splitlines()
    assert lines[0].startswith("S_1(space-0, music-3) = ")
    header = lines[1].split()
    assert header[:3] == ["share", "roots", "edge"]
    assert "words" in header and "mass" in header
    rows = lines[3:]
    assert len(rows) == 4
    with SobolevIndex.open(str(text_index)) as index:
        found = index.explain(*keys, top=4, n_words=3)
        assert float(lines[0].split("= ")[1].split()[0]) == pytest.approx(
            index.distance(*keys), rel=1e-5)
    for row, group in zip(rows, found.groups):
        assert row.split()[:3] == [f"{100 * group['share']:.2f}%", str(len(group["roots"])),
                                   str(group["edge"])]
        assert f"{group['mass_a']:.4f}" in row and f"{group['mass_b']:.4f}" in row
        for word in group["words_a"] + group["words_b"]:
            assert word["word"] in row


def _table_rows(output):
    """The rows of the command's table (below its header and rule)."""
    lines = output.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("-----"))
    return lines[rule - 1].split(), [line.split() for line in lines[rule + 1:]]


@pytest.mark.parametrize("p", ["1", "inf"])
def test_cli_table_lists_each_subtree_once(text_index, p):
    keys = ["space-0", "music-3"]
    with SobolevIndex.open(str(text_index)) as index:
        pairs, _, expected = _index_reference(index, *keys, math.inf if p == "inf" else 1.0)
    assert len(expected) < len(pairs)  # the two roots' trees share nodes
    out = run("explain", text_index, *keys, "-p", p, "--top", 1000).output
    summary = out.splitlines()[0]
    assert f"; {len(expected)} subtrees differ ({len(pairs)} edges of the 2 trees), " \
           "the top " in summary
    header, rows = _table_rows(out)
    assert header[:3] == ["share", "roots", "edge"]
    nodes = [int(row[2]) for row in rows]
    assert len(nodes) == len(set(nodes)) == len(expected)  # every subtree, each once
    assert set(nodes) == set(expected)
    for row, node in zip(rows, nodes):
        assert row[0] == f"{100 * expected[node]['share']:.2f}%"
        assert int(row[1]) == len(expected[node]["roots"])
    shares = [float(row[0].rstrip("%")) for row in rows]
    assert shares == sorted(shares, reverse=True)
    assert math.fsum(g["share"] for g in expected.values()) == pytest.approx(1.0, rel=1e-12)
    assert "carry 100.0% of it" in summary


def test_cli_one_root_lists_the_edges_of_its_tree(text_index):
    """--roots 1: one group per edge, no roots column, the summary as before
    (the number of subtrees is the number of edges); --json's groups are
    its edges."""
    keys = ["cooking-2", "space-1"]
    out = run("explain", text_index, *keys, "--roots", 1, "--top", 6).output
    with SobolevIndex.open(str(text_index)) as index:
        graph = index.graph
        tree = ref.ref_tree(graph.n_nodes, graph.edges, graph.lengths, int(index.roots[1]))
        mu, nu = ((index.get(key)["nodes"], index.get(key)["masses"]) for key in keys)
    pairs, distance = _reference_pairs([tree], [1.0], mu, nu, 1.0)
    summary = out.splitlines()[0]
    assert summary.startswith(f"S_1(cooking-2, space-1) = {distance:.6g} over 1 root; "
                              f"{len(pairs)} subtrees differ, the top 6 carry ")
    header, rows = _table_rows(out)
    assert header[:2] == ["share", "edge"] and "roots" not in header
    best = sorted(pairs.items(), key=lambda item: -item[1][3])[:6]
    assert [row[0] for row in rows] == [f"{100 * share:.2f}%" for _, (*_, share) in best]
    for row in rows:
        mass_a, mass_b, _, share = pairs[0, int(row[1])]
        assert row[3:5] == [f"{mass_a:.4f}", f"{mass_b:.4f}"]
    data = json.loads(run("explain", text_index, *keys, "--roots", 1, "--top", 6,
                          "--json").output)
    assert data["n_groups"] == data["n_edges"] == len(pairs)
    assert [g["parts"] for g in data["groups"]] == [[edge] for edge in data["edges"]]
    assert [g["edge"] for g in data["groups"]] == [int(row[1]) for row in rows]


def test_cli_json_matches_the_api(text_index):
    out = json.loads(run("explain", text_index, "cooking-1", "space-2", "-p", "2", "--top", 3,
                         "--json").output)
    with SobolevIndex.open(str(text_index)) as index:
        found = index.explain("cooking-1", "space-2", p=2, top=3, n_words=3)
        assert out == json.loads(json.dumps(found.to_dict()))
        full = index.explain("cooking-1", "space-2", p=2, top=None)
    assert out["p"] == 2.0 and len(out["edges"]) == 3 and len(out["groups"]) == 3
    assert out["n_groups"] == full.n_groups and out["n_edges"] == full.n_edges
    assert out["shown_share"] == pytest.approx(math.fsum(g["share"] for g in out["groups"]))
    assert math.fsum(g["share"] for g in full.groups) == pytest.approx(1.0, rel=1e-12)
    assert math.fsum(e["share"] for e in full.edges) == pytest.approx(1.0, rel=1e-12)
    assert out["distance"] == pytest.approx(full.distance)


def test_cli_text_shows_the_stored_texts(text_index):
    documents = {d["key"]: d["text"] for d in tc.corpus()}
    out = run("explain", text_index, "space-0", "cooking-0", "--text").output
    # The texts' beginnings (a long text is cut with an ellipsis).
    assert out.splitlines()[0].startswith(f"A: space-0: {documents['space-0'][:60]}")
    assert out.splitlines()[1].startswith(f"B: cooking-0: {documents['cooking-0'][:60]}")
    data = json.loads(run("explain", text_index, "space-0", "cooking-0", "--text",
                          "--json").output)
    assert data["texts"] == {"space-0": documents["space-0"],
                             "cooking-0": documents["cooking-0"]}


def test_cli_identical_documents(hand):
    out = run("explain", hand.path, "A", "A2").output
    assert "= 0 over 1 root: the two measures are equal" in out
    assert "share" not in out


def test_cli_plot(text_index, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the optional "
                        "extra sobolev-index[plot])")
    path = tmp_path / "chart.png"
    result = run("explain", text_index, "space-0", "music-0", "--plot", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"chart written to {path}" in result.stderr


def test_cli_plot_without_matplotlib(text_index, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    path = tmp_path / "chart.png"
    result = run("explain", text_index, "space-0", "music-0", "--plot", path, ok=False)
    assert result.exit_code == 1
    assert 'pip install "sobolev-index[plot]"' in result.output
    assert not path.exists()


def test_cli_bad_input(text_index, tmp_path):
    result = run("explain", text_index, "space-0", "no-such-key", ok=False)
    assert result.exit_code == 1
    assert "Error: key 'no-such-key' is not in the index" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = run("explain", text_index, "space-0", "music-0", "--top", 0, ok=False)
    assert result.exit_code == 2 and "--top" in result.output
    # a usage error, found while the command line is parsed: exit 2 and the usage hint
    result = run("explain", text_index, "space-0", "music-0", "-p", "0.5", ok=False)
    assert result.exit_code == 2 and "'0.5'; expected p >= 1" in result.output
    assert "Try 'main explain --help' for help." in result.output
    result = run("explain", text_index, "space-0", "music-0", "--plot", tmp_path / "x.gif",
                 ok=False)
    assert result.exit_code == 2 and ".png" in result.output
    assert not (tmp_path / "x.gif").exists()
    result = run("explain", text_index, "space-0", "music-0", "--plot",
                 tmp_path / "missing" / "x.png", ok=False)
    assert result.exit_code == 2 and "does not exist" in result.output
