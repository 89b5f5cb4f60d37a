"""SobolevIndex.neighbours: the k nearest other documents of stored keys,
checked against the reference distances of tests/reference.py and against
the rows of knn_graph, which is built on it."""
import warnings

import numpy as np
import pytest
from test_knn_graph import built  # noqa: F401  (the fixture: 69 live documents, 2 copies)

from sobolev_index import SobolevIndex
from sobolev_index.errors import KeyNotFoundError


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("k", [1, 4, 30])
def test_neighbours_are_the_k_nearest_other_documents(built, p, k):  # noqa: F811
    path, keys, reference = built
    position = {key: i for i, key in enumerate(keys)}
    asked = ["d0", "d5", "d68", "d40", "d69"]
    with SobolevIndex.open(path) as index:
        found = index.neighbours(asked, k=k, p=p)
    assert found.distances.shape == (len(asked), k)
    for q, key in enumerate(asked):
        i = position[key]
        row = [position[h] for h in found.keys[q]]
        assert i not in row and len(set(row)) == k
        np.testing.assert_allclose(found.distances[q], reference[p][i, row], rtol=1e-9,
                                   atol=1e-12)
        best = np.sort(np.delete(reference[p][i], i))[:k]
        np.testing.assert_allclose(found.distances[q], best, rtol=1e-9, atol=1e-12)
    # d68 is a copy of d5: each is the other's nearest, at distance 0.
    assert found.keys[1][0] == "d68" and found.keys[2][0] == "d5"
    assert found.distances[1][0] == found.distances[2][0] == 0.0


@pytest.mark.parametrize("p", [1, 2])
def test_knn_graph_rows_are_the_neighbours(built, p):  # noqa: F811
    path, keys, _ = built
    with SobolevIndex.open(path) as index:
        graph = index.knn_graph(5, p=p, batch=7)
        found = index.neighbours(keys, k=5, p=p)
    for i in range(len(keys)):
        start, stop = graph.indptr[i], graph.indptr[i + 1]
        assert [keys[c] for c in graph.indices[start:stop]] == found.keys[i]
        assert graph.data[start:stop].tolist() == found.distances[i].tolist()


def test_a_k_beyond_the_other_documents_gives_them_all(built):  # noqa: F811
    path, keys, reference = built
    with SobolevIndex.open(path) as index:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            one = index.neighbours("d3", k=10 ** 6, p=1)
    assert len(one) == 1 and one.distances.shape == (1, len(keys) - 1)
    assert sorted(one.keys[0]) == sorted(set(keys) - {"d3"})
    assert np.all(np.diff(one.distances[0]) >= 0)


def test_bad_keys_and_k_are_refused(built):  # noqa: F811
    path, _, _ = built
    with SobolevIndex.open(path) as index:
        with pytest.raises(KeyNotFoundError, match="'d7' is not in the index"):
            index.neighbours(["d1", "d7"], k=3)
        for k in (0, -1, 2.5):
            with pytest.raises(ValueError, match="k"):
                index.neighbours("d1", k=k)
