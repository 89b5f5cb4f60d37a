"""ShardedIndex (sobolev_index.distributed): S SobolevIndex shards behind one
manifest, searched in this process on threads or on a Dask LocalCluster.

Every search is compared with a single SobolevIndex given the same calls
(identical keys, distances and labels: the merge must break ties between
shards in insertion order, as one index does), and a small case with
tests/reference.py brute force. The corpus repeats measures, so that ties
between shards are common, and the test checks that it has them.
"""
import hashlib
import json
import math
import os
import shutil
import signal
import threading
import time

import numpy as np
import pytest

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is not installed (pip install 'sobolev-index[distributed]')")

import reference as ref  # noqa: E402
from _support.cluster import local_cluster  # noqa: E402
from _support.expected import RefModel, check_topk, expected_dists  # noqa: E402
from _support.graphs import random_graph  # noqa: E402
from _support.index import assert_unchanged, snapshot  # noqa: E402
from _support.measures import random_measures  # noqa: E402

from sobolev_index import Graph, SobolevIndex  # noqa: E402
from sobolev_index.distributed import (  # noqa: E402
    ShardedIndex,
    ShardedWriteError,
    ShardError,
    dask_shards,  # noqa: E402
    route,
)
from sobolev_index.distributed import shards as shard_tasks  # noqa: E402
from sobolev_index.errors import (  # noqa: E402
    CorruptIndexError,
    DuplicateKeyError,
    InvalidMeasureError,
    KeyNotFoundError,
    NotAnIndexError,
    SobolevIndexError,
)

N_NODES = 40
SHARDS = 3
P_VALUES = [1, 2, math.inf]


@pytest.fixture(scope="module")
def spec():
    return random_graph(17, N_NODES)


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes of one thread each, for the whole module."""
    with local_cluster() as client:
        yield client


def corpus(seed=0, n=160):
    """Random measures, a fifth of them repeated (equal measures are at equal
    distance from every query: ties, spread over the shards by their keys)."""
    rng = np.random.default_rng(seed)
    measures = random_measures(rng, N_NODES, n)
    for j in rng.choice(n, size=n // 5, replace=False):
        measures.append(measures[int(j)])
    labels = [f"topic-{i % 4}" for i in range(len(measures))]
    return measures, labels


def both(tmp_path, spec, roots=None, p=1, client=None, shards=SHARDS, batches=4, seed=0):
    """A single index and a sharded one given the same adds (in batches,
    keys generated), an upsert and a delete."""
    graph = spec.lib()
    single = SobolevIndex.create(tmp_path / "single", graph, roots=roots, p=p)
    sharded = ShardedIndex.create(tmp_path / "sharded", graph, roots=roots, p=p, shards=shards,
                                  client=client)
    measures, labels = corpus(seed)
    step = math.ceil(len(measures) / batches)
    for start in range(0, len(measures), step):
        part = slice(start, start + step)
        got = sharded.add(measures[part], labels=labels[part])
        assert got == single.add(measures[part], labels=labels[part])
    keys = single.keys_in_order()
    for index in (single, sharded):
        index.upsert(measures[:6], keys[10:16], labels=["upserted"] * 6)
        assert index.delete(keys[20:25]) == 5
    return single, sharded, measures


def assert_same(a, b, what="", ids=True):
    """Identical SearchResults: keys, labels, ids, distances and scores bit
    for bit (``ids=False``: not ids, where the sharded index skipped the
    ids of a part that failed and the single index was given the others)."""
    assert a.keys == b.keys, f"{what}: keys differ"
    assert a.labels == b.labels, f"{what}: labels differ"
    assert not ids or a.ids == b.ids, f"{what}: ids differ"
    assert all(np.array_equal(x, y) for x, y in zip(a.scores, b.scores)), f"{what}: scores"
    if a.radius is None:
        assert a.distances.shape == b.distances.shape, what
        assert np.array_equal(a.distances, b.distances), f"{what}: distances differ"
    else:
        assert a.truncated == b.truncated, f"{what}: truncated differs"
        assert all(np.array_equal(x, y) for x, y in zip(a.distances, b.distances)), what


def cross_shard_tie_order(result, shards):
    """Whether some query has two documents of different shards at equal
    distance, the later shard's first: only the global insertion order puts
    them so (a merge by shard number would not)."""
    for keys, row in zip(result.keys, result.distances):
        for j in range(len(keys) - 1):
            if row[j] == row[j + 1] and route(keys[j], shards) > route(keys[j + 1], shards):
                return True
    return False


# ---------------------------------------------------------------- the routing rule
def test_route_is_blake2b_of_the_utf8_key_modulo_shards():
    # The documented rule, computed here with hashlib: a change of rule would
    # send keys to shards that do not hold them.
    for key in ["doc-1", "doc-2", "paper/42", "ключ", "🙂"]:
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
        for shards in (1, 2, 7, 1000003):
            assert route(key, shards) == int.from_bytes(digest, "big") % shards


def test_route_spreads_keys_over_the_shards():
    counts = np.bincount([route(f"doc-{i}", 4) for i in range(4000)], minlength=4)
    assert counts.min() > 850, counts


# ------------------------------------------------------- sharded == single, in-process
@pytest.mark.parametrize("roots", [None, 3], ids=["one-root", "sliced"])
@pytest.mark.slow
def test_search_equals_single_index(tmp_path, spec, roots):
    single, sharded, measures = both(tmp_path, spec, roots=roots)
    with single, sharded:
        assert len(sharded) == len(single) == len(measures) - 5
        assert sharded.keys_in_order() == single.keys_in_order()
        queries = measures[::7] + random_measures(np.random.default_rng(5), N_NODES, 10)
        tied = False
        for p in P_VALUES:
            for k in (1, 7, 30, 10_000):
                got, want = sharded.search(queries, k=k, p=p), single.search(queries, k=k, p=p)
                assert_same(got, want, f"p={p} k={k}")
                tied |= cross_shard_tie_order(got, sharded.shards)
            keys = single.keys_in_order()[::9]
            assert_same(sharded.search(keys, k=12, p=p), single.search(keys, k=12, p=p),
                        f"stored keys as queries, p={p}")
            assert_same(sharded.search(queries, radius=0.2, p=p),
                        single.search(queries, radius=0.2, p=p), f"radius p={p}")
            assert_same(sharded.search(queries, radius=0.35, limit=4, p=p),
                        single.search(queries, radius=0.35, limit=4, p=p), f"limit p={p}")
            if roots is not None:
                assert_same(sharded.search(queries, k=9, p=p, roots=[2, 0]),
                            single.search(queries, k=9, p=p, roots=[2, 0]), f"roots p={p}")
        assert tied, "no query had tied documents of two shards out of shard order"


@pytest.mark.parametrize("p, roots", [(1, None), (2, None), (math.inf, None), (2, 3)])
@pytest.mark.slow
def test_shards_after_the_first_search_within_the_kth_distance(tmp_path, spec, monkeypatch,
                                                               p, roots):
    """A k-NN batch searches the shards in turn: the first for the k
    nearest, each later one within each query's k-th distance so far (a
    radius per query, limited to k). Every such radius is at least the
    query's true k-th distance (from the single index), so nothing of the
    answer is lost, and the later shards do get finite ones."""
    single, sharded, measures = both(tmp_path, spec, roots=roots, p=p)
    calls = []
    real = shard_tasks.search

    def search(shard, queries, kwargs, n_queries):
        calls.append(kwargs)
        return real(shard, queries, kwargs, n_queries)

    monkeypatch.setattr(shard_tasks, "search", search)
    with single, sharded:
        queries = measures[::5]
        k = 6
        want = single.search(queries, k=k)
        assert_same(sharded.search(queries, k=k), want)
        assert len(calls) == SHARDS
        assert calls[0]["k"] == k and calls[0]["radius"] is None
        kth = want.distances[:, k - 1]
        for later in calls[1:]:
            assert later["k"] is None and later["limit"] == k
            radius = np.asarray(later["radius"])
            assert radius.shape == (len(queries),) and np.isfinite(radius).all()
            assert (radius >= kth).all()
        # The last shard's radii are the k-th distances over the others.
        assert (np.asarray(calls[-1]["radius"]) <= np.asarray(calls[1]["radius"])).all()


def test_search_with_where_equals_single_index(tmp_path, spec):
    single, sharded, measures = both(tmp_path, spec)
    with single, sharded:
        queries = measures[:12]
        some = single.keys_in_order()[::3]
        for where in ({"label": "topic-1"}, {"label": ["topic-0", "upserted"]},
                      {"keys": some}, {"keys": some, "label": "topic-2"}):
            assert_same(sharded.search(queries, k=8, where=where),
                        single.search(queries, k=8, where=where), f"where={where}")
        # The query's own key comes first among duplicates only if where admits it.
        keys = single.keys_in_order()[:30]
        where = {"keys": keys[::2]}
        assert_same(sharded.search(keys, k=5, where=where), single.search(keys, k=5, where=where))


def test_a_label_no_shard_has_warns_once(tmp_path, spec):
    single, sharded, measures = both(tmp_path, spec)
    with single, sharded:
        # topic-3 is in some shards only: no warning.
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sharded.search(measures[:2], k=3, where={"label": "topic-3"})
        with pytest.warns(UserWarning, match="no live document has the label 'nope'") as caught:
            got = sharded.search(measures[:2], k=3, where={"label": "nope"})
        assert len(caught) == 1
        with pytest.warns(UserWarning, match="no live document has the label 'nope'"):
            want = single.search(measures[:2], k=3, where={"label": "nope"})
        # k columns of inf, as a single index answers (not 0 columns).
        assert want.distances.shape == (2, 3)
        assert_same(got, want, "absent label")


def test_a_label_some_shards_lack_gives_the_single_index_width(tmp_path, spec):
    """A label that only one shard has: the other shards search nothing,
    yet the answer is min(k, live documents) wide, padded with inf, as a
    single index's; bad arguments raise the single index's errors even
    when no shard has anything in scope."""
    graph = spec.lib()
    measures, _ = corpus(3, n=40)
    keys = [f"k{i}" for i in range(len(measures))]
    rare = [key for key in keys if route(key, SHARDS) == 0][:4]
    labels = ["rare" if key in rare else "common" for key in keys]
    with SobolevIndex.create(tmp_path / "single", graph) as single, \
            ShardedIndex.create(tmp_path / "sharded", graph, shards=SHARDS) as sharded:
        single.add(measures, keys=keys, labels=labels)
        sharded.add(measures, keys=keys, labels=labels)
        queries = measures[:2]
        for k in (3, 20, len(measures) + 5):
            want = single.search(queries, k=k, where={"label": "rare"})
            got = sharded.search(queries, k=k, where={"label": "rare"})
            assert want.distances.shape == (2, min(k, len(measures)))
            assert_same(got, want, f"k={k}")
        for kwargs in ({"radius": 0.5, "where": {"label": "rare"}},
                       {"radius": math.inf, "limit": 2, "where": {"label": "rare"}},
                       {"k": 7, "where": {"keys": rare[:1]}}):
            assert_same(sharded.search(queries, **kwargs), single.search(queries, **kwargs),
                        str(kwargs))
        import warnings

        for kwargs in ({"k": 0}, {"k": -1}, {"k": "x"}, {"radius": -1}, {"k": 2, "limit": 3},
                       {"limit": 3}, {"radius": 1, "limit": 0}, {"k": 2**60}):
            kwargs = dict(kwargs, where={"label": "nope"})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with pytest.raises(ValueError) as want:
                    single.search(queries, **kwargs)
                with pytest.raises(ValueError) as got:
                    sharded.search(queries, **kwargs)
            assert str(got.value) == str(want.value), kwargs
        with pytest.raises(ValueError) as want:
            single.search(queries, k=3, where={"label": "nope", "other": 1})
        with pytest.raises(ValueError) as got:
            sharded.search(queries, k=3, where={"label": "nope", "other": 1})
        assert str(got.value) == str(want.value)


def test_search_against_reference_brute_force(tmp_path):
    spec = random_graph(5, 12)
    rng = np.random.default_rng(11)
    measures = random_measures(rng, 12, 30)
    measures += measures[:8]
    sharded = ShardedIndex.create(tmp_path / "s", spec.lib(), roots=[0, 5], shards=4)
    with sharded:
        keys = sharded.add(measures)
        model = RefModel(spec, sharded.roots)
        alphas = {key: model.alphas(m) for key, m in zip(keys, measures)}
        order = {key: i for i, key in enumerate(keys)}
        queries = random_measures(rng, 12, 6) + measures[:3]
        for p in P_VALUES:
            got = sharded.search(queries, k=9, p=p)
            for q, query in enumerate(queries):
                exp = expected_dists(model, model.alphas(query), alphas, p, sharded.eta)
                check_topk(got.keys[q], got.distances[q], exp, 9, order=order,
                           what=f"p={p} query {q}")
        # And the nearest of the last search, straight from the paper's formula.
        nearest = measures[order[got.keys[0][0]]]
        trees = [spec.ref_tree(int(r)) for r in sharded.roots]
        assert math.isclose(got.distances[0, 0],
                            ref.ref_sliced(queries[0], nearest, trees, math.inf, sharded.eta),
                            rel_tol=1e-10)


# ------------------------------------------------------------- sharded == single, Dask
@pytest.mark.parametrize("roots", [None, 3], ids=["one-root", "sliced"])
@pytest.mark.slow
def test_search_on_dask_equals_single_index(tmp_path, spec, cluster, roots):
    single, sharded, measures = both(tmp_path, spec, roots=roots, client=cluster)
    with single, sharded:
        queries = measures[::5]
        for p in P_VALUES:
            assert_same(sharded.search(queries, k=11, p=p), single.search(queries, k=11, p=p),
                        f"dask p={p}")
            keys = single.keys_in_order()[::11]
            assert_same(sharded.search(keys, k=6, p=p), single.search(keys, k=6, p=p))
        assert_same(sharded.search(queries, radius=0.3, limit=5),
                    single.search(queries, radius=0.3, limit=5))
        assert sharded.keys_in_order() == single.keys_in_order()
        # The shards live on the workers, one open task each.
        held = cluster.who_has()
        assert sum(key.startswith("shard-") for key in held) == sharded.shards
    # A reader on the cluster sees the same.
    with ShardedIndex.open(tmp_path / "sharded", client=cluster) as reader, \
            SobolevIndex.open(tmp_path / "single") as single:
        assert_same(reader.search(queries, k=11, p=2), single.search(queries, k=11, p=2))
        assert reader.info()["documents"] == len(single)


# ---------------------------------------------------------- writes across the shards
def test_add_upsert_delete_across_shards(tmp_path, spec):
    single, sharded, measures = both(tmp_path, spec, batches=2)
    with single, sharded:
        keys = single.keys_in_order()
        # Both spread over every shard.
        assert len({route(k, SHARDS) for k in keys[:40]}) == SHARDS
        info = sharded.info()
        assert [s["documents"] for s in info["shards"]] == [
            sum(route(k, SHARDS) == i for k in keys) for i in range(SHARDS)]
        assert info["documents"] == len(single) and info["deleted"] == 5 + 6
        for index in (single, sharded):
            index.upsert(measures[30:40], keys[:5] + ["new-a", "new-b", "new-c", "new-d", "new-e"])
            assert index.delete(["new-b", keys[7], keys[7]]) == 2
            index.add(measures[40:43], keys=["x", "y", "z"], labels=["a", None, "b"],
                      fields=[{"n": 1}, None, {"s": "t"}])
        assert sharded.keys_in_order() == single.keys_in_order()
        assert len(sharded) == len(single)
        for key in ("x", "z", keys[0], "new-e"):
            a, b = sharded.get(key), single.get(key)
            assert np.array_equal(a["nodes"], b["nodes"])
            assert np.array_equal(a["masses"], b["masses"])
            assert (a["label"], a["fields"]) == (b["label"], b["fields"])
            assert a["shard"] == route(key, SHARDS)
        assert "x" in sharded and "new-b" not in sharded and keys[7] not in sharded
        assert sharded.existing_keys(["x", "new-b", 3]) == {"x"}
        for p in P_VALUES:
            assert_same(sharded.search(measures[::6], k=15, p=p),
                        single.search(measures[::6], k=15, p=p), f"after writes p={p}")
        sharded.compact()
        single.compact()
        assert sharded.info()["deleted"] == 0
        assert_same(sharded.search(measures[::6], k=15), single.search(measures[::6], k=15))
        report = sharded.verify()
        assert report["ok"], report["problems"]
        assert report["documents"] == len(single)


@pytest.mark.slow
def test_writes_on_dask(tmp_path, spec, cluster):
    single, sharded, measures = both(tmp_path, spec, client=cluster, batches=3)
    with single, sharded:
        for index in (single, sharded):
            index.upsert(measures[50:53], ["doc-1", "doc-2", "fresh"])
            index.delete("doc-3")
        assert sharded.keys_in_order() == single.keys_in_order()
        assert_same(sharded.search(measures[::4], k=9, p=2), single.search(measures[::4], k=9, p=2))
        assert sharded.verify()["ok"]


def test_every_shard_is_an_ordinary_index(tmp_path, spec):
    single, sharded, _ = both(tmp_path, spec)
    single.close()
    sharded.close()
    manifest = json.loads((tmp_path / "sharded" / "manifest.json").read_text())
    assert manifest["routing"]["hash"] == "blake2b" and manifest["routing"]["modulo"] == SHARDS
    assert not [n for n in os.listdir(tmp_path / "sharded") if n.endswith(".tmp")]
    total = 0
    checksums = set()
    for name in manifest["shards"]:
        with SobolevIndex.open(tmp_path / "sharded" / name) as shard:
            assert shard.verify()["ok"]
            total += len(shard)
            checksums.add(shard.catalog.meta_value("graph_checksum"))
            assert all(route(k, SHARDS) == manifest["shards"].index(name) for k in shard)
    assert checksums == {manifest["graph_checksum"]}
    with SobolevIndex.open(tmp_path / "single") as single:
        assert total == len(single)


def test_keys_are_unique_across_shards(tmp_path, spec):
    _, sharded, measures = both(tmp_path, spec)
    with sharded:
        before = [snapshot(p) for p in sharded.shard_paths]
        with pytest.raises(DuplicateKeyError, match="'doc-30' is already in the index"):
            sharded.add(measures[:3], keys=["fresh-1", "doc-30", "fresh-2"])
        with pytest.raises(DuplicateKeyError, match="appears twice"):
            sharded.add(measures[:2], keys=["fresh-1", "fresh-1"])
        with pytest.raises(InvalidMeasureError):
            sharded.add(measures[:2] + [([0, 1], [1.0, float("nan")])])
        with pytest.raises(ValueError, match=r"labels\[1\]"):
            sharded.add(measures[:2], labels=["a", 3])
        with pytest.raises(KeyNotFoundError, match="nothing was deleted"):
            sharded.delete(["doc-30", "no-such-key"])
        for path, snap in zip(sharded.shard_paths, before):
            assert_unchanged(snap, path, "bad input")


def test_generated_keys_skip_taken_ones(tmp_path, spec):
    graph = spec.lib()
    measures, _ = corpus()
    with SobolevIndex.create(tmp_path / "one", graph) as single, \
            ShardedIndex.create(tmp_path / "many", graph, shards=2) as sharded:
        for index in (single, sharded):
            index.add(measures[:2], keys=["doc-3", "doc-4"])
            index.add(measures[2:6])
        assert sharded.keys_in_order() == single.keys_in_order()


# ---------------------------------------------------------------- failures
def test_failed_multi_shard_add_names_the_committed_keys(tmp_path, spec, monkeypatch):
    _, sharded, measures = both(tmp_path, spec)
    with sharded:
        failing = sharded.shard_paths[1]
        write = shard_tasks.write

        def write_or_fail(shard, *args):
            if shard.path == failing:
                raise OSError(28, "No space left on device (simulated)")
            return write(shard, *args)

        monkeypatch.setattr(shard_tasks, "write", write_or_fail)
        keys = [f"new-{i}" for i in range(30)]
        before = len(sharded)
        with pytest.raises(ShardedWriteError) as caught:
            sharded.add(measures[:30], keys=keys)
        expected = [k for k in keys if route(k, SHARDS) != 1]
        assert 0 < len(expected) < len(keys)
        assert caught.value.committed == expected
        assert set(caught.value.failed) == {1}
        message = str(caught.value)
        assert "not atomic across shards" in message and "shard 1" in message
        assert all(repr(k) in message for k in expected)
        assert isinstance(caught.value, SobolevIndexError)
        assert len(sharded) == before + len(expected)
        assert sharded.existing_keys(keys) == set(expected)
        # Writing the batch again completes it; the order of the keys that
        # failed is that of the retry.
        monkeypatch.setattr(shard_tasks, "write", write)
        sharded.upsert(measures[:30], keys)
        assert sharded.existing_keys(keys) == set(keys)
        assert sharded.keys_in_order()[-len(keys):] == keys


def test_failed_multi_shard_delete_names_the_deleted_keys(tmp_path, spec, monkeypatch):
    _, sharded, _ = both(tmp_path, spec)
    with sharded:
        delete = shard_tasks.delete
        monkeypatch.setattr(shard_tasks, "delete", lambda shard, keys: (
            delete(shard, keys) if shard.path != sharded.shard_paths[0] else 1 / 0))
        keys = sharded.keys_in_order()[:20]
        with pytest.raises(ShardedWriteError, match="not atomic") as caught:
            sharded.delete(keys)
        assert caught.value.committed == [k for k in keys if route(k, SHARDS) != 0]
        assert sharded.existing_keys(keys) == {k for k in keys if route(k, SHARDS) == 0}


def test_a_shard_that_fails_to_open_is_named(tmp_path, spec, cluster):
    _, sharded, _ = both(tmp_path, spec)
    sharded.close()
    root = tmp_path / "sharded"
    broken = root / "shard-002"
    os.replace(broken / "catalog.sqlite", tmp_path / "catalog.sqlite")
    for client in (None, cluster):
        with pytest.raises(ShardError, match=r"shard 2 .*shard-002.* cannot be opened") as caught:
            ShardedIndex.open(root, client=client)
        assert caught.value.shard == 2 and caught.value.path == str(broken)
    # Nothing stays locked: once repaired, it opens for writing.
    os.replace(tmp_path / "catalog.sqlite", broken / "catalog.sqlite")
    ShardedIndex.open(root, mode="a").close()


def test_a_shard_of_another_index_is_named(tmp_path, spec):
    _, sharded, _ = both(tmp_path, spec)
    sharded.close()
    root = tmp_path / "sharded"
    shutil.rmtree(root / "shard-001")
    SobolevIndex.create(root / "shard-001", random_graph(99, N_NODES).lib()).close()
    with pytest.raises(ShardError, match=r"shard 1 .*graph checksum .* manifest"):
        ShardedIndex.open(root)
    shutil.rmtree(root / "shard-001")
    SobolevIndex.create(root / "shard-001", spec.lib(), roots=2).close()  # other roots
    with pytest.raises(ShardError, match=r"shard 1 .*(roots|graph checksum)"):
        ShardedIndex.open(root)


def test_bad_paths_and_arguments(tmp_path, spec):
    graph = spec.lib()
    with pytest.raises(NotAnIndexError, match="no manifest.json"):
        ShardedIndex.open(tmp_path)
    with pytest.raises(NotAnIndexError, match="does not exist"):
        ShardedIndex.open(tmp_path / "nowhere")
    for shards in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="shards is"):
            ShardedIndex.create(tmp_path / "x", graph, shards=shards)
    assert not (tmp_path / "x").exists()
    with ShardedIndex.create(tmp_path / "s", graph, shards=2):
        with pytest.raises(ValueError, match="mode is 'w'"):
            ShardedIndex.open(tmp_path / "s", mode="w")
        with pytest.raises(SobolevIndexError, match="another process|already"):
            ShardedIndex.open(tmp_path / "s", mode="a")
    with pytest.raises(FileExistsError):
        ShardedIndex.create(tmp_path / "s", graph, shards=2)
    (tmp_path / "s" / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptIndexError, match="manifest.json cannot be read"):
        ShardedIndex.open(tmp_path / "s")
    with ShardedIndex.create(tmp_path / "r", graph, shards=2):
        pass
    with ShardedIndex.open(tmp_path / "r") as reader:
        with pytest.raises(SobolevIndexError, match="open for reading"):
            reader.add([([0], [1.0])])
    with pytest.raises(SobolevIndexError, match="closed"):
        reader.search([([0], [1.0])])


def test_reader_refresh_sees_new_commits(tmp_path, spec):
    _, sharded, measures = both(tmp_path, spec)
    with sharded, ShardedIndex.open(tmp_path / "sharded") as reader:
        n = len(reader)
        sharded.add(measures[:4], keys=["r1", "r2", "r3", "r4"])
        assert len(reader) == n and "r1" not in reader
        reader.refresh()
        assert len(reader) == n + 4 and "r1" in reader


# --------------------------------------------------------------- worker killed
@pytest.mark.parametrize("shared", [False, True], ids=["queries-in-tasks", "queries-shared"])
@pytest.mark.slow
def test_worker_killed_during_a_search_batch(tmp_path, spec, cluster, monkeypatch, shared):
    # A batch is sent with each shard's task, or (a large one) once as a
    # task's result that the shards' tasks share: both must survive.
    monkeypatch.setattr(dask_shards, "SHARED_QUERY_BYTES", 0 if shared else 1 << 30)
    single, sharded, measures = both(tmp_path, spec, roots=3)
    single.close()
    sharded.close()
    queries = measures[::3]
    with SobolevIndex.open(tmp_path / "single") as single:
        want = single.search(queries, k=13, p=2)
    with ShardedIndex.open(tmp_path / "sharded", client=cluster) as reader:
        assert_same(reader.search(queries, k=13, p=2), want, "before the kill")
        holder = sorted(cluster.who_has()[reader._placement.futures[0].key])[0]
        pid = cluster.run(os.getpid, workers=[holder])[holder]
        # The worker's one thread sleeps, so the batch's tasks on it wait in
        # its queue when it is killed.
        blocker = cluster.submit(time.sleep, 3, workers=[holder], pure=False)
        time.sleep(0.3)
        result = {}

        def run():
            try:
                result["got"] = reader.search(queries, k=13, p=2)
            except Exception as exc:  # shown by the assertion below
                result["error"] = exc

        search = threading.Thread(target=run)
        search.start()
        time.sleep(0.5)
        assert search.is_alive(), "the search ended before the worker was killed"
        os.kill(pid, signal.SIGKILL)
        search.join(timeout=120)
        assert not search.is_alive(), "the search did not finish after the worker was killed"
        blocker.cancel()
        assert "error" not in result, f"the search failed: {result.get('error')!r}"
        assert_same(result["got"], want, "after the kill")
        # And the next batch too, with the shards opened again where they now are.
        assert_same(reader.search(queries, k=13, p=2), want, "after the restart")
    cluster.wait_for_workers(2, timeout=60)


# ------------------------------------------------------ k-NN graph and Gram matrices
@pytest.mark.slow
def test_knn_graph_equals_single_index(tmp_path, spec):
    single, sharded, _ = both(tmp_path, spec, roots=2)
    with single, sharded:
        for p in P_VALUES:
            for include_self in (False, True):
                want = single.knn_graph(6, p=p, include_self=include_self)
                got = sharded.knn_graph(6, p=p, include_self=include_self, batch=23)
                assert np.array_equal(got.indptr, want.indptr)
                assert np.array_equal(got.indices, want.indices), f"p={p}"
                assert np.array_equal(got.data, want.data), f"p={p}"
        done = []
        sharded.knn_graph(2, batch=50, progress=lambda a, b: done.append((a, b)))
        assert done[-1] == (len(single), len(single)) and len(done) == math.ceil(len(single) / 50)


@pytest.mark.slow
def test_distance_matrix_in_zarr_equals_pairwise_sobolev(tmp_path, spec, cluster):
    zarr = pytest.importorskip("zarr", reason="zarr is not installed")
    from sobolev_index import pairwise_sobolev

    single, sharded, _ = both(tmp_path, spec, roots=3, client=cluster)
    with single, sharded:
        keys = single.keys_in_order()
        for p, roots in ((1, None), (2, [2, 0]), (math.inf, None)):
            positions = [0, 1, 2] if roots is None else roots
            features = [single.features(keys, root=r) for r in positions]
            want = pairwise_sobolev(features, trees=[single.trees[r] for r in positions], p=p,
                                    eta=single.eta[positions])
            path = tmp_path / f"gram-{p}.zarr"
            sharded.write_distance_matrix(path, p=p, roots=roots, chunk=37)
            stored = zarr.open_array(str(path), mode="r")
            assert stored.attrs["keys"] == keys
            assert stored.chunks == (37, 37)
            assert np.array_equal(stored[:], want), f"p={p}"
        # A kernel of chosen documents, computed in-process.
        chosen = keys[5:60:3]
        with ShardedIndex.open(tmp_path / "sharded") as reader:
            array, order = reader.distance_matrix(chosen, p=2, t=0.5, chunk=8)
            assert order == chosen
            assert np.array_equal(array.compute(), single.gram(chosen, p=2, t=0.5)[0])
        with pytest.raises(KeyNotFoundError, match="'nope'"):
            sharded.distance_matrix(["nope"])
        with pytest.raises(ValueError, match="roots is"):
            sharded.distance_matrix(roots=[3])
        with pytest.raises(FileExistsError):
            sharded.write_distance_matrix(tmp_path / "gram-1.zarr")


def test_bad_searches_raise_the_single_index_errors(tmp_path, spec):
    single, sharded, measures = both(tmp_path, spec, batches=1)
    with single, sharded:
        query = measures[:1]
        for queries, kwargs in ((query, {"k": 0}), (query, {"k": "a"}), (query, {"p": 0.5}),
                                (query, {"where": {"keys": "abc"}}), (query, {"roots": [5]}),
                                (query, {"roots": 1.5}), (query, {"roots": "0"}),
                                # No shard has the label: each would skip its search.
                                (query, {"roots": [5], "where": {"label": "absent"}}),
                                (query, {"roots": 1.5, "where": {"label": "absent"}}),
                                (query, {"k": 3, "radius": 1}), (query, {"limit": 3}),
                                (None, {}), ([], {}), ("missing", {}), ([([99], [1.0])], {})):
            with pytest.raises(Exception) as want:
                single.search(queries, **kwargs)
            with pytest.raises(type(want.value)) as got:
                sharded.search(queries, **kwargs)
            assert str(got.value) == str(want.value)


def test_next_id_of_readers_and_reserve_ids(tmp_path, spec):
    """A reader's next_id follows the writer's after refresh(); reserve_ids
    raises it in every shard, for good."""
    single, sharded, measures = both(tmp_path, spec)
    with single, sharded, ShardedIndex.open(tmp_path / "sharded") as reader:
        assert reader.next_id == sharded.next_id == single.next_id
        sharded.add(measures[:3])
        assert reader.next_id < sharded.next_id
        reader.refresh()
        assert reader.next_id == sharded.next_id
        sharded.reserve_ids(sharded.next_id + 50)
        with pytest.raises(ValueError, match="next_id is"):
            sharded.reserve_ids(0)
        expected = sharded.next_id
        assert sharded.add(measures[:1]) == [f"doc-{expected}"]
        for path in sharded.shard_paths:
            with SobolevIndex.open(path) as shard:
                assert shard.next_id >= expected
    with ShardedIndex.open(tmp_path / "sharded", mode="a") as again:
        assert again.next_id == expected + 1


def test_an_empty_sharded_index_searches_like_an_empty_index(tmp_path, spec):
    graph = spec.lib()
    with SobolevIndex.create(tmp_path / "one", graph) as single, \
            ShardedIndex.create(tmp_path / "many", graph, shards=3) as sharded:
        query = [([1, 2], [1.0, 1.0])]
        for kwargs in ({"k": 3}, {"radius": 1.0}, {"radius": 1.0, "limit": 2}):
            assert_same(sharded.search(query, **kwargs), single.search(query, **kwargs))
        assert len(sharded) == 0 and sharded.keys_in_order() == []
        assert sharded.knn_graph(3).shape == (0, 0)
        assert sharded.verify()["ok"]


# ------------------------------------------------ identical trees in every shard
def ring(n=12):
    """A ring of unit edges: from any root, the node opposite is reached by
    two shortest paths, which only perturbed lengths (from a seed) break."""
    from sobolev_index import Graph

    edges = np.array([(i, (i + 1) % n) for i in range(n)], dtype=np.int64)
    return Graph.from_edges(n, edges, np.ones(n))


def graph_file_checksum(path):
    from sobolev_index.index import storage

    return storage.file_checksum(os.path.join(path, storage.GRAPH_FILE))


@pytest.mark.filterwarnings("ignore:root .* shortest paths were not unique")
def test_every_shard_has_the_graph_file_of_the_first_where_paths_tie(tmp_path):
    graph = ring()
    source = SobolevIndex.create(tmp_path / "source", graph, roots=3, on_violation="perturb",
                                 seed=7)
    with source:
        # The seed shows in the trees: with seed 0 the graph file differs, so
        # shards rebuilt from the graph with their own seed would differ too.
        with SobolevIndex.create(tmp_path / "seed0", graph, roots=list(source.roots),
                                 on_violation="perturb", seed=0):
            pass
        want = graph_file_checksum(source.path)
        assert graph_file_checksum(tmp_path / "seed0") != want
        with ShardedIndex.create_like(tmp_path / "like", source, shards=3) as like:
            assert [graph_file_checksum(p) for p in like.shard_paths] == [want] * 3
            assert like.roots.tolist() == source.roots.tolist()
            assert like.eta.tolist() == source.eta.tolist() and like.p == source.p
        manifest = json.loads((tmp_path / "like" / "manifest.json").read_text())
        assert manifest["graph_checksum"] == want
    # From a path too, and create(): every shard has shard 0's file.
    with ShardedIndex.create_like(tmp_path / "by-path", tmp_path / "source", shards=2) as like:
        assert {graph_file_checksum(p) for p in like.shard_paths} == {want}
    with ShardedIndex.create(tmp_path / "made", graph, roots=3, on_violation="perturb", seed=7,
                             shards=4, p=2) as made:
        assert {graph_file_checksum(p) for p in made.shard_paths} == {want}
        assert made.p == 2
    with pytest.raises(TypeError, match="expected an open SobolevIndex"):
        ShardedIndex.create_like(tmp_path / "bad", 3)
    assert not (tmp_path / "bad").exists()


# ------------------------------------------------------- splitting an index
def single_index(path, spec, roots=3, p=1):
    """A single index of corpus() in 3 batches, with labels and fields, an
    upsert and a delete: several segments, deleted rows, ties."""
    measures, labels = corpus(2)
    index = SobolevIndex.create(path, spec.lib(), roots=roots, p=p)
    fields = [{"i": i, "tags": ["x", {"y": None}]} if i % 3 else None
              for i in range(len(measures))]
    for start in range(0, len(measures), 70):
        index.add(measures[start:start + 70], labels=labels[start:start + 70],
                  fields=fields[start:start + 70])
    keys = index.keys_in_order()
    index.upsert(measures[:4], keys[30:34], labels=["upserted"] * 4)
    index.delete(keys[40:46])
    return index, measures


@pytest.mark.slow
def test_shard_index_searches_like_the_source(tmp_path, spec):
    from sobolev_index.distributed import shard_index

    source, measures = single_index(tmp_path / "source", spec)
    # The newest document goes: the split must not give its id again.
    source.delete([source.keys_in_order()[-1]])
    source.close()
    seen = []
    report = shard_index(tmp_path / "source", tmp_path / "split", 3, batch_size=25,
                         progress=lambda *args: seen.append(args))
    with SobolevIndex.open(tmp_path / "source") as source, \
            ShardedIndex.open(tmp_path / "split") as split:
        n = len(source)
        assert report["documents"] == n == len(split) and report["shards"] == 3
        assert sum(report["per_shard"]) == n and min(report["per_shard"]) > 0
        assert report["kind"] is None and report["words"] is None
        assert seen[0] == ("copying", 0, n) and seen[-1] == ("copying", n, n)
        assert len(seen) >= math.ceil(n / 25)
        assert split.keys_in_order() == source.keys_in_order()
        for key in source.keys_in_order()[::7]:
            a, b = split.get(key), source.get(key)
            assert (a["label"], a["fields"]) == (b["label"], b["fields"])
            assert np.array_equal(a["nodes"], b["nodes"])
            assert np.array_equal(a["masses"], b["masses"])
        queries = measures[::9] + random_measures(np.random.default_rng(3), N_NODES, 8)
        tied = False
        for p in P_VALUES:
            for k in (1, 10, 40):
                got = split.search(queries, k=k, p=p)
                assert_same(got, source.search(queries, k=k, p=p), f"p={p} k={k}")
                tied |= cross_shard_tie_order(got, 3)
            keys = source.keys_in_order()[::13]
            assert_same(split.search(keys, k=8, p=p, roots=[1, 2]),
                        source.search(keys, k=8, p=p, roots=[1, 2]), f"keys p={p}")
            assert_same(split.search(queries, radius=0.25, p=p),
                        source.search(queries, radius=0.25, p=p), f"radius p={p}")
        assert tied, "no query had tied documents of two shards out of shard order"
        assert {graph_file_checksum(p) for p in split.shard_paths} == {
            graph_file_checksum(source.path)}
        assert split.verify()["ok"]
        assert split.ids_and_keys()[0].tolist() == [source.get(k)["id"]
                                                    for k in source.keys_in_order()]
    with SobolevIndex.open(tmp_path / "source", mode="a") as source, \
            ShardedIndex.open(tmp_path / "split", mode="a") as split:
        assert split.next_id == source.next_id
        assert split.add(measures[:3]) == source.add(measures[:3])
        assert_same(split.search(measures[:5], k=6), source.search(measures[:5], k=6))


def test_shard_index_of_a_text_index_gives_every_shard_its_words(tmp_path):
    import _support.corpus as tc

    from sobolev_index.distributed import shard_index
    from sobolev_index.ingest.documents import build_index, text_measures
    from sobolev_index.ingest.fill import TEXT_META
    from sobolev_index.ingest.recipes import RECIPE_META
    from sobolev_index.ingest.words import read_words

    _, vectors_path = tc.make_files(str(tmp_path))
    source, _ = build_index(str(tmp_path / "text"), tc.corpus(), vectors_path, seed=3,
                            batch_size=9)
    with source:
        source.delete(["space-3"])
        report = shard_index(source, tmp_path / "split", 2)
        assert report["kind"] == "text" and report["documents"] == len(source)
        words = read_words(source.catalog)
        assert report["words"] == len(words) > 10
        texts = ["space1 music2 the cooking3", "music7"]
        want = source.search(text_measures(source, texts), k=6)
        with ShardedIndex.open(tmp_path / "split") as split:
            assert_same(split.search(text_measures(source, texts), k=6), want)
            for path in split.shard_paths:
                # Each shard reads text on its own as the source does.
                with SobolevIndex.open(path) as shard:
                    assert read_words(shard.catalog) == words
                    for name in (TEXT_META, RECIPE_META):
                        assert shard.catalog.meta_value(name) == source.catalog.meta_value(name)
                    for a, b in zip(text_measures(shard, texts), text_measures(source, texts)):
                        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
            with SobolevIndex.open(split.shard_paths[1]) as shard:
                assert shard.get(shard.keys_in_order()[0])["fields"]["text"]


def test_shard_index_refuses_bad_input_and_leaves_nothing(tmp_path, spec, monkeypatch):
    from sobolev_index.distributed import shard_index

    source, _ = single_index(tmp_path / "source", spec)
    source.close()
    for kwargs, error, match in (({"shards": 0}, ValueError, "shards is 0"),
                                 ({"shards": 2, "batch_size": 0}, ValueError, "batch_size is 0"),
                                 ({"shards": 2, "batch_size": 2.5}, ValueError, "batch_size")):
        with pytest.raises(error, match=match):
            shard_index(tmp_path / "source", tmp_path / "dest", **kwargs)
        assert not (tmp_path / "dest").exists()
    with pytest.raises(NotAnIndexError):
        shard_index(tmp_path / "nowhere", tmp_path / "dest", 2)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(FileExistsError):
        shard_index(tmp_path / "source", tmp_path / "full", 2)
    # A failure after some batches were copied leaves the empty folder given.
    write, calls = shard_tasks.write, []

    def fail_later(shard, *args):
        calls.append(1)
        if len(calls) > 4:
            raise OSError(28, "No space left on device (simulated)")
        return write(shard, *args)

    monkeypatch.setattr(shard_tasks, "write", fail_later)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShardedWriteError, match="not atomic"):
        shard_index(tmp_path / "source", tmp_path / "empty", 2, batch_size=20)
    assert len(calls) > 4 and os.listdir(tmp_path / "empty") == []


@pytest.mark.slow
def test_a_split_killed_part_way_leaves_no_index_at_dest(tmp_path, spec):
    """SIGKILL after the first batch is committed: dest does not exist (no
    valid-looking incomplete sharded index), only the hidden staging
    directory remains, and the source is unchanged."""
    import subprocess
    import sys

    from _support.processes import child_env, child_script

    source, measures = single_index(tmp_path / "source", spec)
    source.close()
    assert len(measures) > 40
    before = snapshot(tmp_path / "source")
    dest = tmp_path / "dest"
    child = subprocess.Popen(
        [sys.executable, child_script("killed_split.py"), str(tmp_path / "source"), str(dest),
         "3", "20"], stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        lines = []
        for line in child.stdout:
            lines.append(line.strip())
            if line.startswith("COPIED") and int(line.split()[1]) > 0:
                break
        assert lines[-1] == "COPIED 20", lines
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    assert not dest.exists()
    with pytest.raises(NotAnIndexError):
        ShardedIndex.open(dest)
    leftovers = [name for name in os.listdir(tmp_path) if name not in ("source",)]
    assert leftovers and all(name.startswith(".sobolev-") for name in leftovers), leftovers
    assert_unchanged(before, tmp_path / "source")
    # A new split to the same dest succeeds and is complete.
    from sobolev_index.distributed import shard_index

    with SobolevIndex.open(tmp_path / "source") as opened:
        live = len(opened)
    assert shard_index(tmp_path / "source", dest, 3, batch_size=20)["documents"] == live
    with ShardedIndex.open(dest) as split:
        assert len(split) == live and split.verify()["ok"]


@pytest.mark.slow
def test_a_writers_shard_sent_to_another_worker_is_refused_not_waited_for(tmp_path, spec,
                                                                          cluster, monkeypatch):
    """A task of a writer's shard placed on the other worker raises
    ShardMovedError at once; it used to open the shard again there and wait
    for the write lock its holder keeps, forever. The writer's own tasks
    stay where the shard is (they used to be moved to the copy now and
    then, and fail). A worker opening a shard for writing waits a finite
    time for its lock."""
    from sobolev_index.distributed import ShardMovedError
    from sobolev_index.errors import IndexLockedError

    graph = spec.lib()
    with ShardedIndex.create(tmp_path / "w", graph, shards=2, client=cluster) as sharded:
        future = sharded._placement.futures[0]
        holder = next(iter(cluster.who_has([future])[future.key]))
        other = next(w for w in cluster.scheduler_info()["workers"] if w != holder)
        moved = cluster.submit(shard_tasks.size, future, workers=[other],
                               allow_other_workers=False, pure=False)
        started = time.monotonic()
        with pytest.raises(ShardMovedError, match=r"holds a copy of the shard .*shard-000 "):
            moved.result(timeout=60)
        assert time.monotonic() - started < 30
        # The writer still works where its shards are, though the copy
        # there makes moving its tasks look free to the scheduler.
        measures, _ = corpus(4, n=20)
        keys = []
        for batch in range(0, len(measures), 2):
            keys += sharded.add(measures[batch:batch + 2])
            assert len(sharded.search(measures[:3], k=2).keys) == 3
        assert len(sharded) == len(keys) == len(measures)
        assert sharded.verify()["ok"]
    # A shard whose lock another process holds: the open fails in bounded time.
    monkeypatch.setattr(shard_tasks, "WORKER_LOCK_SECONDS", 1.0)
    with SobolevIndex.open(tmp_path / "w" / "shard-001", mode="a"):
        started = time.monotonic()
        with pytest.raises(ShardError, match="shard 1 .* cannot be opened") as caught:
            ShardedIndex.open(tmp_path / "w", mode="a", client=cluster)
        assert isinstance(caught.value.cause, IndexLockedError)
        assert time.monotonic() - started < 30
    ShardedIndex.open(tmp_path / "w", mode="a", client=cluster).close()


@pytest.mark.slow
def test_a_writers_shards_follow_a_retired_worker(tmp_path, spec):
    """The worker holding two of a writer's shards retires (as an adaptive
    cluster scales down): Dask copies its results to the other worker, and
    a copy of a writer's shard is a stand-in that cannot write (the writer
    used to fail every task of those shards from then on). The shards are
    opened again there; the writer adds, upserts, deletes and searches on,
    answering as a single index given the same writes."""
    graph = spec.lib()
    measures, labels = corpus(6, n=60)
    keys = [f"r{i}" for i in range(len(measures))]
    first, second = slice(0, 40), slice(40, None)
    with SobolevIndex.create(tmp_path / "single", graph) as single:
        single.add(measures[first], keys=keys[first], labels=labels[first])
        single.add(measures[second], keys=keys[second], labels=labels[second])
        single.upsert(measures[:5], keys=keys[10:15], labels=["again"] * 5)
        single.delete(keys[20:25])
        want = single.search(measures[::7], k=9, p=2)
    with local_cluster(2) as client, ShardedIndex.create(
            tmp_path / "sharded", graph, shards=4, client=client) as sharded:
        sharded.add(measures[first], keys=keys[first], labels=labels[first])
        before = list(sharded._placement.futures)
        holders = client.who_has(before)
        leaving = next(iter(holders[before[0].key]))
        moved = [i for i, f in enumerate(before) if leaving in holders[f.key]]
        assert len(moved) == 2, holders
        client.retire_workers([leaving])
        sharded.add(measures[second], keys=keys[second], labels=labels[second])
        sharded.upsert(measures[:5], keys=keys[10:15], labels=["again"] * 5)
        sharded.delete(keys[20:25])
        assert_same(sharded.search(measures[::7], k=9, p=2), want, "after the retirement")
        assert sharded.keys_in_order() == [k for k in keys if k not in keys[10:15]
                                           and k not in keys[20:25]] + keys[10:15]
        assert sharded.verify()["ok"]
        # The retired worker's shards were opened again; the others stayed.
        after = sharded._placement.futures
        assert [after[i].key != before[i].key for i in range(4)] == \
            [i in moved for i in range(4)]


def _size_after(shard, seconds):
    time.sleep(seconds)
    return shard_tasks.size(shard)


@pytest.mark.slow
def test_a_writers_result_lost_with_its_worker_is_asked_again(tmp_path, spec, cluster):
    """Shard 0's task has finished when its worker dies, while shard 1's
    task still runs: the result is lost with the worker. It is asked for
    again where shard 0 is opened next (it used to come back as a
    RuntimeError, 'the task was lost'), and the writer goes on."""
    graph = spec.lib()
    measures, _ = corpus(7, n=30)
    try:
        with ShardedIndex.create(tmp_path / "w", graph, shards=2, client=cluster) as sharded:
            keys = sharded.add(measures)
            want = {i: sum(route(k, 2) == i for k in keys) for i in range(2)}
            placement = sharded._placement
            homes = cluster.who_has(placement.futures)
            home = next(iter(homes[placement.futures[0].key]))
            assert home not in homes[placement.futures[1].key]
            pid = cluster.run(os.getpid, workers=[home])[home]
            got = {}
            sizes = threading.Thread(target=lambda: got.update(placement.map(
                _size_after, {0: (0,), 1: (4,)}, pinned=True)))
            sizes.start()
            time.sleep(1.5)
            os.kill(pid, signal.SIGKILL)
            sizes.join(120)
            assert not sizes.is_alive(), "the map did not return"
            assert got == want
            more = sharded.add(measures[:6])
            assert len(sharded) == len(keys) + len(more) and sharded.verify()["ok"]
    finally:
        cluster.wait_for_workers(2, timeout=60)


def committing_then_failing(monkeypatch, name, failing_paths, before_commit=()):
    """Replace shard task ``name`` (write or delete) by one that, in the
    shards at ``failing_paths``, commits and then raises (as a worker that
    dies after the commit, whose task Dask reruns), and in those at
    ``before_commit`` raises without writing."""
    real = getattr(shard_tasks, name)

    def task(shard, *args):
        if shard.path in before_commit:
            raise OSError(28, "No space left on device (simulated)")
        out = real(shard, *args)
        if shard.path in failing_paths:
            raise DuplicateKeyError("the rerun of a committed write (simulated)")
        return out

    monkeypatch.setattr(shard_tasks, name, task)
    return real


@pytest.mark.slow
def test_a_part_that_committed_then_failed_counts_as_committed(tmp_path, spec, monkeypatch):
    """A shard's part that raised after its commit is reported committed,
    keeps its ids (the tie order of a single index given the
    same calls), and a batch all of whose parts committed returns normally."""
    single, sharded, measures = both(tmp_path, spec)
    with single, sharded:
        paths = sharded.shard_paths
        real = committing_then_failing(monkeypatch, "write", {paths[1]}, {paths[2]})
        keys = [f"new-{i}" for i in range(30)]
        batch = measures[:15] + measures[:15]  # repeated: ties across shards
        with pytest.raises(ShardedWriteError) as caught:
            sharded.add(batch, keys=keys)
        expected = [k for k in keys if route(k, SHARDS) != 2]
        assert caught.value.committed == expected
        assert set(caught.value.failed) == {2}
        assert sharded.existing_keys(keys) == set(expected)
        # The single index given what committed, in the same order.
        single.add([m for m, k in zip(batch, keys) if k in expected], keys=expected)
        assert sharded.keys_in_order() == single.keys_in_order()
        assert_same(sharded.search(measures[:15], k=12), single.search(measures[:15], k=12),
                    "after a part committed then failed", ids=False)
        assert sharded.verify()["ok"]
        # Every part commits, one of them then raises: add returns normally.
        monkeypatch.setattr(shard_tasks, "write", real)
        committing_then_failing(monkeypatch, "write", {paths[0]})
        more = [f"more-{i}" for i in range(12)]
        assert sharded.add(measures[:12], keys=more) == more
        single.add(measures[:12], keys=more)
        assert sharded.keys_in_order() == single.keys_in_order()
        # And an upsert of keys already live, whose new measures differ.
        sharded.upsert(measures[20:32], more, labels=["re"] * 12)
        single.upsert(measures[20:32], more, labels=["re"] * 12)
        assert sharded.keys_in_order() == single.keys_in_order()
        assert_same(sharded.search(measures[:15], k=40), single.search(measures[:15], k=40),
                    ids=False)
        # Delete: a shard that deleted, then raised, counts its keys deleted.
        committing_then_failing(monkeypatch, "delete", {paths[1]})
        gone = more[:8]
        assert sharded.delete(gone) == single.delete(gone) == 8
        assert not sharded.existing_keys(gone)
        committing_then_failing(monkeypatch, "delete", {paths[1]}, {paths[0]})
        gone = more[8:] + expected[:6]
        with pytest.raises(ShardedWriteError) as caught:
            sharded.delete(gone)
        assert caught.value.committed == [k for k in gone if route(k, SHARDS) != 0]
        assert set(caught.value.failed) == {0}


def _die_after_committing(marker):
    """Installed on the workers: shard 1's write commits, then its worker
    is SIGKILLed before it answers (once: ``marker`` records it)."""
    real = shard_tasks.write

    def write(shard, *args):
        out = real(shard, *args)
        if shard.path.endswith("shard-001") and not os.path.exists(marker):
            with open(marker, "w"):
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    shard_tasks.write = write


@pytest.mark.slow
def test_a_worker_killed_after_its_shard_committed(tmp_path, spec, cluster):
    """On the LocalCluster: the worker holding shard 1 dies right after
    shard 1 commits its part of an add. Dask opens the shard again and runs
    the write again, which its ids refuse; the add still reports every key
    committed and keeps their ids."""
    graph = spec.lib()
    measures, _ = corpus(5, n=24)
    keys = [f"k{i}" for i in range(len(measures))]
    assert {route(k, SHARDS) for k in keys} == set(range(SHARDS))
    marker = str(tmp_path / "killed")
    with SobolevIndex.create(tmp_path / "single", graph) as single:
        single.add(measures, keys=keys)
        want = single.search(measures[:10], k=15)
    # (The wrapper stays on the surviving worker; once the marker exists it
    # only writes.)
    cluster.run(_die_after_committing, marker)
    try:
        with ShardedIndex.create(tmp_path / "sharded", graph, shards=SHARDS,
                                 client=cluster) as sharded:
            try:
                assert sharded.add(measures, keys=keys) == keys
            except ShardedWriteError as exc:  # say why, with the notes of each shard
                pytest.fail(f"{exc}; notes: {[getattr(e, '__notes__', None) for e in exc.failed.values()]}")
            assert os.path.exists(marker), "no worker was killed"
            assert sharded.keys_in_order() == keys
            assert_same(sharded.search(measures[:10], k=15), want, "after the kill")
            assert sharded.verify()["ok"]
    finally:
        cluster.wait_for_workers(2, timeout=60)


@pytest.mark.slow
def test_verify_finds_misrouted_keys_and_ids_in_two_shards(tmp_path, spec):
    """A key written into the wrong shard through the shard's own API, and a
    document written to a shard directly with an id another shard's
    document has (ties between them would not follow insertion order):
    verify reports each, by shard."""
    _, sharded, measures = both(tmp_path, spec)
    sharded.close()
    root = tmp_path / "sharded"
    with ShardedIndex.open(root) as reader:
        assert reader.verify()["ok"]
        stray = next(f"x{i}" for i in range(100) if route(f"x{i}", SHARDS) == 1)
        ids, keys = reader.ids_and_keys()
    with SobolevIndex.open(root / "shard-000", mode="a") as shard:  # at your own risk
        shard.add(measures[:1], keys=[stray])
    with ShardedIndex.open(root) as reader:
        report = reader.verify()
        assert not report["ok"]
        assert [p for p in report["problems"] if "route to another shard" in p] == [
            p for p in report["problems"] if p.startswith("shard 0 (") and repr(stray) in p
            and "route to another shard" in p]
        assert not report["shards"][0]["ok"]
    with SobolevIndex.open(root / "shard-000", mode="a") as shard:
        shard.delete([stray])
    # The shard that gave the fewest ids takes a key of its own with the id
    # of another shard's document.
    nexts = []
    for i in range(SHARDS):
        with SobolevIndex.open(root / f"shard-{i:03d}") as shard:
            nexts.append(shard.next_id)
    a = int(np.argmin(nexts))
    taken = next((int(i), k) for i, k in zip(ids, keys) if i >= nexts[a])
    b = route(taken[1], SHARDS)
    mine = next(f"y{i}" for i in range(100) if route(f"y{i}", SHARDS) == a)
    with SobolevIndex.open(root / f"shard-{a:03d}", mode="a") as shard:
        shard.add(measures[:1], keys=[mine], ids=[taken[0]])
    with ShardedIndex.open(root) as reader:
        report = reader.verify()
        assert not report["ok"]
        assert len(report["problems"]) == 2, report["problems"]
        found = {int(p[len("shard "):p.index(" (")]): p for p in report["problems"]}
        assert set(found) == {a, b}
        assert f"{mine!r} (id {taken[0]})" in found[a]
        assert f"{taken[1]!r} (id {taken[0]})" in found[b]
        assert all("ids that another shard's documents have too" in p for p in found.values())
        assert [r["ok"] for r in report["shards"]] == [i not in (a, b) for i in range(SHARDS)]


def test_ids_are_global_and_committed_with_the_documents(tmp_path, spec):
    """Each document's id is the one a single index given the same calls
    gives it (get's ``id``), stored in its shard, and a sharded writer
    opened again goes on from the largest id any shard has given."""
    single, sharded, measures = both(tmp_path, spec)
    with single, sharded:
        ids, keys = sharded.ids_and_keys()
        assert keys == single.keys_in_order()
        assert ids.tolist() == [single.get(k)["id"] for k in keys]
        assert all(sharded.get(k)["id"] == single.get(k)["id"] for k in keys[::9])
        assert sharded.next_id == single.next_id
    with ShardedIndex.open(tmp_path / "sharded", mode="a") as again, \
            SobolevIndex.open(tmp_path / "single", mode="a") as single:
        assert again.next_id == single.next_id
        assert again.add(measures[:4]) == single.add(measures[:4])
        with pytest.raises(ValueError, match="below the index's next id"):
            again.add(measures[:1], ids=[again.next_id - 1])
        with pytest.raises(ValueError, match="do not rise"):
            again.add(measures[:2], ids=[again.next_id + 5, again.next_id + 5])


_KILL_MIDWAY = """
import os, sys, time
import numpy as np
from sobolev_index.distributed import ShardedIndex
from sobolev_index.distributed import shards as tasks

root, marks = sys.argv[1], sys.argv[2]
real = tasks.write

def write(shard, *args):
    if shard.path.endswith("shard-002"):
        # Dies once the other shards have committed their parts.
        while len(os.listdir(marks)) < 2:
            time.sleep(0.01)
        os._exit(3)
    out = real(shard, *args)
    open(os.path.join(marks, os.path.basename(shard.path)), "w").close()
    return out

tasks.write = write
data = np.load(os.path.join(marks, "..", "batch.npz"))
measures = [(data[f"n{i}"], data[f"m{i}"]) for i in range(int(data["count"]))]
keys = [str(k) for k in data["keys"]]
with ShardedIndex.open(root, mode="a") as sharded:
    sharded.upsert(measures, keys, labels=["killed"] * len(keys))
"""


@pytest.mark.slow
def test_a_writer_killed_mid_batch_keeps_the_insertion_order(tmp_path, spec):
    """The writer's process dies while a batch is being written: two shards
    committed their parts, the third did not. Opened again, the sharded
    index holds exactly the committed parts and answers as a single index
    given those, ties between shards included: the order is committed with
    the documents, so no crash can separate the two."""
    import subprocess
    import sys

    single, sharded, measures = both(tmp_path, spec)
    keys = single.keys_in_order()
    sharded.close()
    # Live keys of every shard, given measures that tie with each other
    # and with documents already there.
    chosen = [next(k for k in keys if route(k, SHARDS) == i and k not in keys[10:16])
              for i in range(SHARDS)]
    chosen += [k for k in keys[40:70] if k not in chosen]
    batch = [measures[j % 6] for j in range(len(chosen))]
    (tmp_path / "marks").mkdir()
    np.savez(tmp_path / "batch.npz", count=len(batch), keys=np.array(chosen),
             **{f"n{i}": m[0] for i, m in enumerate(batch)},
             **{f"m{i}": m[1] for i, m in enumerate(batch)})
    script = tmp_path / "kill.py"
    script.write_text(_KILL_MIDWAY)
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "sharded"),
                          str(tmp_path / "marks")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stderr
    committed = [k for k in chosen if route(k, SHARDS) != 2]
    with single, ShardedIndex.open(tmp_path / "sharded") as reader:
        single.upsert([b for b, k in zip(batch, chosen) if k in committed], committed,
                      labels=["killed"] * len(committed))
        assert reader.keys_in_order() == single.keys_in_order()
        assert all(reader.get(k)["label"] == "killed" for k in committed)
        assert all(reader.get(k)["label"] != "killed" for k in chosen if k not in committed)
        queries = measures[:6] + measures[30:40]
        for p in P_VALUES:
            got, want = reader.search(queries, k=25, p=p), single.search(queries, k=25, p=p)
            assert_same(got, want, f"after the kill, p={p}", ids=False)
        assert cross_shard_tie_order(want, SHARDS), "the test has no ties between shards"
        assert reader.verify()["ok"]


@pytest.mark.parametrize("field, value", [
    ("n_nodes", None), ("n_nodes", "40"), ("n_nodes", 0), ("n_nodes", True),
    ("p", "two"), ("p", 0.5), ("p", None), ("roots", [N_NODES + 3]), ("roots", []),
    ("roots", ["0"]), ("eta", [1.0, 2.0]), ("eta", ["x"]), ("eta", [-1.0])])
def test_a_manifest_with_a_bad_field_is_corrupt(tmp_path, spec, field, value):
    """Every field of manifest.json is checked at open: CorruptIndexError
    naming the file and the field, nothing left open or locked."""
    with ShardedIndex.create(tmp_path / "s", spec.lib(), shards=2):
        pass
    path = tmp_path / "s" / "manifest.json"
    good = path.read_text()
    manifest = json.loads(good)
    if value is None:
        del manifest[field]
    else:
        manifest[field] = value
    path.write_text(json.dumps(manifest))
    for mode in ("r", "a"):
        with pytest.raises(CorruptIndexError, match=rf"manifest\.json: {field} is"):
            ShardedIndex.open(tmp_path / "s", mode=mode)
    # The writer lock was not kept: the good manifest back, it opens for
    # writing at once.
    path.write_text(good)
    ShardedIndex.open(tmp_path / "s", mode="a", timeout=0).close()


def test_knn_graph_caps_k_with_the_single_index_warning(tmp_path):
    graph = Graph.from_points(np.random.default_rng(4).normal(size=(12, 2)), n_nodes=12, seed=0)
    measures = [(np.array([i % 12]), np.array([1.0])) for i in range(9)]
    with ShardedIndex.create(tmp_path / "s", graph, shards=2, on_violation="perturb") as sharded:
        sharded.add(measures, keys=[f"m{i}" for i in range(9)])
        with pytest.warns(UserWarning, match="k is 20, more than the 8 other documents"):
            capped = sharded.knn_graph(20)
    assert capped.shape == (9, 9) and capped.nnz == 9 * 8
