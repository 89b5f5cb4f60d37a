"""``SearchResult.ids``: the document ids of the results, one list per query
mirroring ``keys``, for every kind of search (k-NN, radius with and
without a limit, one radius per query, the scan of a large p, stored keys
as queries, whose own key is moved first, ``where``, ``neighbours``); each
checked against ``get(key)["id"]``, which reads the catalog."""
import math

import numpy as np
import pytest
from test_radius import built  # noqa: F401  (the fixture: 259 live documents, 3 copies)

from sobolev_index import SobolevIndex
from sobolev_index.index.results import SearchResult


def _check_ids(index, result, what="", one_root=False):
    """ids[i][j] is the id of keys[i][j]; scores are the distances' p-th
    powers for one root at a finite p other than 1 (a large p scans and
    ranks by distance), else the distances; results are in (score, id)
    order except that a stored key used as a query may come first."""
    p = result.p
    powers = one_root and p != 1 and p <= 16
    assert result.ids is not None, what
    assert len(result.ids) == len(result.keys), what
    for q, (keys, ids) in enumerate(zip(result.keys, result.ids)):
        assert len(ids) == len(keys), (what, q)
        assert all(type(i) is int for i in ids), (what, q)
        assert ids == [index.get(key)["id"] for key in keys], (what, q)
        assert len(set(ids)) == len(ids), (what, q)
        distances = np.asarray(result.distances[q])[:len(keys)]
        scores = np.asarray(result.scores[q])[:len(keys)]
        if powers:
            assert np.array_equal(distances, scores ** (1.0 / p)), (what, q)
            assert np.allclose(scores, distances ** p, rtol=1e-12, atol=0), (what, q)
        else:
            assert np.array_equal(scores, distances), (what, q)
        order = list(zip(scores.tolist(), ids))
        assert order[1:] == sorted(order[1:]), (what, q)


@pytest.mark.parametrize("p", [1, 2, 1.5, math.inf, 20])
def test_ids_are_the_documents_ids_in_every_kind_of_search(built, p):  # noqa: F811
    queries = built["queries"]
    with SobolevIndex.open(built["path"]) as index:
        knn = index.search(queries, k=12, p=p)
        _check_ids(index, knn, f"knn p={p}")
        _check_ids(index, index.search(queries, k=7, p=p, roots=[1]), f"one root p={p}",
                   one_root=True)
        _check_ids(index, index.search(queries, radius=knn.distances[:, 3], p=p, roots=[0]),
                   f"one root, radii p={p}", one_root=True)
        radius = float(np.median(knn.distances[:, 8]))
        _check_ids(index, index.search(queries, radius=radius, p=p), f"radius p={p}")
        _check_ids(index, index.search(queries, radius=radius, limit=3, p=p),
                   f"limit p={p}")
        radii = knn.distances[:, 5].copy()
        radii[0] = math.inf
        per_query = index.search(queries, radius=radii, p=p, where={"label": "b"})
        _check_ids(index, per_query, f"radii, where p={p}")
        assert all(index.get(key)["label"] == "b" for keys in per_query.keys for key in keys)
        # Stored keys: d258 and d257 are copies of d3 (lower id), moved first.
        stored = index.search(["d258", "d150", "d257", "d4"], k=4, p=p)
        _check_ids(index, stored, f"stored keys p={p}")
        assert [keys[0] for keys in stored.keys] == ["d258", "d150", "d257", "d4"]
        assert stored.ids[0][:3] == [index.get(key)["id"] for key in ("d258", "d3", "d257")]
        # With a limit the own key replaces the last of the copies.
        cut = index.search(["d258"], radius=0.0, limit=2, p=p)
        assert cut.keys == [["d258", "d3"]]
        _check_ids(index, cut, f"stored key, limit p={p}")
        every = index.search(["d259", "d3"], radius=[0.0, 0.0], p=p)
        assert every.keys == [["d259", "d150"], ["d3", "d257", "d258"]]
        _check_ids(index, every, f"stored keys, radii p={p}")
        outside = index.search(["d258"], k=3, p=p, where={"keys": ["d3", "d257", "d40"]})
        assert outside.keys[0][:2] == ["d3", "d257"]  # d258 itself is not admitted
        _check_ids(index, outside, f"stored key outside where p={p}")


def test_ids_of_neighbours_and_after_a_delete(built):  # noqa: F811
    with SobolevIndex.open(built["path"]) as index:
        found = index.neighbours(["d3", "d11", "d9"], k=5)
        _check_ids(index, found, "neighbours")
        assert found.keys[0][:2] == ["d257", "d258"]
        # d10 was deleted: ids are the catalog's, not positions among the
        # live documents.
        assert index.get("d11")["id"] - index.get("d9")["id"] == 2
        assert index.search(["d11"], k=1).ids == [[index.get("d11")["id"]]]


def test_a_result_built_without_ids_still_works():
    result = SearchResult([["a"]], np.zeros((1, 1)), [[None]], 1.0)
    assert result.ids is None and result.to_records()[0][0]["key"] == "a"
    with pytest.raises(TypeError):
        SearchResult([["a"]], np.zeros((1, 1)), [[None]], 1.0, None, None, None, [[1]])
