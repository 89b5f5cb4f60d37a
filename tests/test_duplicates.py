"""Near-duplicate groups (``SobolevIndex.duplicates`` and the ``duplicates``
command): on a planted example, the groups and their pairs are those of the
reference distances (``reference.py``) joined with SciPy's connected
components; on TWITTER, radius 0 finds the word-for-word duplicate tweets,
found here by comparing the texts."""
import json
import re
from collections import defaultdict

import numpy as np
import pytest
from _support.cli import run
from _support.data import data_dir, missing_reason
from reference import ref_pairwise, ref_tree
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from sobolev_index import Graph, SobolevIndex

N_NODES = 25


def _nudged(measure, rng, amount):
    """The measure with a little mass moved between its own nodes."""
    nodes, masses = measure
    return nodes, masses * (1 + amount * rng.random(len(masses)))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """90 documents in two segments: spread-out measures, exact copies,
    near copies, a chain whose ends are farther apart than its links, and a
    deleted document that would join two groups."""
    rng = np.random.default_rng(21)
    graph = Graph.from_points(rng.normal(size=(N_NODES, 2)), n_nodes=N_NODES, edges="log", seed=5)
    measures = []
    for _ in range(70):
        nodes = np.sort(rng.choice(N_NODES, size=int(rng.integers(2, 8)), replace=False))
        measures.append((nodes, rng.random(len(nodes)) + 0.1))
    measures += [measures[2], measures[2], measures[30]]               # exact copies
    measures += [_nudged(measures[5], rng, 0.01), _nudged(measures[5], rng, 0.02)]
    # A chain: more and more mass on one node, so that its ends are farther
    # apart than its links.
    nodes, masses = measures[40]
    measures += [(nodes, masses * np.where(np.arange(len(masses)) == 0, 1 + 0.1 * step, 1.0))
                 for step in range(1, 5)]
    bridge = _nudged(measures[60], rng, 0.02)
    measures += [bridge]                                                # d79, deleted
    measures += [_nudged(m, rng, 0.03) for m in measures[61:71]]        # d80..d89
    keys = [f"d{i}" for i in range(len(measures))]
    path = tmp_path_factory.mktemp("dups") / "ix"
    with SobolevIndex.create(path, graph, roots=2, seed=7, on_violation="perturb") as index:
        index.add(measures[:50], keys=keys[:50])
        index.add(measures[50:], keys=keys[50:])
        index.delete(["d79"])
        roots, eta = index.roots.tolist(), index.eta.tolist()
    live = [i for i in range(len(measures)) if keys[i] != "d79"]
    trees = [ref_tree(graph.n_nodes, graph.edges, graph.lengths, r) for r in roots]
    reference = {p: ref_pairwise([measures[i] for i in live], None, trees, p, eta=eta)
                 for p in (1, 2)}
    return dict(path=path, keys=[keys[i] for i in live], reference=reference)


def _radius_in_a_gap(distances, near):
    """A radius between two pairwise distances, near ``near``: no pair lies
    at its edge, where rounding could decide."""
    values = np.unique(np.round(distances[np.triu_indices_from(distances, 1)], 12))
    above = values[values > near][0]
    below = values[values <= near][-1]
    return float((above + below) / 2)


def _expected_groups(keys, distances, radius):
    """Groups (sets of keys, size >= 2) and pairs {(a, b): d} from the
    reference distances, by SciPy's connected components."""
    adjacent = (distances <= radius) & ~np.eye(len(keys), dtype=bool)
    n, labels = connected_components(csr_matrix(adjacent), directed=False)
    groups = defaultdict(set)
    for key, label in zip(keys, labels):
        groups[label].add(key)
    pairs = {(keys[i], keys[j]): distances[i, j]
             for i, j in zip(*np.nonzero(np.triu(adjacent, 1)))}
    return [g for g in groups.values() if len(g) >= 2], pairs


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("near", [0.0, 0.02, 0.06, 0.2])
def test_groups_are_the_connected_components_of_the_reference_radius_graph(planted, p, near):
    keys, distances = planted["keys"], planted["reference"][p]
    radius = 0.0 if near == 0.0 else _radius_in_a_gap(distances, near)
    expected, pairs = _expected_groups(keys, distances, radius)
    with SobolevIndex.open(planted["path"]) as index:
        groups = index.duplicates(radius, p=p, batch=16)
    assert sorted(map(frozenset, (g["keys"] for g in groups)), key=sorted) == \
        sorted(map(frozenset, expected), key=sorted)
    order = {key: i for i, key in enumerate(keys)}
    # Largest first; equal sizes by their first member; members in insertion order.
    assert [(-len(g["keys"]), order[g["keys"][0]]) for g in groups] == \
        sorted((-len(g["keys"]), order[g["keys"][0]]) for g in groups)
    found = {}
    for g in groups:
        assert g["keys"] == sorted(g["keys"], key=order.get)
        assert [d for _, _, d in g["edges"]] == sorted(d for _, _, d in g["edges"])
        for a, b, d in g["edges"]:
            assert order[a] < order[b] and a in g["keys"] and b in g["keys"]
            found[(a, b)] = d
    assert set(found) == set(pairs)
    for pair, d in pairs.items():
        assert found[pair] == pytest.approx(d, rel=1e-9, abs=1e-12)
    if near == 0.0:
        # The exact copies, and not the near ones.
        assert sorted(map(sorted, (g["keys"] for g in groups))) == [["d2", "d70", "d71"],
                                                                   ["d30", "d72"]]


def test_a_chain_is_one_group_and_a_deleted_bridge_joins_nothing(planted):
    keys, distances = planted["keys"], planted["reference"][1]
    at = {key: i for i, key in enumerate(keys)}
    links = [distances[at[a], at[b]] for a, b in zip(["d40", "d75", "d76", "d77"],
                                                       ["d75", "d76", "d77", "d78"])]
    radius = max(links) * 1.0001
    ends = distances[at["d40"], at["d78"]]
    assert ends > radius  # the chain's ends are joined only through its links
    with SobolevIndex.open(planted["path"]) as index:
        groups = index.duplicates(radius, p=1)
    chain = [g for g in groups if "d40" in g["keys"]]
    assert len(chain) == 1 and {"d75", "d76", "d77", "d78"} <= set(chain[0]["keys"])
    assert ("d40", "d78") not in {(a, b) for a, b, _ in chain[0]["edges"]}
    assert all("d79" not in g["keys"] for g in groups)


def test_batches_progress_and_bad_input(planted):
    with SobolevIndex.open(planted["path"]) as index:
        calls = []
        small = index.duplicates(0.05, batch=7, progress=lambda done, total: calls.append(
            (done, total)))
        assert small == index.duplicates(0.05, batch=1000)
        n = len(planted["keys"])
        assert calls[-1] == (n, n) and len(calls) == -(-n // 7)
        for radius in (-1, float("nan"), "0"):
            with pytest.raises(ValueError, match="radius is"):
                index.duplicates(radius)
        with pytest.raises(ValueError, match="batch is"):
            index.duplicates(0.1, batch=0)


def test_duplicates_on_the_command_line(planted):
    path = planted["path"]
    with SobolevIndex.open(path) as index:
        expected = index.duplicates(0.05)
    out = json.loads(run("duplicates", path, "--radius", "0.05", "--json", "--silent").stdout)
    assert out == [{"keys": g["keys"], "edges": [list(e) for e in g["edges"]]} for g in expected]
    table = run("duplicates", path, "--silent").stdout
    assert table.startswith("2 groups of documents within 0 of each other (5 of 89 documents")
    assert "group 1: 3 documents" in table and "d70" in table
    bad = run("duplicates", path, "--radius", "-0.5", ok=False)
    assert bad.exit_code == 1 and "radius is -0.5; expected a number >= 0" in bad.output


# ------------------------------------------------------------------ TWITTER
TWEETS = data_dir() / "twitter" / "all_twitter_by_line.txt"
VECTORS = data_dir() / "twitter" / "twitter-minilm-384.bin"
# The tokens the vectors were made for (see ../shared/data/README.md).
TOKEN = re.compile(r"[a-z0-9][a-z0-9']*")


@pytest.mark.skipif(not (TWEETS.exists() and VECTORS.exists()),
                    reason=missing_reason(TWEETS if not TWEETS.exists() else VECTORS))
@pytest.mark.slow
def test_radius_zero_finds_the_word_for_word_duplicate_tweets(tmp_path):
    # Stop words kept: every tweet is a document, and two tweets are equal
    # measures only if they have the same words (each word is a node).
    index = tmp_path / "index"
    run("build", index, "--corpus", TWEETS, "--vectors", VECTORS, "--token-pattern", "ascii",
        "--stopwords", "none", "--silent")
    texts = []
    for line in TWEETS.read_text(encoding="utf-8").splitlines():
        texts.append(line.split("\t", 1)[1])
    keys = [f"all_twitter_by_line-{i}" for i in range(1, len(texts) + 1)]
    same_text = defaultdict(set)
    same_bag = defaultdict(set)
    for key, text in zip(keys, texts):
        same_text[text].add(key)
        same_bag[tuple(sorted(TOKEN.findall(text.lower())))].add(key)
    word_for_word = [g for g in same_text.values() if len(g) >= 2]
    assert len(word_for_word) > 50  # many tweets were posted more than once

    with SobolevIndex.open(index) as opened:
        assert len(opened) == len(texts) and opened.keys_in_order() == keys
        groups = opened.duplicates(0)
    group_of = {key: i for i, g in enumerate(groups) for key in g["keys"]}
    # Every word-for-word duplicate, and more widely every set of tweets
    # with the same words the same number of times, is in one group...
    for bag in same_bag.values():
        if len(bag) >= 2:
            assert len({group_of.get(key) for key in bag}) == 1 and \
                next(iter(bag)) in group_of, sorted(bag)
    # ...and a group joins only tweets with the same words.
    words = {key: frozenset(TOKEN.findall(text.lower())) for key, text in zip(keys, texts)}
    for g in groups:
        assert len({words[key] for key in g["keys"]}) == 1, g["keys"]
        assert all(d == 0.0 for _, _, d in g["edges"])
