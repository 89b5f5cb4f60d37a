"""Every command of the ``sobolev-index`` CLI through click's CliRunner, on a
small synthetic text corpus (tests/_support/corpus.py)."""
import json
import os
import shutil

import h5py
import numpy as np
import pytest
from _support import corpus as tc
from _support.cli import run
from _support.index import assert_unchanged, snapshot

from sobolev_index import SobolevIndex, __version__
from sobolev_index.ingest.documents import text_measures


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A built index (not to be modified: copy it first)."""
    directory = tmp_path_factory.mktemp("cli")
    corpus_path, vectors_path = tc.make_files(str(directory))
    index = directory / "index"
    result = run("build", index, "--corpus", corpus_path, "--vectors", vectors_path,
                 "--nodes", 12, "--roots", 2, "--json", "--silent")
    return index, corpus_path, vectors_path, json.loads(result.stdout)


@pytest.fixture
def writable(built, tmp_path):
    index, corpus_path, vectors_path, _ = built
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    return copy, corpus_path, vectors_path


def test_version_and_help_list_every_command():
    assert __version__ in run("--version").output
    out = run("--help").output
    from sobolev_index.cli import main

    expected = {"build", "add", "search", "get", "delete", "compact", "verify", "upgrade", "info",
                "distance", "gram", "knn-graph", "duplicates", "explain", "export", "sql",
                "quickstart", "serve", "shard", "vectors", "recover"}
    assert set(main.commands) == expected
    for command in expected:
        assert command in out


def test_build_reports_and_info_agree(built):
    index, _, _, report = built
    assert report["documents"] == 60 and report["skipped"] == 0
    assert report["nodes"] == 12 and len(report["roots"]) == 2
    info = json.loads(run("info", index, "--json").stdout)
    for name in ("documents", "deleted", "segments", "nodes", "edges", "roots", "bytes"):
        assert name in info
    assert info["documents"] == 60 and info["deleted"] == 0
    assert info["nodes"] == 12 and info["roots"] == report["roots"]
    assert info["bytes"] == sum(os.path.getsize(os.path.join(d, f))
                                for d, _, files in os.walk(index) for f in files)
    table = run("info", index).stdout
    assert "documents" in table and "60" in table


def test_search_json_shape_and_agreement_with_the_api(built):
    index, _, _, _ = built
    out = json.loads(run("search", index, "--text", "space1 space2", "--text", "music3",
                         "-k", 4, "--json").stdout)
    assert len(out) == 2 and all(len(hits) == 4 for hits in out)
    assert set(out[0][0]) >= {"key", "distance", "label"}
    with SobolevIndex.open(index) as reader:
        expected = reader.search(text_measures(reader, ["space1 space2", "music3"]), k=4)
    assert [[h["key"] for h in hits] for hits in out] == expected.keys
    assert np.allclose([[h["distance"] for h in hits] for hits in out], expected.distances)
    assert {h["label"] for h in out[0]} == {"space"}


def test_search_by_key_returns_it_first_at_distance_zero(built):
    index, _, _, _ = built
    out = json.loads(run("search", index, "--key", "cooking-3", "-k", 3, "-p", 2,
                         "--json").stdout)
    assert out[0][0]["key"] == "cooking-3" and out[0][0]["distance"] == 0.0
    table = run("search", index, "--key", "cooking-3", "-k", 3).stdout
    lines = table.splitlines()
    assert lines[0] == "query: key cooking-3"
    assert lines[3].split()[:3] == ["1", "0.0000", "cooking-3"]  # after the header and rule


def test_search_from_a_file_with_label_filter_and_roots(built, tmp_path):
    index, _, _, _ = built
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"text": "space1 music2"}\n{"text": "cooking5"}\n', encoding="utf-8")
    out = json.loads(run("search", index, "--file", queries, "--label", "music", "--roots", "1",
                         "-k", 3, "--json").stdout)
    assert len(out) == 2
    assert all(h["label"] == "music" for hits in out for h in hits)


def test_search_with_candidates_agrees_with_the_api(built):
    index, _, _, _ = built
    args = ("search", index, "--text", "space1 space2", "--text", "music3", "-k", 3,
            "--candidates", 5, "--candidate-roots", 1)
    out = json.loads(run(*args, "--json").stdout)
    assert set(out) == {"results", "certified"} and len(out["results"]) == 2
    with SobolevIndex.open(index) as reader:
        expected = reader.search(text_measures(reader, ["space1 space2", "music3"]), k=3,
                                 candidates=5, candidate_roots=1)
    assert [[h["key"] for h in hits] for hits in out["results"]] == expected.keys
    assert out["certified"] == expected.certified
    table = run(*args).stdout
    assert table.count("(approximate search: ") == 2
    error = run("search", index, "--text", "music3", "-k", 3, "--candidates", 2, ok=False)
    assert error.exit_code == 1 and "candidates is 2; expected at least k (3)" in error.output


def test_search_needs_a_query_and_known_words(built):
    index, _, _, _ = built
    result = run("search", index, ok=False)
    assert result.exit_code == 2 and "give a query" in result.output
    result = run("search", index, "--text", "zzz", ok=False)
    assert result.exit_code == 1
    assert result.output.startswith("Error: query 0") and result.output.count("\n") == 1


def test_get_prints_the_stored_document(built):
    index, corpus_path, _, _ = built
    [doc] = json.loads(run("get", index, "space-2").stdout)
    first = [json.loads(line) for line in open(corpus_path, encoding="utf-8")][2]
    assert doc["key"] == "space-2" and doc["label"] == "space"
    assert doc["fields"]["text"] == first["text"]
    assert sum(doc["masses"]) == pytest.approx(1.0)
    result = run("get", index, "missing-key", ok=False)
    assert result.exit_code == 1 and "missing-key" in result.output and "hint:" in result.output


def test_add_delete_compact_verify_cycle(writable, tmp_path):
    index, _, vectors_path = writable
    more = tmp_path / "more.txt"
    more.write_text('"space"\tspace99 space1\n"music"\tmusic99 music2\n', encoding="utf-8")
    out = json.loads(run("add", index, more, "--vectors", vectors_path, "--json",
                         "--silent").stdout)
    assert out["added"] == 2 and out["new_words"] == 2 and out["documents"] == 62
    found = json.loads(run("search", index, "--text", "space99", "-k", 1, "--json").stdout)
    assert found[0][0]["key"] == "more-1"

    out = json.loads(run("delete", index, "more-1", "space-0", "--json").stdout)
    assert out == {"deleted": 2, "documents": 60}
    info = json.loads(run("info", index, "--json").stdout)
    assert info["deleted"] == 2
    out = json.loads(run("compact", index, "--json").stdout)
    assert out["segments"] == 1 and out["deleted_dropped"] == 2
    assert json.loads(run("info", index, "--json").stdout)["deleted"] == 0
    report = json.loads(run("verify", index, "--json").stdout)
    assert report["ok"] and report["documents"] == 60
    assert run("verify", index).stdout.startswith("ok:")


def test_add_from_stdin_and_skip_empty(writable):
    index, _, _ = writable
    result = run("add", index, "-", "--skip-empty", "--json", "--silent",
                 input='{"key": "s1", "text": "cooking1 cooking2"}\n{"key": "s2", "text": "qqq"}\n')
    out = json.loads(result.stdout)
    assert out["added"] == 1 and out["skipped"] == ["s2"]
    result = run("add", index, "-", input='{"key": "s3", "text": "qqq"}\n', ok=False)
    assert result.exit_code == 1 and "s3 has no word the index knows" in result.output


def test_add_refuses_duplicates_and_writes_nothing(writable, tmp_path):
    index, _, vectors_path = writable
    before = json.loads(run("info", index, "--json").stdout)
    words_before = run("sql", index, "SELECT count(*) AS n FROM words").stdout
    dup = tmp_path / "dup.jsonl"
    # New words with vectors, then a key that is taken: the words must not be stored either.
    dup.write_text('{"key": "x1", "text": "space99 music99"}\n{"key": "space-1", "text": "space2"}\n',
                   encoding="utf-8")
    result = run("add", index, dup, "--vectors", vectors_path, ok=False)
    assert result.exit_code == 1 and "space-1" in result.output and "hint:" in result.output
    after = json.loads(run("info", index, "--json").stdout)
    assert after["documents"] == before["documents"] and after["segments"] == before["segments"]
    assert run("sql", index, "SELECT count(*) AS n FROM words").stdout == words_before


def test_add_refuses_fields_that_are_not_json_and_writes_nothing(writable):
    index, _, _ = writable
    with SobolevIndex.open(index, "a") as writer:
        from sobolev_index.errors import CorpusError
        from sobolev_index.ingest.documents import add_documents

        docs = [{"key": "ok1", "text": "space1"},
                {"key": "bad2", "text": "space2", "when": object()}]
        with pytest.raises(CorpusError, match="bad2: its fields cannot be stored as JSON"):
            add_documents(writer, docs, batch_size=1)
        assert "ok1" not in writer


def test_verify_reports_a_damaged_segment(writable):
    index, _, _ = writable
    segment = next((index / "segments").iterdir())
    raw = bytearray(segment.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    segment.write_bytes(bytes(raw))
    result = run("verify", index, ok=False)
    assert result.exit_code == 1 and "PROBLEMS FOUND" in result.stdout


def test_distance_between_keys_and_texts(built):
    index, _, _, _ = built
    with SobolevIndex.open(index) as reader:
        expected = reader.distance("space-1", "music-1", p=2)
        expected_text = reader.distance(*text_measures(reader, ["space1", "music1"]))
    value = float(run("distance", index, "space-1", "music-1", "-p", 2).stdout)
    assert value == pytest.approx(expected, rel=1e-9)
    out = json.loads(run("distance", index, "space1", "music1", "--text", "--json").stdout)
    assert out["distance"] == pytest.approx(expected_text) and out["p"] == 1.0


def test_gram_writes_npy_and_h5(built, tmp_path):
    index, _, _, _ = built
    npy = tmp_path / "d.npy"
    run("gram", index, npy, "--keys", "space-1", "--keys", "music-1", "--keys", "cooking-1")
    matrix = np.load(npy)
    with SobolevIndex.open(index) as reader:
        expected = reader.pairwise(["space-1", "music-1", "cooking-1"])
        n_music = len(reader.keys_with_labels("music"))
    assert np.allclose(matrix, expected) and np.all(np.diag(matrix) == 0)

    h5 = tmp_path / "k.h5"
    run("gram", index, h5, "--label", "music", "--kernel", 0.5)
    with h5py.File(h5, "r") as f:
        kernel = f["matrix"][...]
        labels = [v.decode() for v in f["labels"][...]]
    assert kernel.shape == (n_music, n_music) and set(labels) == {"music"}
    assert np.allclose(np.diag(kernel), 1.0) and np.all((kernel > 0) & (kernel <= 1))
    result = run("gram", index, tmp_path / "x.csv", "--label", "music", ok=False)
    assert result.exit_code == 2 and ".npy or .h5" in result.output


def test_sql_formats(built):
    index, _, _, _ = built
    query = ("SELECT key, label, sobolev_distance(key, 'space-1') AS d FROM documents "
             "WHERE deleted = 0 AND label = 'space' ORDER BY d LIMIT 3")
    rows = json.loads(run("sql", index, query).stdout)
    assert rows[0] == {"key": "space-1", "label": "space", "d": 0.0}
    assert [r["d"] for r in rows] == sorted(r["d"] for r in rows)
    csv_out = run("sql", index, query, "--csv").stdout.splitlines()
    assert csv_out[0] == "key,label,d" and csv_out[1].startswith("space-1,space,0")
    assert "space-1" in run("sql", index, query, "--table").stdout
    result = run("sql", index, "DELETE FROM documents", ok=False)
    assert result.exit_code == 1 and "read-only" in result.output


def test_errors_are_one_line_with_a_hint(tmp_path):
    result = run("info", tmp_path / "nowhere", ok=False)
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1
    assert "hint: build one" in result.output


def test_build_refuses_bad_inputs_and_leaves_nothing(tmp_path):
    corpus_path, vectors_path = tc.make_files(str(tmp_path))
    bad_vectors = tmp_path / "bad.vec"
    bad_vectors.write_text("2 3\nspace1 1 2 3\nspace2 1 2\n", encoding="utf-8")
    result = run("build", tmp_path / "ix", "--corpus", corpus_path, "--vectors", bad_vectors,
                 ok=False)
    assert result.exit_code == 1 and "line 3" in result.output
    assert not (tmp_path / "ix").exists()
    result = run("build", tmp_path / "ix", "--corpus", tmp_path / "none.jsonl", "--vectors",
                 vectors_path, ok=False)
    assert result.exit_code == 1 and "does not exist" in result.output


@pytest.mark.slow
def test_quickstart_into_a_directory(tmp_path):
    result = run("quickstart", tmp_path / "qs", "--json")
    report = json.loads(result.stdout)
    assert report["verify_ok"] is True
    assert report["documents"] > 1000 and report["final_documents"] > 1000
    for search in report["searches"]:
        assert len(search["results"]) >= 3
    # The stored document's nearest neighbour is itself.
    by_key = [s for s in report["searches"] if s["query"] == "json.dumps"]
    assert by_key and by_key[0]["results"][0] == {"key": "json.dumps", "distance": 0.0,
                                                  "label": "json"}
    # The files it leaves work with the other commands.
    index = tmp_path / "qs" / "index"
    info = json.loads(run("info", index, "--json").stdout)
    assert info["documents"] == report["final_documents"]
    # A query whose answer does not hang on the luck of the random graph: the
    # fileinput functions came first for every seed tried, with either token
    # pattern ("compress data with gzip" found gzip with some graphs only).
    hits = json.loads(run("search", index, "--text", "read a file line by line", "-k", 5,
                          "--json").stdout)[0]
    assert any(h["key"].startswith("fileinput.") for h in hits)


def test_ctrl_c_during_add_keeps_committed_batches(writable, tmp_path, monkeypatch):
    index, _, _ = writable
    more = tmp_path / "more.jsonl"
    tc.write_jsonl(more, [{"key": f"n{i}", "text": f"space{i % 12} cooking{i % 7}"}
                          for i in range(25)])
    real_add = SobolevIndex.add
    calls = []

    def interrupted_add(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(SobolevIndex, "add", interrupted_add)
    result = run("add", index, more, "--batch-size", 10, ok=False)
    monkeypatch.undo()
    assert result.exit_code == 130
    assert "20 documents were committed" in result.output and "consistent" in result.output
    with SobolevIndex.open(index) as reader:
        assert {f"n{i}" for i in range(20)} <= set(reader)
        assert not {f"n{i}" for i in range(20, 25)} & set(reader)
        assert reader.verify()["ok"]
    # The message says how to resume, and that command adds the rest.
    assert "--skip-existing" in result.output
    again = run("add", index, more, ok=False)
    assert again.exit_code == 1 and "n0" in again.output  # the first committed key
    resumed = json.loads(run("add", index, more, "--skip-existing", "--json").stdout)
    assert resumed["added"] == 5 and resumed["existing"] == 20
    with SobolevIndex.open(index) as reader:
        assert {f"n{i}" for i in range(25)} <= set(reader) and reader.verify()["ok"]
    both = run("add", index, more, "--skip-existing", "--upsert", ok=False)
    assert both.exit_code == 2 and "one of them" in both.output


def test_gram_json_names_the_rows(built, tmp_path):
    index, _, _, _ = built
    out = json.loads(run("gram", index, tmp_path / "g.npy", "--label", "cooking", "--json").stdout)
    assert out["rows"] == 20 and len(out["keys"]) == 20 and set(out["labels"]) == {"cooking"}
    with SobolevIndex.open(index) as reader:
        expected = reader.pairwise(out["keys"])
    assert np.allclose(np.load(tmp_path / "g.npy"), expected)


def test_sql_json_prints_blobs_as_hex(built):
    index, _, _, _ = built
    assert json.loads(run("sql", index, "SELECT x'00ff' AS b").stdout) == [{"b": "00ff"}]


def test_nan_in_fields_is_refused_as_by_the_api(writable, tmp_path):
    # Python's json module reads NaN; the index must not store it (get would
    # print non-standard JSON). The API refuses it with the same words.
    index, corpus_path, _ = writable
    with open(corpus_path, encoding="utf-8") as handle:
        text = json.loads(handle.readline())["text"]  # words the index knows
    corpus = tmp_path / "nan.jsonl"
    corpus.write_text(json.dumps({"key": "nan-doc", "text": text})[:-1] + ', "score": NaN}\n')
    before = snapshot(str(index))
    result = run("add", index, corpus, ok=False)
    assert result.exit_code == 1 and "cannot be stored as JSON" in result.output
    assert_unchanged(before, str(index), "add with NaN in fields")


def test_a_label_no_document_has_is_warned_about(built):
    index = built[0]
    result = run("search", index, "--key", "space-3", "--label", "nosuchlabel", "--label", "music",
                 "--json")
    assert "warning: no live document has the label 'nosuchlabel'" in result.stderr
    assert result.stderr.count("warning:") == 1
    hits = json.loads(result.stdout)[0]
    assert hits and {h["label"] for h in hits} == {"music"}
    quiet = run("search", index, "--key", "space-3", "--label", "music", "--json")
    assert "warning" not in quiet.stderr
    with SobolevIndex.open(index) as reader, pytest.warns(UserWarning, match="'nosuchlabel'"):
        assert reader.search("space-3", where={"label": "nosuchlabel"}).keys == [[]]


def test_add_reports_what_happened(writable):
    # An upsert says how many documents it replaced; a skipped document is
    # reported once; get prints text as UTF-8, not as \u escapes.
    index, corpus_path, _ = writable
    with open(corpus_path, encoding="utf-8") as handle:
        text = json.loads(handle.readline())["text"]
    upsert = json.dumps({"key": "space-0", "text": text}) + "\n" + \
        json.dumps({"key": "new-😀", "text": text, "label": "café"}) + "\n"
    result = run("add", index, "-", "--upsert", input=upsert)
    assert "added 1 documents and replaced 1 " in result.stdout
    out = json.loads(run("add", index, "-", "--upsert", "--json", input=upsert).stdout)
    assert out["added"] == 0 and out["replaced"] == 2
    skip = '{"key": "s1", "text": "' + text + '"}\n{"key": "s2", "text": "qqq"}\n'
    result = run("add", index, "-", "--skip-empty", input=skip)
    assert (result.stdout + result.stderr).count("s2") == 1
    got = run("get", index, "new-😀").stdout
    assert '"new-😀"' in got and '"café"' in got and "\\u" not in got


@pytest.mark.slow
def test_hints_fit_the_error_and_name_cli_options(writable, tmp_path):
    import subprocess
    import sys

    from _support.processes import child_env, child_script

    index, corpus_path, vectors_path = writable
    corpus_hint = "check the corpus file"
    # a missing vector file: the vector hint, not the corpus one
    out = run("build", tmp_path / "n1", "--corpus", corpus_path, "--vectors",
              tmp_path / "nosuch.bin", ok=False).output
    assert "vector file" in out and "check the --vectors file" in out and corpus_hint not in out
    # a key that is taken: the key hint, with the CLI's options
    taken = json.dumps({"key": "space-1", "text": "space2"}) + "\n"
    out = run("add", index, "-", input=taken, ok=False).output
    assert "already in the index" in out and "--skip-existing" in out and corpus_hint not in out
    assert "skip_existing" not in out.replace("--skip-existing", "")
    # no word of the corpus has a vector: a vector problem, named as CLI options
    words = tmp_path / "words.txt"
    words.write_text("zzzz qqqq\n", encoding="utf-8")
    out = run("build", tmp_path / "n2", "--corpus", words, "--vectors", vectors_path,
              ok=False).output
    assert "has a vector" in out and "--fold-case" in out and "fold_case" not in \
        out.replace("--fold-case", "")
    assert corpus_hint not in out
    # a locked index: --wait, not timeout=SECONDS; and --wait waits for the writer
    holder = subprocess.Popen([sys.executable, child_script("hold_writer.py"), str(index), "1.5"],
                              stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        assert holder.stdout.readline().strip() == "READY"
        out = run("delete", index, "space-2", ok=False).output
        assert "--wait SECONDS" in out and "timeout=" not in out and "mode=" not in out
        assert json.loads(run("delete", index, "space-2", "--wait", 30, "--json").stdout)[
            "deleted"] == 1
    finally:
        holder.wait(timeout=60)


def test_search_file_reads_one_query_per_line(built, tmp_path):
    index = built[0]
    queries = tmp_path / "queries.txt"
    queries.write_text("space1 space2\ncooking1 cooking2\n", encoding="utf-8")
    from_file = json.loads(run("search", index, "--file", queries, "-k", 2, "--json").stdout)
    assert len(from_file) == 2
    from_stdin = json.loads(run("search", index, "--file", "-", "-k", 2, "--json",
                                input=queries.read_text()).stdout)
    texts = json.loads(run("search", index, "--text", "space1 space2", "--text",
                           "cooking1 cooking2", "-k", 2, "--json").stdout)
    assert from_file == from_stdin == texts
    whole = json.loads(run("search", index, "--file", queries, "--format", "text", "-k", 2,
                           "--json").stdout)
    assert len(whole) == 1


# ------------------------------------------------ encodings and token patterns
def _accented_files(directory, encoding):
    """A corpus in ``encoding`` with accented words (and "café" in a key),
    and UTF-8 vectors that have them: "café" by the space words, "caf" (the
    old pattern's word for it) by the music words."""
    words, rows = tc.vectors()
    extra = {"café": "space0", "déjà": "space1", "caf": "music0", "d": "music1", "j": "music2"}
    words += list(extra)
    rows = np.vstack([rows] + [rows[tc.vectors()[0].index(near)] for near in extra.values()])
    vectors_path = tc.write_vec(os.path.join(directory, "vectors.vec"), words, rows)
    docs = tc.corpus() + [{"key": "café-1", "text": "Café space1 déjà", "label": "space"},
                          {"key": "café-2", "text": "CAFÉ space2", "label": "space"}]
    corpus_path = os.path.join(directory, "corpus.jsonl")
    with open(corpus_path, "wb") as handle:
        for doc in docs:
            handle.write((json.dumps(doc, ensure_ascii=False) + "\n").encode(encoding))
    return corpus_path, vectors_path


def test_encoding_option_reads_every_text_file_in_it(tmp_path):
    corpus_path, vectors_path = _accented_files(str(tmp_path), "latin-1")
    stop = tmp_path / "stop.txt"
    stop.write_bytes("Déjà\n".encode("latin-1"))
    index = tmp_path / "ix"
    run("build", index, "--corpus", corpus_path, "--vectors", vectors_path, "--nodes", 12,
        "--stopwords", stop, "--encoding", "latin-1", "--silent")
    words = {row["word"] for row in json.loads(run("sql", index, "SELECT word FROM words").stdout)}
    assert "café" in words and "déjà" not in words and "caf" not in words
    assert json.loads(run("get", index, "café-1").stdout)[0]["fields"]["text"] == \
        "Café space1 déjà"
    queries = tmp_path / "queries.txt"
    queries.write_bytes("café space2\n".encode("cp1252"))
    from_file = json.loads(run("search", index, "--file", queries, "--encoding", "cp1252", "-k", 3,
                               "--json").stdout)
    assert from_file == json.loads(run("search", index, "--text", "café space2", "-k", 3,
                                       "--json").stdout)
    keys = tmp_path / "keys.txt"
    keys.write_bytes("café-1\ncafé-2\n".encode("latin-1"))
    out = json.loads(run("gram", index, tmp_path / "g.npy", "--keys-file", keys,
                         "--encoding", "latin-1", "--json").stdout)
    assert out["keys"] == ["café-1", "café-2"]


def test_a_file_that_does_not_decode_is_one_error_and_writes_nothing(tmp_path, writable):
    corpus_path, vectors_path = _accented_files(str(tmp_path), "latin-1")
    result = run("build", tmp_path / "ix", "--corpus", corpus_path, "--vectors", vectors_path,
                 ok=False)
    assert result.exit_code == 1 and not (tmp_path / "ix").exists()
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert f"{corpus_path} is not utf-8 text: line 61, byte offset" in lines[0]
    assert "(--encoding NAME, e.g. cp1252, latin-1 or utf-16)" in lines[0]
    assert "encoding '" not in lines[0] and "check the corpus file" not in lines[0]

    index = writable[0]
    before = snapshot(str(index))
    for args in ([], ["--encoding", "utf-16"]):
        result = run("add", index, corpus_path, *args, ok=False)
        assert result.exit_code == 1 and "Error: " in result.output and "--encoding" in result.output
    result = run("add", index, corpus_path, "--encoding", "klingon", ok=False)
    assert result.exit_code == 1
    assert "Error: encoding 'klingon' is not a text encoding Python knows" in result.output
    assert_unchanged(before, str(index), "add of files that do not decode")
    result = run("build", tmp_path / "ix", "--corpus", corpus_path, "--vectors", vectors_path,
                 "--encoding", "klingon", ok=False)
    assert "encoding 'klingon'" in result.output and not (tmp_path / "ix").exists()


def test_token_pattern_by_name_is_stored_and_used_by_every_later_command(tmp_path):
    corpus_path, vectors_path = _accented_files(str(tmp_path), "utf-8")
    ascii_index, unicode_index = tmp_path / "ascii", tmp_path / "unicode"
    run("build", ascii_index, "--corpus", corpus_path, "--vectors", vectors_path, "--nodes", 12,
        "--token-pattern", "ascii", "--silent")
    run("build", unicode_index, "--corpus", corpus_path, "--vectors", vectors_path, "--nodes", 12,
        "--silent")
    assert json.loads(run("info", ascii_index, "--json").stdout)["token_pattern"] == "ascii"
    assert json.loads(run("info", unicode_index, "--json").stdout)["token_pattern"] == "unicode"
    assert "tokens     ascii" in run("info", ascii_index).stdout
    # "Café" is the word "caf" (by the music words) for the ascii index
    # and "café" (by the space words) for the other
    for index, label in ((ascii_index, "music"), (unicode_index, "space")):
        hits = json.loads(run("search", index, "--text", "Café", "-k", 3, "--json").stdout)[0]
        assert {h["label"] for h in hits} == {label}
        added = tmp_path / f"{label}.jsonl"
        added.write_text('{"key": "new", "text": "CAFÉ"}\n', encoding="utf-8")
        run("add", index, added, "--vectors", "none", "--silent")
        nodes = json.loads(run("get", index, "new").stdout)[0]["nodes"]
        word = "caf" if label == "music" else "café"
        node = json.loads(run("sql", index, f"SELECT node FROM words WHERE word = '{word}'")
                          .stdout)[0]["node"]
        assert nodes == [node]
    result = run("build", tmp_path / "bad", "--corpus", corpus_path, "--vectors", vectors_path,
                 "--token-pattern", "[unicode", ok=False)
    assert "token pattern '[unicode' is neither a pattern name" in result.output
    assert not (tmp_path / "bad").exists()
