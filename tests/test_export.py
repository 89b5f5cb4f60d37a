"""Export and import (``export_index`` / ``build_from_export``, the
``export`` command and ``build --from-export``): an index exported to JSON
lines and rebuilt on the graph of its source is the same index. Checked
against what the source was built from (the measures added, each text's
measure from the source's own encoder), and by comparing the two indexes:
graph file, roots, eta and p, keys in order, labels, fields, features,
words table and meta, and searches with exactly equal keys and distances;
then bad input, refused with one error naming it and nothing written."""
import json
import os
import warnings

import numpy as np
import pytest
from _support import corpus as tc
from _support.cli import run
from _support.index import assert_unchanged, snapshot
from reference import ref_pairwise, ref_tree

from sobolev_index import Graph, SobolevIndex
from sobolev_index.index import storage
from sobolev_index.ingest.documents import TextEncoder, add_documents, build_index, text_measures
from sobolev_index.ingest.export import build_from_export, export_index, read_export_header
from sobolev_index.ingest.pointindex import build_point_index, point_measures
from sobolev_index.ingest.pointsets import PointSet
from sobolev_index.ingest.words import read_words

N_NODES = 30


# ---------------------------------------------------------------- helpers
def _lines(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _write_lines(path, values):
    with open(path, "w", encoding="utf-8") as handle:
        for value in values:
            handle.write(json.dumps(value) + "\n")


def _graph_checksum(path):
    return storage.file_checksum(os.path.join(path, storage.GRAPH_FILE))


def _documents(index):
    """Every live document as the index gives it back: key, label, fields
    and the normalised measure, in insertion order."""
    out = []
    for key in index.keys_in_order():
        doc = index.get(key)
        out.append((key, doc["label"], doc["fields"], doc["nodes"].tolist(),
                    doc["masses"].tolist()))
    return out


def _assert_same_index(a, b, queries):
    """``b`` is ``a`` rebuilt: same graph file, roots, eta, p, documents,
    features for every root, and searches with equal keys and distances."""
    assert _graph_checksum(a.path) == _graph_checksum(b.path)
    assert a.roots.tolist() == b.roots.tolist()
    assert a.eta.tolist() == b.eta.tolist() and a.p == b.p
    for ta, tb in zip(a.trees, b.trees):
        assert np.array_equal(ta.parent, tb.parent) and np.array_equal(ta.length, tb.length)
    assert _documents(a) == _documents(b)
    keys = a.keys_in_order()
    for root in range(len(a.roots)):
        fa, fb = a.features(keys, root=root), b.features(keys, root=root)
        assert np.array_equal(fa.indptr, fb.indptr) and np.array_equal(fa.indices, fb.indices)
        assert np.array_equal(fa.data, fb.data)
    for p in (1, 2, np.inf):
        ra, rb = a.search(queries, k=len(keys), p=p), b.search(queries, k=len(keys), p=p)
        assert ra.keys == rb.keys and ra.labels == rb.labels
        assert np.array_equal(ra.distances, rb.distances)  # exactly, not approximately
    stored = keys[:5]
    ra, rb = a.search(stored, k=7), b.search(stored, k=7)
    assert ra.keys == rb.keys and np.array_equal(ra.distances, rb.distances)


# ------------------------------------------------------------ text index
NEW_TEXTS = {"extra-0": "space1 space99 the music2", "extra-1": "cooking3 cooking4",
             "extra-2": "music1 music7 space1"}


def _text_index(path, vectors_path):
    """A text index built in several batches (so several segments), two
    documents deleted, three added with fields of their own (one without
    its text), and a new word (space99) placed by its vector. Open for
    writing."""
    index, _ = build_index(str(path), tc.corpus(), vectors_path, seed=3, batch_size=7)
    index.delete(["space-3", "music-5"])
    add_documents(index, [
        {"key": "extra-0", "text": NEW_TEXTS["extra-0"], "label": "space",
         "fields": {"source": "added", "score": 0.1 + 0.2, "tags": ["a", {"b": None}]}},
        {"key": "extra-1", "text": NEW_TEXTS["extra-1"], "fields": {"n": 12345678901234567}},
    ], vectors_path)
    add_documents(index, [{"key": "extra-2", "text": NEW_TEXTS["extra-2"], "label": "music"}],
                  store_text=False)
    return index


@pytest.fixture(scope="module")
def text_source(tmp_path_factory):
    """The text index of _text_index (closed) and its export."""
    directory = tmp_path_factory.mktemp("export-text")
    _, vectors_path = tc.make_files(str(directory))
    _text_index(directory / "source", vectors_path).close()
    out = directory / "source.jsonl"
    report = export_index(str(directory / "source"), str(out))
    return directory, vectors_path, out, report


def test_text_export_holds_the_live_documents_and_their_stored_measures(text_source):
    directory, _, out, report = text_source
    lines = _lines(out)
    header, records = lines[0], lines[1:]
    with SobolevIndex.open(directory / "source") as source:
        keys = source.keys_in_order()
        encoder = TextEncoder.of_index(source)
        assert header["documents"] == len(source) == report["documents"] == len(records)
        assert header["graph"]["checksum"] == _graph_checksum(source.path)
        assert header["roots"] == source.roots.tolist() and header["eta"] == source.eta.tolist()
        assert header["words"] == [[w, n, df] for w, (n, df) in read_words(source.catalog).items()]
        assert header["meta"]["text"] == source.catalog.meta_value("text")
        assert header["meta"]["recipe"] == source.catalog.meta_value("recipe")
        texts = {doc["key"]: doc["text"] for doc in tc.corpus()}
        texts.update(NEW_TEXTS)
        # Insertion order, without the deleted documents.
        assert [r["key"] for r in records] == keys
        assert "space-3" not in keys and "music-5" not in keys and len(keys) == 61
        for record in records:
            # The stored (unnormalised) masses are the encoder's weights,
            # bit for bit through JSON.
            nodes, masses = encoder.measure(texts[record["key"]])
            assert record["nodes"] == nodes.tolist()
            assert np.array_equal(np.array(record["masses"]), masses)
            if record["key"] == "extra-2":
                assert "text" not in record and record["fields"] is None
            else:
                assert record["text"] == texts[record["key"]]
    extra = {r["key"]: r for r in records}
    assert extra["extra-0"]["fields"] == {"source": "added", "score": 0.1 + 0.2,
                                          "tags": ["a", {"b": None}]}
    assert extra["extra-1"]["fields"] == {"n": 12345678901234567}
    assert extra["extra-0"]["label"] == "space" and extra["extra-1"]["label"] is None
    assert report["bytes"] == os.path.getsize(out) and report["kind"] == "text"
    assert report["words"] == len(header["words"]) == 37  # 36 words and space99


def test_text_round_trip_is_the_same_index(text_source):
    directory, vectors_path, out, _ = text_source
    rebuilt_path = directory / "rebuilt"
    index, report = build_from_export(str(rebuilt_path), str(out), str(directory / "source"))
    with index, SobolevIndex.open(directory / "source") as source:
        assert report["documents"] == len(source) == len(index)
        queries = text_measures(source, ["space1 space2 music3", "cooking4 the space7",
                                         "music1", "space99 cooking1 cooking1"])
        _assert_same_index(source, index, queries)
        assert read_words(index.catalog) == read_words(source.catalog)
        for name in ("text", "recipe"):
            assert index.catalog.meta_value(name) == source.catalog.meta_value(name)
    # Exported again, the rebuilt index gives the same file but for the
    # times the documents were added.
    again = directory / "again.jsonl"
    export_index(str(rebuilt_path), str(again))

    def without_times(path):
        return [{k: v for k, v in r.items() if k != "added_at"} for r in _lines(path)]

    assert without_times(again) == without_times(out)


def test_adding_new_text_to_both_gives_the_same_features(text_source, tmp_path):
    vectors_path = text_source[1]
    new = [{"key": "new-0", "text": "space2 space2 music99 the cooking5", "label": "x"},
           {"key": "new-1", "text": "space99 music1", "fields": {"k": 1}}]
    # A source of its own, since this one is changed.
    source = _text_index(tmp_path / "source", vectors_path)
    try:
        export_index(source, str(tmp_path / "source.jsonl"))
        rebuilt, _ = build_from_export(str(tmp_path / "rebuilt"), str(tmp_path / "source.jsonl"),
                                       source)
        with rebuilt:
            expected = text_measures(source, [d["text"] for d in new], vectors_path)
            add_documents(source, new, vectors_path)
            add_documents(rebuilt, new, vectors_path)
            # music99 is placed by its vector, on the same node in both.
            assert read_words(source.catalog) == read_words(rebuilt.catalog)
            assert "music99" in read_words(rebuilt.catalog)
            for key, (nodes, masses) in zip(["new-0", "new-1"], expected):
                doc = rebuilt.get(key)
                assert doc["nodes"].tolist() == nodes.tolist()
                assert np.array_equal(doc["masses"], masses / masses.sum())
                assert np.array_equal(doc["masses"], source.get(key)["masses"])
            for root in range(len(source.roots)):
                fa = source.features(["new-0", "new-1"], root=root)
                fb = rebuilt.features(["new-0", "new-1"], root=root)
                assert fa.nnz > 0 and (fa != fb).nnz == 0
            queries = text_measures(source, ["music99 space2", "cooking5"])
            ra, rb = source.search(queries, k=8), rebuilt.search(queries, k=8)
            assert ra.keys == rb.keys and np.array_equal(ra.distances, rb.distances)
    finally:
        source.close()


# ---------------------------------------------- plain and point indexes
def _measures(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        nodes = rng.integers(N_NODES, size=int(rng.integers(1, 7)))  # repeats allowed
        out.append((nodes.astype(np.int64), rng.random(len(nodes)) * 10.0 ** rng.integers(-5, 6)
                    + 1e-3))
    return out


@pytest.fixture(scope="module")
def plain_source(tmp_path_factory):
    """An index of plain measures (no text, no points) with unequal root
    weights, p = 2, keys the index chose, duplicates, deletions and a
    compaction; and its export."""
    directory = tmp_path_factory.mktemp("export-plain")
    rng = np.random.default_rng(5)
    graph = Graph.from_points(rng.normal(size=(N_NODES, 2)), n_nodes=N_NODES, edges="log",
                              seed=2)
    measures = _measures(50, 6)
    measures += [measures[3], measures[30]]  # duplicates: ties in search
    path = directory / "source"
    with SobolevIndex.create(path, graph, roots=3, eta=[1.0, 2.0, 4.0], p=2, seed=2,
                             on_violation="perturb") as index:
        auto = index.add(measures[:20], labels=["even" if i % 2 else None for i in range(20)])
        index.add(measures[20:], keys=[f"m{i}" for i in range(20, 52)],
                  fields=[{"i": i} for i in range(20, 52)])
        index.delete([auto[4], "m25"])
        index.compact()
        index.add([measures[0]], keys=["last"])  # a segment after the compaction
    live = [i for i in range(52) if i not in (4, 25)] + [0]
    out = directory / "source.jsonl"
    export_index(str(path), str(out))
    return directory, graph, measures, live, out


def test_plain_export_has_the_added_masses_bit_for_bit(plain_source):
    directory, _, measures, live, out = plain_source
    header, *records = _lines(out)
    assert header["kind"] is None and header["words"] is None and header["p"] == 2.0
    assert header["eta"] == (np.array([1.0, 2.0, 4.0]) / 7.0).tolist()
    assert len(records) == len(live) == header["documents"]
    for record, i in zip(records, live):
        nodes, masses = measures[i]
        assert record["nodes"] == nodes.tolist()
        assert np.array_equal(np.array(record["masses"], dtype=np.float64), masses)
        assert "text" not in record


def test_plain_round_trip_is_the_same_index_and_breaks_ties_alike(plain_source, tmp_path):
    directory, graph, measures, live, out = plain_source
    index, _ = build_from_export(str(tmp_path / "rebuilt"), str(out), str(directory / "source"))
    queries = [measures[3], measures[30], measures[7], measures[0]]
    with index, SobolevIndex.open(directory / "source") as source:
        _assert_same_index(source, index, queries)
        # Duplicates are at distance 0 from the query: the earlier one comes
        # first in both.
        found = index.search([measures[3]], k=2)
        assert found.distances[0].tolist() == [0.0, 0.0]
        assert found.keys[0] == [k for k in index.keys_in_order() if k in found.keys[0]]
        # Distances are S_p from the paper's formula (reference.py).
        keys = index.keys_in_order()
        trees = [ref_tree(graph.n_nodes, graph.edges, graph.lengths, r)
                 for r in index.roots.tolist()]
        # The reference trees are the unperturbed ones; compare where the
        # index's trees are too.
        if not any(t.perturbed for t in index.trees):
            expected = ref_pairwise([measures[7]], [measures[i] for i in live], trees, 2,
                                    eta=index.eta)
            got = index.search([measures[7]], k=len(keys))
            by_key = dict(zip(got.keys[0], got.distances[0]))
            np.testing.assert_allclose([by_key[k] for k in keys], expected[0], rtol=1e-9,
                                       atol=1e-12)


@pytest.fixture(scope="module")
def point_source(tmp_path_factory):
    directory = tmp_path_factory.mktemp("export-points")
    rng = np.random.default_rng(8)
    sets = [PointSet(f"p{i}", rng.normal(size=(6, 3)) + 5.0 * (i % 3),
                     weights=rng.random(6) + 0.1, label=f"c{i % 3}", fields={"i": i})
            for i in range(30)]
    index, _ = build_point_index(str(directory / "source"), sets, nodes=20, roots=2, seed=4)
    index.close()
    out = directory / "source.jsonl"
    export_index(str(directory / "source"), str(out))
    return directory, sets, out


def test_point_round_trip_is_the_same_index(point_source, tmp_path):
    directory, sets, out = point_source
    header = read_export_header(out)
    assert header["kind"] == "clouds" and header["meta"]["points"]["dim"] == 3
    index, report = build_from_export(str(tmp_path / "rebuilt"), str(out),
                                      str(directory / "source"))
    with index, SobolevIndex.open(directory / "source") as source:
        queries = point_measures(source, sets[:4])
        _assert_same_index(source, index, queries)
        assert index.catalog.meta_value("points") == source.catalog.meta_value("points")
        # Later point sets are read as the source reads them.
        assert [q[0].tolist() for q in point_measures(index, sets[:4])] == \
            [q[0].tolist() for q in queries]
    assert report["kind"] == "clouds" and report["words"] is None


@pytest.mark.parametrize("roots, eta", [(7, None), (4, [28.0, 81.0, 67.0, 1.0])])
def test_root_weights_come_back_bit_for_bit(tmp_path, roots, eta):
    # Seven equal weights, and these four once normalised, change in their
    # last bits when divided by their sum again: create() must keep weights
    # that already sum to 1 as they are for a rebuild to reproduce them.
    stored = np.full(roots, 1.0 / roots) if eta is None else np.array(eta) / sum(eta)
    assert not np.array_equal(stored / stored.sum(), stored)
    graph = Graph.from_points(np.random.default_rng(2).normal(size=(N_NODES, 2)),
                              n_nodes=N_NODES, edges="log", seed=0)
    with SobolevIndex.create(tmp_path / "source", graph, roots=roots, eta=eta,
                             on_violation="perturb") as index:
        index.add(_measures(12, 1))
        assert index.eta.tolist() == stored.tolist()
    export_index(str(tmp_path / "source"), str(tmp_path / "e.jsonl"))
    rebuilt, _ = build_from_export(str(tmp_path / "again"), str(tmp_path / "e.jsonl"),
                                   str(tmp_path / "source"))
    with rebuilt, SobolevIndex.open(tmp_path / "source") as source:
        assert rebuilt.eta.tolist() == stored.tolist()
        _assert_same_index(source, rebuilt, _measures(3, 9))


def test_an_empty_index_round_trips(tmp_path):
    graph = Graph.from_points(np.random.default_rng(1).normal(size=(10, 2)), n_nodes=10,
                              edges="log", seed=0)
    SobolevIndex.create(tmp_path / "empty", graph, p="inf").close()
    report = export_index(str(tmp_path / "empty"), str(tmp_path / "e.jsonl"))
    assert report["documents"] == 0
    index, _ = build_from_export(str(tmp_path / "again"), str(tmp_path / "e.jsonl"),
                                 str(tmp_path / "empty"))
    with index:
        assert len(index) == 0 and index.p == np.inf


def test_a_reader_exports_its_snapshot(tmp_path):
    graph = Graph.from_points(np.random.default_rng(3).normal(size=(N_NODES, 2)),
                              n_nodes=N_NODES, edges="log", seed=0)
    measures = _measures(10, 4)
    with SobolevIndex.create(tmp_path / "ix", graph, roots=2) as writer:
        writer.add(measures[:8], keys=[f"k{i}" for i in range(8)])
        with SobolevIndex.open(tmp_path / "ix") as reader:
            # Committed after the reader opened: not in its export.
            writer.add(measures[8:], keys=["k8", "k9"])
            writer.delete(["k2"])
            export_index(reader, str(tmp_path / "snapshot.jsonl"))
        export_index(writer, str(tmp_path / "latest.jsonl"))
    header, *records = _lines(tmp_path / "snapshot.jsonl")
    assert header["documents"] == 8 and [r["key"] for r in records] == [f"k{i}" for i in range(8)]
    assert [r["masses"] for r in records] == [m.tolist() for _, m in measures[:8]]
    header, *records = _lines(tmp_path / "latest.jsonl")
    assert [r["key"] for r in records] == ["k0", "k1"] + [f"k{i}" for i in range(3, 10)]


# ------------------------------------------------------------ bad input
def test_export_refuses_an_existing_output_or_a_missing_folder(plain_source, tmp_path):
    directory = plain_source[0]
    existing = tmp_path / "there.jsonl"
    existing.write_text("keep me")
    with pytest.raises(ValueError, match="exists; choose a new file name"):
        export_index(str(directory / "source"), str(existing))
    assert existing.read_text() == "keep me"
    with pytest.raises(ValueError, match="folder .* does not exist"):
        export_index(str(directory / "source"), str(tmp_path / "nowhere" / "x.jsonl"))
    assert sorted(os.listdir(tmp_path)) == ["there.jsonl"]


def test_a_failed_export_leaves_nothing(plain_source, tmp_path, monkeypatch):
    from sobolev_index.ingest import export as module

    directory = plain_source[0]
    real, calls = module._record, []

    def fail_later(*args):
        calls.append(1)
        if len(calls) == 10:
            raise OSError(28, "No space left on device")
        return real(*args)

    monkeypatch.setattr(module, "_record", fail_later)
    with pytest.raises(OSError):
        export_index(str(directory / "source"), str(tmp_path / "x.jsonl"))
    assert os.listdir(tmp_path) == []


def _refused(tmp_path, export_file, graph_from, match, error=ValueError):
    """build_from_export refuses with ``match`` and leaves no index."""
    target = tmp_path / "target"
    with pytest.raises(error, match=match):
        build_from_export(str(target), str(export_file), str(graph_from))
    assert not target.exists()


def _edit(i, drop=(), **changes):
    """An edit of the export's lines: line i (0 is the header) parsed,
    ``drop`` names removed, ``changes`` set, written back."""
    def edit(lines):
        value = json.loads(lines[i])
        for name in drop:
            value.pop(name)
        value.update(changes)
        lines[i] = json.dumps(value)
    return edit


def _prepend(i, node, mass):
    """An edit that puts (node, mass) first in the measure of line i."""
    def edit(lines):
        value = json.loads(lines[i])
        value["nodes"].insert(0, node)
        if mass is not None:
            value["masses"].insert(0, mass)
        lines[i] = json.dumps(value)
    return edit


def _rename(i, old, new):
    def edit(lines):
        value = json.loads(lines[i])
        value[new] = value.pop(old)
        lines[i] = json.dumps(value)
    return edit


@pytest.mark.parametrize("edit, match", [
    (lambda lines: lines.__setitem__(2, "{not json"), r"line 3 is not JSON"),
    (lambda lines: lines.__setitem__(2, "[1, 2]"), r"line 3 is a JSON list; expected an object"),
    (_edit(0, format="other"), r"line 1 is not a sobolev-index export header"),
    (_edit(0, format_version=2), r"line 1: the export has format version 2, written by a newer"),
    (_edit(0, drop=["roots"]), r"line 1: the header has no 'roots'"),
    (_edit(0, eta=[1.0]), r"line 1: 'eta' is \[1.0\]; expected one number per root \(3\)"),
    (_edit(0, words=[]), r"line 1: 'words' is given, but the export is of a plain measures"),
    (_prepend(4, 0, -1.0), r"line 5 \(key .*\) has mass -1.0 at node 0; masses must be >= 0"),
    (_prepend(4, 0, None), r"line 5: 'masses' is .* expected one number per node"),
    (_prepend(4, N_NODES, 1.0),
     rf"line 5 \(key .*\) has node {N_NODES}, but the graph's nodes are 0..{N_NODES - 1}"),
    (_edit(4, nodes=[], masses=[]), r"line 5: 'nodes' is \[\]; expected a non-empty list"),
    (_edit(4, nodes=[0], masses=[10 ** 400]), r"line 5: 'masses' is .* within float64's range"),
    (_edit(4, nodes=[2 ** 70], masses=[1.0]), r"line 5: 'nodes' is .* expected a non-empty list"),
    (_rename(3, "key", "kee"), r"line 4 has 'kee'; expected only"),
    (lambda lines: lines.__setitem__(6, lines[5]),
     r"line 7: key .* appears twice \(first on line 6\)"),
    (_edit(5, label=3), r"line 6: 'label' is 3; expected a string or null"),
    (_edit(5, fields=[1]), r"line 6: 'fields' is \[1\]; expected an object or null"),
    (_edit(5, text="words"), r"line 6 has 'text', but the export is of a plain measures index"),
    (lambda lines: lines.pop(), r"holds 50 documents, but its header says 51"),
    (lambda lines: lines.append(lines[-1].replace('"key":"last"', '"key":"more"')),
     r"holds 52 documents, but its header says 51"),
    (lambda lines: lines.clear(), r"line 1 is empty"),
])
def test_a_malformed_export_is_refused_naming_the_line(plain_source, tmp_path, edit, match):
    directory, _, _, _, out = plain_source
    with open(out, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    edit(lines)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    _refused(tmp_path, bad, directory / "source", match)


def test_an_export_that_is_not_utf8_or_missing_is_refused(plain_source, tmp_path):
    directory, _, _, _, out = plain_source
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(out.read_bytes().replace(b'"key":"m21"', b'"key":"m\xff21"'))
    _refused(tmp_path, bad, directory / "source", "is not UTF-8 text")
    _refused(tmp_path, tmp_path / "missing.jsonl", directory / "source", "does not exist")
    _refused(tmp_path, tmp_path, directory / "source", "is a directory")


def test_another_graph_or_other_roots_eta_p_are_refused(plain_source, text_source, tmp_path):
    directory, graph, _, _, out = plain_source
    # A graph of another size, and one of the same size but other edges.
    _refused(tmp_path, out, text_source[0] / "source",
             r"has a graph of 36 nodes, but the export .* was made on one of 30")
    other = Graph.from_points(np.random.default_rng(99).normal(size=(N_NODES, 2)),
                              n_nodes=N_NODES, edges="log", seed=2)
    SobolevIndex.create(tmp_path / "other", other, roots=3, p=2, on_violation="perturb").close()
    _refused(tmp_path, out, tmp_path / "other", r"has another graph than the export")
    # The same graph and roots (so the same graph file) but another p, or
    # other root weights.
    with SobolevIndex.open(directory / "source") as source:
        roots = source.roots.tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SobolevIndex.create(tmp_path / "p1", graph, roots=roots, eta=[1.0, 2.0, 4.0], p=1,
                            on_violation="perturb", seed=2).close()
        SobolevIndex.create(tmp_path / "eta", graph, roots=roots, p=2,
                            on_violation="perturb", seed=2).close()
    assert _graph_checksum(tmp_path / "p1") == _graph_checksum(directory / "source")
    _refused(tmp_path, out, tmp_path / "p1", r"has p 1.0, but the export .* was made with 2.0")
    _refused(tmp_path, out, tmp_path / "eta", r"has eta \[.*\], but the export")


def test_trees_whose_ties_were_broken_with_any_seed_come_back(tmp_path):
    # A square of unit edges: two shortest paths to the opposite corner, a
    # tie that the tree breaks by perturbing the lengths from the seed the
    # index was created with, which the index does not record.
    graph = Graph.from_edges(4, np.array([[0, 1], [1, 2], [2, 3], [3, 0]]), np.ones(4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, seed in (("seed0", 0), ("seed5", 5)):
            with SobolevIndex.create(tmp_path / name, graph, roots=[0], seed=seed,
                                     on_violation="perturb") as index:
                index.add([([2], [1.0]), ([1, 3], [1.0, 2.0])], keys=["a", "b"])
            export_index(str(tmp_path / name), str(tmp_path / f"{name}.jsonl"))
    assert _graph_checksum(tmp_path / "seed5") != _graph_checksum(tmp_path / "seed0")
    for name in ("seed0", "seed5"):
        rebuilt, _ = build_from_export(str(tmp_path / f"again-{name}"),
                                       str(tmp_path / f"{name}.jsonl"), str(tmp_path / name))
        rebuilt.close()
        assert _graph_checksum(tmp_path / f"again-{name}") == _graph_checksum(tmp_path / name)
        with SobolevIndex.open(tmp_path / name) as source, \
                SobolevIndex.open(tmp_path / f"again-{name}") as again:
            _assert_same_index(source, again, [([2], [1.0]), ([0, 1], [1.0, 1.0])])


def test_an_existing_target_is_refused_and_left_alone(plain_source, tmp_path):
    directory, _, _, _, out = plain_source
    target = tmp_path / "target"
    target.mkdir()
    (target / "file").write_text("mine")
    before = snapshot(target)
    with pytest.raises(FileExistsError, match="exists and is not an empty directory"):
        build_from_export(str(target), str(out), str(directory / "source"))
    assert_unchanged(before, target, "target")


# -------------------------------------------------------------------- CLI
def test_export_command_table_and_json(text_source, tmp_path):
    directory = text_source[0]
    result = run("export", directory / "source", tmp_path / "a.jsonl")
    assert result.stdout.startswith("exported 61 documents and 37 words to ")
    out = json.loads(run("export", directory / "source", tmp_path / "b.jsonl", "--json",
                         "--silent").stdout)
    assert out["documents"] == 61 and out["words"] == 37 and out["kind"] == "text"
    assert out["bytes"] == os.path.getsize(tmp_path / "b.jsonl")
    assert out["output"] == str(tmp_path / "b.jsonl")
    assert _lines(tmp_path / "a.jsonl")[1:] == _lines(tmp_path / "b.jsonl")[1:]
    again = run("export", directory / "source", tmp_path / "b.jsonl", ok=False)
    assert again.exit_code == 1
    assert again.output.startswith("Error: output ") and "exists" in again.output
    assert len(again.output.strip().splitlines()) == 1
    missing = run("export", tmp_path / "nothing", tmp_path / "c.jsonl", ok=False)
    assert missing.exit_code == 1 and "does not exist" in missing.output
    assert not (tmp_path / "c.jsonl").exists()


# These need `build --from-export FILE --graph-from INDEX`, which the build
# command in cli/__init__.py passes to cli.export.build_from_export_cli.
def test_build_from_export_command_rebuilds_the_same_index(text_source, tmp_path):
    directory, _, out, _ = text_source
    result = json.loads(run("build", tmp_path / "rebuilt", "--from-export", out,
                            "--graph-from", directory / "source", "--json").stdout)
    assert result["documents"] == 61 and result["words"] == 37 and result["kind"] == "text"
    queries = ["space1 music3", "cooking2 the"]
    args = [a for q in queries for a in ("--text", q)]
    a = json.loads(run("search", directory / "source", *args, "-k", 10, "--json").stdout)
    b = json.loads(run("search", tmp_path / "rebuilt", *args, "-k", 10, "--json").stdout)
    assert a == b and len(a[0]) == 10


def test_build_from_export_command_refuses_other_build_options(text_source, tmp_path):
    directory, _, out, _ = text_source
    result = run("build", tmp_path / "x", "--from-export", out, "--graph-from",
                 directory / "source", "--recipe", "fast", "--nodes", 5, ok=False)
    assert result.exit_code == 2 and "--recipe" in result.output and "--nodes" in result.output
    result = run("build", tmp_path / "x", "--from-export", out, ok=False)
    assert result.exit_code == 2 and "--graph-from" in result.output
    result = run("build", tmp_path / "x", "--from-export", out, "--graph-from",
                 tmp_path / "nothing", ok=False)
    assert result.exit_code == 1 and result.output.startswith("Error: ")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10", True])
def test_a_bad_batch_size_is_refused_before_anything_is_written(plain_source, tmp_path, bad):
    directory, _, _, _, out = plain_source
    target = tmp_path / "target"
    with pytest.raises(ValueError, match=f"batch_size is {bad!r}; expected an integer >= 1"):
        build_from_export(str(target), str(out), str(directory / "source"), batch_size=bad)
    assert not target.exists()
