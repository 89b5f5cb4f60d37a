"""A segment whose stored arrays are malformed must raise CorruptIndexError,
never reach a compiled loop (which trusts its inputs) and crash: whichever
operation reads them first (a search for finite p or p = inf, a search by
key, a distance matrix between stored keys, a merge), and verify() must
report a damaged measure rather than raise."""
import os
import sqlite3

import h5py
import numpy as np
import pytest
from _support.processes import run_python

from sobolev_index import Graph, SobolevIndex
from sobolev_index.index.storage import file_checksum

# Each operation opens the index in a child process and runs one call.
OPERATIONS = {
    "search p=1": "r = SobolevIndex.open(PATH).search([([1, 2], None)], k=3); "
                  "print(r.keys, r.distances.tolist())",
    # Every stored document as a query: reads every posting list and every
    # stored measure.
    "search p=1, all": "ix = SobolevIndex.open(PATH); ix.search(list(ix), k=3)",
    "search p=inf": "r = SobolevIndex.open(PATH).search([([1, 2], None)], k=3, p='inf'); "
                    "print(r.keys, r.distances.tolist())",
    "search by key": "SobolevIndex.open(PATH).search('k0', k=3, p=2)",
    "gram": "SobolevIndex.open(PATH).gram(keys=['k0', 'k3', 'k5'], p=1)",
    "compact": "SobolevIndex.open(PATH, 'a').compact()",
}


def _in_child(path, call, tmp_path):
    """Run ``call`` (Python, with PATH bound to the index) in a child, so
    that a crash cannot take the test run with it; exit status 3 and a
    'corrupt:' line when it raised CorruptIndexError."""
    script = (
        "import sys\n"
        "from sobolev_index import SobolevIndex, CorruptIndexError\n"
        f"PATH = {str(path)!r}\n"
        "try:\n"
        f"    {call}\n"
        "except CorruptIndexError as exc:\n"
        "    print('corrupt:', exc); sys.exit(3)\n"
    )
    return run_python(script, cwd=str(tmp_path))


# A search checks the supports of the measures it rebuilds (its candidates)
# only: it stops at a damaged one, or gives the undamaged index's answer.
READS_CANDIDATES_ONLY = {"search p=1", "search p=inf"}


def _damaged_index(tmp_path, dataset, value, reseal=False, at=3):
    rng = np.random.default_rng(0)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=50, seed=0)
    path = tmp_path / "idx"
    with SobolevIndex.create(path, graph) as index:
        # Two segments, so that compact() has something to merge.
        for start in (0, 10):
            index.add([(rng.choice(50, 5), None) for _ in range(10)],
                      keys=[f"k{i}" for i in range(start, start + 10)])
    if dataset is None:
        return path
    segment = os.path.join(path, "segments", sorted(os.listdir(path / "segments"))[0])
    with h5py.File(segment, "r+") as f:
        # (Row norms are per root and row: the first root's.)
        f[dataset][(0,) * (f[dataset].ndim - 1) + (at,)] = value
    if reseal:
        _reseal(path, segment)
    return path


def _reseal(path, segment):
    """Record a damaged file's checksum, as if it had been written so:
    verify() then goes on to read what the file holds."""
    db = sqlite3.connect(path / "catalog.sqlite")
    db.execute("UPDATE segments SET checksum = ? WHERE file = ?",
               (file_checksum(segment), os.path.basename(segment)))
    db.commit()
    db.close()


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
# Every operation rebuilds features from the stored measures (exact values
# of search candidates included), so every operation must stop at these;
# a search that rebuilds no damaged row may instead give the undamaged
# answer.
@pytest.mark.parametrize("dataset,value", [
    ("measures/nodes", 2_000_000_000),
    ("measures/nodes", -5),
    ("measures/indptr", 10**9),
    ("measures/row_scale", 0.0),
    ("measures/row_scale", np.nan),
])
@pytest.mark.slow
def test_malformed_measure_arrays_raise(tmp_path, dataset, value, operation):
    path = _damaged_index(tmp_path, dataset, value)
    done = _in_child(path, OPERATIONS[operation], tmp_path)
    if dataset == "measures/nodes" and operation in READS_CANDIDATES_ONLY \
            and done.returncode == 0:
        clean = _in_child(_damaged_index(tmp_path / "clean", None, None),
                          OPERATIONS[operation], tmp_path)
        assert clean.returncode == 0 and done.stdout == clean.stdout, (done, clean)
        return
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "segment" in done.stdout


def test_verify_reports_measure_pointers_past_the_nodes(tmp_path):
    # The last row pointer past the end of the nodes: the rows before it
    # look fine, and the sampled rows include the last one.
    path = _damaged_index(tmp_path, "measures/indptr", 10**6, reseal=True, at=-1)
    with SobolevIndex.open(path) as index:
        report = index.verify()
    assert not report["ok"]
    assert any("invalid measure" in problem for problem in report["problems"]), report


# Values that pass every structural check but are impossible for what they
# hold (edge masses of probability measures lie in [0, 1]), with the
# checksum updated as if the file had been written so. Searches and merges
# used to give wrong distances (or a raw IndexError/ValueError); verify()
# said ok for the posting values.
@pytest.mark.parametrize("dataset,value,operations", [
    ("measures/masses", np.nan, ["search p=1, all", "search by key", "gram", "compact"]),
    ("measures/masses", -1.0, ["search p=1, all", "search by key", "gram", "compact"]),
    ("measures/row_scale", -1.0, ["search p=1", "search by key", "gram", "compact"]),
    ("inverted/post_values", 7.5, ["search p=1, all"]),
    ("inverted/post_values", np.nan, ["search p=1, all"]),
    ("inverted/norm_low", np.nan, ["search p=1"]),
    ("measures/indptr", 10**6, ["compact"]),
    ("measures/nodes", 10**6, ["compact"]),
])
@pytest.mark.slow
def test_impossible_values_are_corruption(tmp_path, dataset, value, operations):
    path = _damaged_index(tmp_path, dataset, value, reseal=True, at=4)
    for operation in operations:
        done = _in_child(path, OPERATIONS[operation], tmp_path)
        assert done.returncode == 3, (operation, done.returncode, done.stdout, done.stderr)
    report = SobolevIndex.verify_path(path)
    assert not report["ok"]
    assert any("segment" in problem for problem in report["problems"]), report["problems"]


# Plausible values (in range, right shape) that are wrong: a search cannot
# tell, so verify() compares the inverted file with features rebuilt from
# the measures, and the stored row norms with those of the features.
@pytest.mark.parametrize("dataset,value", [
    ("inverted/post_values", 0.5),
    ("inverted/post_rows", 9),
    ("inverted/norm_low", 0.123),
    ("inverted/norm_high", 0.25),
    ("measures/row_scale", 7.5),
])
def test_verify_finds_plausible_but_wrong_inverted_values(tmp_path, dataset, value):
    path = _damaged_index(tmp_path, dataset, value, reseal=True, at=4)
    report = SobolevIndex.verify_path(path, sample=1000)
    assert not report["ok"]
    assert any("inverted file" in problem or "row norm" in problem
               or "normalising factor" in problem
               for problem in report["problems"]), report["problems"]
    # The undamaged index passes the same checks.
    clean = _damaged_index(tmp_path / "clean", "doc_ids", 1, reseal=True, at=0)
    assert SobolevIndex.verify_path(clean, sample=1000)["ok"]


# The same with dense columns and a table of range starts (small
# thresholds), and a sample of 3 rows of 120: the norms, factors and counts
# are checked for every row, the postings and dense values for the sample.
@pytest.mark.parametrize("dataset,row,sample", [
    ("inverted/dense", 40, 1000),
    ("inverted/post_values", None, 1000),
    ("inverted/norm_low", 77, 3),
    ("inverted/norm_high", 91, 3),
    ("inverted/norm_group", 1, 3),
    ("inverted/norm_coarse", 50, 3),
    ("measures/row_scale", 63, 3),
])
def test_verify_checks_every_row_where_it_is_cheap(tmp_path, monkeypatch, dataset, row, sample):
    import sobolev_index.index.inverted as inverted_module

    for name, value in dict(DENSE_MIN_ROWS=16, DENSE_MIN_FRACTION=0.3, RANGE_BLOCK_ROWS=32).items():
        monkeypatch.setattr(inverted_module, name, value)
    rng = np.random.default_rng(4)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=50, seed=0)
    path = tmp_path / "idx"
    with SobolevIndex.create(path, graph, p=2) as index:
        index.add([(rng.choice(50, 6), rng.random(6) + 0.1) for _ in range(120)])
    assert SobolevIndex.verify_path(path, sample=sample)["ok"]
    segment = os.path.join(path, "segments", os.listdir(path / "segments")[0])
    with h5py.File(segment, "r+") as f:
        data = f[dataset]
        assert data.size, dataset
        if dataset == "inverted/dense":
            assert f["inverted/block_start"].shape[1] == 5  # 4 ranges of 32 rows
            data[row, 0] = data[row, 0] * 0.5 + 0.25
        elif dataset == "inverted/post_values":
            data[data.shape[0] // 2] = data[data.shape[0] // 2] * 0.5 + 0.125
        elif data.ndim == 2:
            data[0, row] = data[0, row] * 1.5 + 0.01
        else:
            data[row] = data[row] * 1.5
    _reseal(path, segment)
    report = SobolevIndex.verify_path(path, sample=sample)
    assert not report["ok"]
    assert any(word in problem for problem in report["problems"]
               for word in ("inverted file", "row norm", "normalising factor")), report["problems"]


def test_a_merge_refuses_a_segment_that_disagrees_with_the_catalog(tmp_path):
    # A merge rewrites the catalog's rows by the document ids the segment
    # holds: ids that the catalog does not list at those rows must stop it
    # before anything is written (the catalog kept a tombstone pointing at
    # the merged-away segment, and the next open failed).
    from _support.index import assert_unchanged, snapshot

    path = _damaged_index(tmp_path, "doc_ids", 999, reseal=True, at=2)
    # (A writer's open and close folds in the log the checksum update left.)
    SobolevIndex.open(path, "a").close()
    before = snapshot(str(path))
    done = _in_child(path, OPERATIONS["compact"], tmp_path)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "does not hold the documents the catalog lists" in done.stdout
    assert_unchanged(before, str(path), "a refused merge")
