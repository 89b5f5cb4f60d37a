"""Build recipes: what a build chooses for the options left unset, that the
caller's choices win, and that the choice is recorded (API and CLI)."""
import json
import math
from collections import Counter

import numpy as np
import pytest
from _support import corpus as tc
from _support.cli import run

from sobolev_index.errors import InvalidMeasureError
from sobolev_index.ingest.documents import TextSettings, build_index, text_measures
from sobolev_index.ingest.embeddings import WordVectors
from sobolev_index.ingest.pipelines import index_details
from sobolev_index.ingest.pointindex import build_point_index
from sobolev_index.ingest.pointsets import PointSet
from sobolev_index.ingest.recipes import MAX_NODES, resolve
from sobolev_index.ingest.words import read_words

TOPIC_WORDS = {w for t in tc.TOPICS for w in tc.topic_words(t)}


def _vectors():
    return WordVectors(*tc.vectors())


def _build(path, **options):
    return build_index(str(path), tc.corpus(), _vectors(), **options)


def test_a_build_with_no_options_follows_the_quality_recipe(tmp_path):
    index, report = _build(tmp_path / "ix")
    with index:
        words = read_words(index.catalog)
        # English stop words are dropped: the corpus's common words are all stop words.
        assert set(words) == TOPIC_WORDS
        # Every word its own node.
        assert index.graph.n_nodes == len(TOPIC_WORDS)
        assert sorted(n for n, _ in words.values()) == list(range(len(TOPIC_WORDS)))
        # Each node is joined to its 5 nearest nodes (brute force over the node coordinates).
        coords = index.graph.coords
        adjacent = {(int(u), int(v)) for u, v in index.graph.edges}
        adjacent |= {(v, u) for u, v in adjacent}
        for node in range(len(coords)):
            d = ((coords - coords[node]) ** 2).sum(1)
            d[node] = np.inf
            for other in np.argsort(d, kind="stable")[:5]:
                assert (node, int(other)) in adjacent
        assert len(set(index.roots.tolist())) == 10
        details = index_details(index)
        assert details["weighting"] == "tfidf" and details["stopwords"] > 100
        recipe = details["recipe"]
        assert recipe == report["recipe"]
        assert (recipe["recipe"], recipe["edges"], recipe["k"], recipe["roots"]) == (
            "quality", "knn", 5, 10)
        assert recipe["given"] == [] and recipe["weighting"] == "tfidf"

        # tf-idf weights, counted here from the raw corpus: count x (ln((1 + n) / (1 + df)) + 1).
        docs = tc.corpus()
        tokens = [[w for w in d["text"].lower().rstrip(".").split() if w in TOPIC_WORDS]
                  for d in docs]
        df = Counter(w for t in tokens for w in set(t))
        doc, counts = docs[7], Counter(tokens[7])
        expected = {}
        for word, count in counts.items():
            node = words[word][0]
            expected[node] = expected.get(node, 0.0) + count * (
                math.log((1 + len(docs)) / (1 + df[word])) + 1.0)
        stored = index.get(doc["key"])
        got = dict(zip(stored["nodes"].tolist(), stored["masses"].tolist()))
        total = sum(expected.values())
        assert got.keys() == expected.keys()
        for node, mass in expected.items():
            assert got[node] == pytest.approx(mass / total, rel=1e-12)


def test_the_fast_recipe_uses_the_most_central_node_as_its_one_root(tmp_path):
    index, report = _build(tmp_path / "ix", recipe="fast")
    with index:
        assert report["recipe"]["roots"] == 1
        # The root has the smallest eccentricity (longest shortest path to
        # any node), computed here by SciPy's all-pairs shortest paths.
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import shortest_path

        g = index.graph
        weights = csr_matrix((g.lengths, (g.edges[:, 0], g.edges[:, 1])),
                             shape=(g.n_nodes, g.n_nodes))
        eccentricity = shortest_path(weights, directed=False).max(axis=1)
        (root,) = index.roots.tolist()
        assert eccentricity[root] == pytest.approx(eccentricity.min(), rel=1e-12)
        # The same graph as "quality".
        assert index.graph.n_nodes == len(TOPIC_WORDS)
        assert index.graph.params["edges"] == "knn"


def test_options_given_win_over_the_recipe_and_are_recorded(tmp_path):
    index, report = _build(tmp_path / "ix", nodes=6, edges="log", roots=3,
                           settings=TextSettings())
    with index:
        assert index.graph.n_nodes == 6 and index.graph.params["edges"] == "log"
        assert len(index.roots) == 3
        recipe = index_details(index)["recipe"]
        assert recipe["given"] == ["nodes", "edges", "roots", "settings"]
        assert (recipe["nodes"], recipe["edges"], recipe["k"], recipe["roots"]) == (6, "log", None, 3)
        assert recipe["weighting"] == "count" and recipe["stopwords"] == 0
        assert "the" in read_words(index.catalog)


def test_a_graph_smaller_than_the_recipes_roots_gets_a_root_per_node(tmp_path):
    index, report = _build(tmp_path / "ix", nodes=4)
    with index:
        assert index.graph.n_nodes == 4
        assert sorted(index.roots.tolist()) == [0, 1, 2, 3]
        assert report["recipe"]["roots"] == 4


@pytest.mark.parametrize("options, message", [
    ({"recipe": "best"}, "recipe is 'best'; expected one of 'quality', 'fast'"),
    ({"edges": "log", "k": 3}, "k is 3 but edges is 'log'"),
    ({"edges": "ring"}, "edges is 'ring'; expected one of"),
])
def test_a_bad_recipe_option_is_refused_before_anything_is_written(tmp_path, options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        _build(tmp_path / "ix", **options)
    assert not (tmp_path / "ix").exists()


def test_the_recipe_takes_every_word_up_to_the_node_cap():
    assert resolve("quality", 3_000)["nodes"] == 3_000
    assert resolve("quality", 10 * MAX_NODES)["nodes"] == MAX_NODES == 10_000


def test_a_query_of_stop_words_alone_says_so(tmp_path):
    index, _ = _build(tmp_path / "ix")
    with index:
        with pytest.raises(InvalidMeasureError, match="has only stop words of this index"):
            text_measures(index, ["the and of"])


def test_a_point_build_records_its_recipe(tmp_path):
    rng = np.random.default_rng(0)
    sets = [PointSet(f"s{i}", rng.normal(size=(5, 2)) + (i % 2) * 4, None, str(i % 2), None)
            for i in range(12)]
    index, report = build_point_index(str(tmp_path / "ix"), sets, recipe="fast")
    with index:
        recipe = index_details(index)["recipe"]
        assert recipe == report["recipe"]
        assert (recipe["recipe"], recipe["edges"], recipe["k"], recipe["roots"]) == (
            "fast", "knn", 5, 1)
        # 60 distinct points: every one a node.
        assert index.graph.n_nodes == 60


def test_the_cli_build_shows_and_records_the_recipe(tmp_path):
    corpus_path, vectors_path = tc.make_files(str(tmp_path))
    index = tmp_path / "ix"
    out = json.loads(run("build", index, "--corpus", corpus_path, "--vectors", vectors_path,
                         "--recipe", "fast", "--neighbours", "3", "--json", "--silent").stdout)
    assert (out["recipe"]["recipe"], out["recipe"]["k"], out["recipe"]["given"]) == (
        "fast", 3, ["k"])
    assert len(out["roots"]) == 1
    shown = run("info", index).stdout
    assert "recipe" in shown and "fast: edges knn (3 nearest nodes), 1 root(s)" in shown
    assert json.loads(run("info", index, "--json").stdout)["recipe"] == out["recipe"]

    refused = run("build", tmp_path / "other", "--corpus", corpus_path, "--vectors",
                  vectors_path, "--edges", "log", "--neighbours", "3", ok=False)
    assert refused.exit_code == 1
    assert "k is 3 but edges is 'log'" in refused.output
    assert not (tmp_path / "other").exists()


def test_a_diagram_build_weights_points_by_persistence_unless_told(tmp_path):
    folder = tmp_path / "diagrams"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for i in range(5):
        birth = rng.random(4)
        np.savetxt(folder / f"d{i}.csv", np.column_stack([birth, birth + rng.random(4) + 0.05]),
                   delimiter=",")
    # One point of persistence 2.8 against three of at most 0.06.
    np.savetxt(folder / "long.csv", np.array([[0.0, 0.01], [0.2, 3.0], [0.5, 0.52], [0.1, 0.16]]),
               delimiter=",")
    out = json.loads(run("build", tmp_path / "ix", "--points", folder, "--diagrams", "--json",
                         "--silent").stdout)
    assert out["recipe"]["diagram_weights"] == "persistence"
    from sobolev_index import SobolevIndex

    with SobolevIndex.open(tmp_path / "ix") as reader:
        # Uniform weights would put at most 1/4 of the mass on any one node
        # unless points share nodes (every point is its own node here).
        assert reader.graph.n_nodes == 24
        assert reader.get("long")["masses"].max() == pytest.approx(2.8 / (0.01 + 2.8 + 0.02 + 0.06))
    uniform = json.loads(run("build", tmp_path / "u", "--points", folder, "--diagrams",
                             "--diagram-weights", "uniform", "--json", "--silent").stdout)
    assert uniform["recipe"]["diagram_weights"] == "uniform"


def test_a_corpus_of_stop_words_alone_is_refused_with_the_reason(tmp_path):
    from sobolev_index.errors import CorpusError

    with pytest.raises(CorpusError, match="no document has a word besides stop words"):
        build_index(str(tmp_path / "ix"), [{"text": "the and of"}, {"text": "a is"}], _vectors())
    assert not (tmp_path / "ix").exists()


def test_adding_a_document_of_stop_words_alone_says_so_and_writes_nothing(tmp_path):
    from sobolev_index.errors import CorpusError
    from sobolev_index.ingest.documents import add_documents

    index, _ = _build(tmp_path / "ix")
    with index:
        before = len(index)
        with pytest.raises(CorpusError, match="late has only stop words of this index") as err:
            add_documents(index, [{"key": "ok", "text": "space1 space2"},
                                  {"key": "late", "text": "The and of."}])
        assert "skip_empty=True" in str(err.value)
        assert len(index) == before and "ok" not in index


@pytest.mark.parametrize("roots, expected", [
    (np.int64(3), 3), (np.array([0, 5, 9]), [0, 5, 9]), ([np.int32(2), 7], [2, 7])])
def test_numpy_roots_are_taken_as_their_values(tmp_path, roots, expected):
    index, report = _build(tmp_path / "ix", roots=roots)
    with index:
        assert report["recipe"]["roots"] == expected
        if isinstance(expected, list):
            assert index.roots.tolist() == expected
        else:
            assert len(index.roots) == expected


@pytest.mark.parametrize("options, message", [
    ({"roots": 0}, "roots is 0; expected an integer >= 1"),
    ({"roots": 1.5}, "roots is 1.5; expected an integer >= 1"),
    ({"roots": True}, "roots is True"),
    ({"roots": []}, "roots is an empty list"),
    ({"nodes": "12"}, "nodes is '12'; expected an integer >= 1"),
    ({"k": 0}, "k is 0; expected an integer >= 1"),
    ({"roots": 50}, "roots is 50, but the graph has only 36 node"),
])
def test_bad_counts_are_refused_by_name_before_anything_is_written(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        _build(tmp_path / "ix", **options)
    assert not (tmp_path / "ix").exists()


def _diagram_sets(weighted):
    rng = np.random.default_rng(4)
    sets = []
    for i in range(6):
        birth = rng.random(5)
        d = np.column_stack([birth, birth + rng.random(5) + 0.05])
        sets.append(PointSet(f"d{i}", d, d[:, 1] - d[:, 0] if weighted else None, str(i % 2)))
    return sets


def test_diagrams_from_the_python_api_are_weighted_by_persistence_unless_told(tmp_path):
    index, report = build_point_index(str(tmp_path / "ix"), _diagram_sets(True), kind="diagrams")
    with index:
        assert report["recipe"]["diagram_weights"] == "persistence"
    # Diagrams read without weights cannot go into a persistence index ...
    with pytest.raises(ValueError, match="diagram 'd0' has equal weights on points of different"):
        build_point_index(str(tmp_path / "bad"), _diagram_sets(False), kind="diagrams")
    assert not (tmp_path / "bad").exists()
    # ... unless the build says uniform, which then refuses weighted ones.
    index, _ = build_point_index(str(tmp_path / "u"), _diagram_sets(False), kind="diagrams",
                                 diagram_weights="uniform")
    from sobolev_index.ingest.pointindex import add_pointsets

    with index:
        with pytest.raises(ValueError, match="has unequal weights"):
            add_pointsets(index, [PointSet("w", np.array([[0.0, 1.0], [0.0, 3.0]]),
                                           np.array([1.0, 3.0]))])
        assert "w" not in index


def test_info_of_an_index_made_without_a_recipe_says_none_was_recorded(tmp_path):
    from sobolev_index import SobolevIndex

    graph = _vectors()
    from sobolev_index import Graph

    g = Graph.from_points(graph.vectors, n_nodes=5, seed=0)
    with SobolevIndex.create(str(tmp_path / "ix"), g) as index:
        index.add([(np.array([0, 1]), None)])
        assert index_details(index)["recipe"] is None
    assert "none recorded" in run("info", tmp_path / "ix").stdout
