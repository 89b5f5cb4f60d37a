"""The CLI on point clouds and persistence diagrams (build --points)."""
import json

import numpy as np
from _support.cli import run
from _support.index import assert_unchanged, snapshot

from sobolev_index import SobolevIndex
from sobolev_index.ingest.pointindex import point_measures, read_pointsets


def write_clouds(path, keys, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for i, key in enumerate(keys):
            centre = 6.0 * (i % 3)
            handle.write(json.dumps({"key": key, "points": (rng.normal(size=(8, 3)) + centre).tolist(),
                                     "label": f"c{i % 3}"}) + "\n")


def test_point_clouds_build_add_search(tmp_path):
    clouds = tmp_path / "clouds.jsonl"
    write_clouds(clouds, [f"p{i}" for i in range(24)], seed=0)
    index = tmp_path / "ix"
    report = json.loads(run("build", index, "--points", clouds, "--nodes", 15, "--json").stdout)
    assert report["documents"] == 24 and report["points"] == 24 * 8 and report["dim"] == 3
    assert report["kind"] == "clouds"

    more = tmp_path / "more.jsonl"
    write_clouds(more, ["q0", "q1", "q2"], seed=1)
    out = json.loads(run("add", index, more, "--json").stdout)
    assert out["added"] == 3 and out["documents"] == 27

    hits = json.loads(run("search", index, "--file", more, "-k", 4, "--json").stdout)
    with SobolevIndex.open(index) as reader:
        expected = reader.search(point_measures(reader, read_pointsets([str(more)])), k=4)
    assert [[h["key"] for h in q] for q in hits] == expected.keys
    # A query that is also stored finds itself, and the cluster's label.
    assert [q[0]["key"] for q in hits] == ["q0", "q1", "q2"]
    assert [{h["label"] for h in q} for q in hits] == [{"c0"}, {"c1"}, {"c2"}]

    result = run("search", index, "--text", "words", ok=False)
    assert result.exit_code == 1 and "not built from text" in result.output


def test_persistence_diagrams_from_labelled_folders(tmp_path):
    rng = np.random.default_rng(3)
    for label, scale in (("small", 1.0), ("large", 8.0)):
        folder = tmp_path / "diagrams" / label
        folder.mkdir(parents=True)
        for i in range(5):
            birth = rng.random(6) * scale
            rows = np.column_stack([birth, birth + rng.random(6) * scale + 0.1])
            np.savetxt(folder / f"{label}{i}.csv", rows, delimiter=",", header="birth,death",
                       comments="")
    index = tmp_path / "ix"
    report = json.loads(run("build", index, "--points", tmp_path / "diagrams", "--diagrams",
                            "--nodes", 12, "--json").stdout)
    assert report["documents"] == 10 and report["dim"] == 2 and report["kind"] == "diagrams"
    hits = json.loads(run("search", index, "--key", "large2", "-k", 3, "--json").stdout)[0]
    assert hits[0]["key"] == "large2" and hits[0]["label"] == "large"


def test_build_needs_one_kind_of_input(tmp_path):
    clouds = tmp_path / "c.jsonl"
    write_clouds(clouds, ["a", "b"], seed=0)
    result = run("build", tmp_path / "ix", ok=False)
    assert result.exit_code == 2 and "build needs --corpus FILE" in result.output \
        and "--points FILE" in result.output
    result = run("build", tmp_path / "ix", "--points", clouds, "--corpus", clouds, ok=False)
    assert result.exit_code == 2 and "either" in result.output
    assert not (tmp_path / "ix").exists()


def test_bad_point_cloud_is_refused_with_its_line(tmp_path):
    clouds = tmp_path / "c.jsonl"
    write_clouds(clouds, ["a", "b"], seed=0)
    with open(clouds, "a", encoding="utf-8") as handle:
        handle.write('{"key": "c", "points": [[1, 2]]}\n')  # 2-d among 3-d clouds
    result = run("build", tmp_path / "ix", "--points", clouds, ok=False)
    assert result.exit_code == 1 and "line 3" in result.output
    assert not (tmp_path / "ix").exists()


def test_later_diagrams_are_weighted_as_the_build_was(tmp_path):
    # An index built with persistence weights must read added and query
    # diagrams with persistence weights too, or they are not comparable.
    rng = np.random.default_rng(5)
    built = tmp_path / "built"
    built.mkdir()
    for i in range(6):
        birth = rng.random(5)
        np.savetxt(built / f"d{i}.csv", np.column_stack([birth, birth + rng.random(5) + 0.05]),
                   delimiter=",")
    later = tmp_path / "later.csv"
    # Very unequal persistences, so uniform and persistence weights differ a lot.
    np.savetxt(later, np.array([[0.0, 0.01], [0.2, 3.0], [0.5, 0.52]]), delimiter=",")
    index = tmp_path / "ix"
    run("build", index, "--points", built, "--diagrams", "--diagram-weights", "persistence",
        "--nodes", 8)
    run("add", index, later)
    expected = read_pointsets([str(later)], "diagrams", "persistence")
    uniform = read_pointsets([str(later)], "diagrams", "uniform")
    with SobolevIndex.open(index) as reader:
        stored = reader.get("later")
        want = point_measures(reader, expected)[0]
        not_want = point_measures(reader, uniform)[0]
        hits = json.loads(run("search", index, "--file", later, "-k", 1, "--json").stdout)[0]
    np.testing.assert_allclose(stored["masses"], want[1] / want[1].sum())
    # Independently of the reader: with persistence weights the point (0.2, 3.0)
    # carries 2.8 / 2.83 of the mass, so some node holds at least that much;
    # uniform weights would give at most 1/3 unless all points share a node.
    assert stored["masses"].max() >= 2.8 / 2.83 - 1e-12
    assert not np.allclose(np.sort(want[1] / want[1].sum()), np.sort(not_want[1] / not_want[1].sum()))
    # The query read with the stored weighting is the stored diagram itself.
    assert hits[0]["key"] == "later" and hits[0]["distance"] == 0.0


def test_measure_that_cannot_be_normalised_is_refused_by_build_and_add(tmp_path):
    # Weights summing to a subnormal number: 1 / total is inf, and the
    # measure's features would poison every search of the index.
    good = tmp_path / "good.jsonl"
    write_clouds(good, ["a", "b", "c"], seed=0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"key": "tiny", "points": [[0, 0, 0], [1, 1, 1]],
                               "weights": [1e-320, 1e-320]}) + "\n")
    both = tmp_path / "both.jsonl"
    both.write_text(good.read_text() + bad.read_text())

    result = run("build", tmp_path / "never", "--points", both, "--nodes", 4, ok=False)
    assert result.exit_code == 1
    # The reader refuses it, naming the line (not with the hint about words
    # that a measure error of a text index gets).
    assert "both.jsonl line 4: 'weights' add up to" in result.output
    assert "e-320, below 1e-300" in result.output and "words the index knows" not in result.output
    assert not (tmp_path / "never").exists()

    index = tmp_path / "ix"
    run("build", index, "--points", good, "--nodes", 4)
    before = snapshot(str(index))
    result = run("add", index, bad, ok=False)
    assert result.exit_code == 1 and "e-320, below 1e-300" in result.output
    assert_unchanged(before, str(index), "add of a measure that cannot be normalised")


def test_nan_fields_in_a_later_point_set_stop_the_add_before_any_batch(tmp_path):
    good = tmp_path / "good.jsonl"
    write_clouds(good, ["a", "b", "c"], seed=0)
    index = tmp_path / "ix"
    run("build", index, "--points", good, "--nodes", 4)
    more = tmp_path / "more.jsonl"
    write_clouds(more, ["m0", "m1", "m2"], seed=1)
    lines = more.read_text().splitlines()
    lines[2] = lines[2][:-1] + ', "score": NaN}'
    more.write_text("\n".join(lines) + "\n")
    before = snapshot(str(index))
    result = run("add", index, more, "--batch-size", 1, ok=False)
    assert result.exit_code == 1 and "m2" in result.output and "JSON" in result.output
    assert_unchanged(before, str(index), "point add with NaN in a later set's fields")


def test_a_bad_points_file_gets_the_points_hint(tmp_path):
    # The corpus hint (--format, --skip-empty, words) does not fit a points file.
    from click.testing import CliRunner

    from sobolev_index.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"points": [[0, 1], [2]]}\n')
    result = CliRunner().invoke(main, ["build", str(tmp_path / "ix"), "--points", str(bad)])
    assert result.exit_code == 1
    assert "bad.jsonl" in result.output and "hint: check the points file" in result.output
    assert "--skip-empty" not in result.output and not (tmp_path / "ix").exists()
