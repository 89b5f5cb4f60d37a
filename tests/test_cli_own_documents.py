"""The command line on a user's own documents: counts instead of silence
(empty inputs, words dropped), `export -` into `build --from-export -`,
exit codes as documented, and the README's "Your own documents" section run
exactly as printed."""
import csv
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from _support import corpus as tc
from _support.cli import run
from _support.index import assert_unchanged, snapshot

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    directory = tmp_path_factory.mktemp("own-docs")
    corpus_path, vectors_path = tc.make_files(str(directory))
    index = directory / "index"
    run("build", index, "--corpus", corpus_path, "--vectors", vectors_path, "--nodes", 12,
        "--roots", 2, "--silent")
    return index, vectors_path


@pytest.fixture
def writable(built, tmp_path):
    index, vectors_path = built
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    return copy, vectors_path


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ----------------------------------------------------------- empty inputs
@pytest.mark.parametrize("content", ["", "\n\n", "id,text,label\n"])
def test_add_of_an_empty_input_is_an_error_and_writes_nothing(writable, tmp_path, content):
    index, _ = writable
    empty = tmp_path / "empty.csv"
    empty.write_text(content, encoding="utf-8")
    before = snapshot(index)
    result = run("add", index, empty, ok=False)
    assert result.exit_code == 1
    assert "no documents in" in result.output and "--allow-empty" in result.output
    assert_unchanged(before, index)
    allowed = json.loads(run("add", index, empty, "--allow-empty", "--json").stdout)
    assert allowed["read"] == 0 and allowed["added"] == 0


def test_add_from_an_empty_stdin(writable):
    index, _ = writable
    result = run("add", index, "-", input="", ok=False)
    assert result.exit_code == 1 and "no documents in -" in result.output


# ----------------------------------------------------- words and documents
def test_add_counts_the_words_it_dropped_and_the_documents_it_skipped(writable, tmp_path):
    index, vectors_path = writable
    path = _jsonl(tmp_path / "more.jsonl", [
        {"key": "n1", "text": "space1 space2 zebra zebra quagga"},
        {"key": "n2", "text": "space99 music3 okapi"},     # space99 has a vector in the file
        {"key": "n3", "text": "zebra okapi"},              # nothing known: skipped
    ])
    out = json.loads(run("add", index, path, "--vectors", vectors_path, "--skip-empty",
                         "--json").stdout)
    assert out["read"] == 3 and out["added"] == 2 and out["skipped"] == ["n3"]
    assert out["new_words"] == 1  # space99
    assert out["unknown_words"] == 3 and out["unknown_tokens"] == 6
    assert out["unknown_examples"] == ["zebra", "okapi", "quagga"]
    # the table says it too
    path = _jsonl(tmp_path / "again.jsonl", [{"key": "n4", "text": "space1 zebra"}])
    text = run("add", index, path, "--vectors", "none").output
    assert re.search(r"dropped 1 words the index does not know \(1 occurrences; no vector file "
                     r"to place new words: --vectors FILE\): zebra", text), text


def test_a_document_without_known_words_names_the_vectors_looked_in(writable, tmp_path):
    index, vectors_path = writable
    path = _jsonl(tmp_path / "unknown.jsonl", [{"key": "u1", "text": "zebra okapi"}])
    result = run("add", index, path, "--vectors", vectors_path, ok=False)
    assert result.exit_code == 1
    assert f"u1 has no word the index knows (2 token(s); none of its words has a vector in " \
           f"{vectors_path})" in result.output
    result = run("add", index, path, "--vectors", "none", ok=False)
    assert "no vectors were given to place new words (--vectors FILE)" in result.output


# -------------------------------------------------------- export to a pipe
def test_export_to_stdout_builds_back_from_stdin(built, tmp_path, monkeypatch):
    index, _ = built
    monkeypatch.chdir(tmp_path)
    exported = run("export", index, "-", "--silent")
    assert not (tmp_path / "-").exists()
    header = json.loads(exported.stdout.splitlines()[0])
    assert header["format"] == "sobolev-index-export" and header["documents"] == 60
    assert len(exported.stdout.splitlines()) == 61
    out = json.loads(run("build", tmp_path / "back", "--from-export", "-", "--graph-from", index,
                         "--json", "--silent", input=exported.stdout).stdout)
    assert out["documents"] == 60
    one = json.loads(run("search", index, "--key", "space-3", "-k", 5, "--json").stdout)
    two = json.loads(run("search", tmp_path / "back", "--key", "space-3", "-k", 5,
                         "--json").stdout)
    assert one == two


def test_export_piped_into_build_between_two_processes(built, tmp_path):
    index, _ = built
    command = [sys.executable, "-m", "sobolev_index"]
    # From a folder of its own, so that the installed package is the one run.
    exporter = subprocess.Popen(command + ["export", str(index), "-"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=tmp_path)
    builder = subprocess.run(command + ["build", str(tmp_path / "back"), "--from-export", "-",
                                        "--graph-from", str(index), "--json"],
                             stdin=exporter.stdout, capture_output=True, cwd=tmp_path,
                             timeout=120)
    exporter.stdout.close()
    assert exporter.wait(60) == 0, exporter.stderr.read()
    assert builder.returncode == 0, builder.stderr
    assert json.loads(builder.stdout)["documents"] == 60
    assert b"exported 60 documents" in exporter.stderr.read()


def test_a_truncated_export_on_stdin_is_refused(built, tmp_path):
    index, _ = built
    lines = run("export", index, "-", "--silent").stdout.splitlines(keepends=True)
    result = run("build", tmp_path / "back", "--from-export", "-", "--graph-from", index,
                 input="".join(lines[:30]), ok=False)
    assert result.exit_code == 1 and "<stdin> holds 29 documents" in result.output
    assert not (tmp_path / "back").exists()


# -------------------------------------------------------------- exit codes
@pytest.mark.parametrize("args, message", [
    (["search", "{index}", "--text", "space1", "-p", "0.5"], "'0.5'; expected p >= 1"),
    (["search", "{index}", "--text", "space1", "-p", "nan"], "expected p >= 1"),
    (["search", "{index}", "--text", "space1", "--roots", "a,b"], "expected root positions"),
    (["search", "{index}", "--text", "space1", "--roots", "1,,2"], "expected root positions"),
    (["delete", "{index}", "space-1", "--wait", "nan"], "expected a number of seconds"),
    (["sql", "{index}", "SELECT 1", "--timeout", "-1"], "expected a number of seconds"),
    (["search", "{index}"], "give a query"),
    (["build", "{new}", "--corpus", "{corpus}"], "--vectors learn"),
    (["add", "{index}", "x.jsonl", "--upsert", "--skip-existing"], "give one of them"),
    (["gram", "{index}", "out.txt", "--keys", "space-1"], "expected a .npy or .h5 file name"),
    (["search", "{index}", "--text", "space1", "--format", "xml"], "'xml' is not one of"),
    (["add", "{index}", "{corpus}", "--key-column", ""], "expected a column name"),
    (["vectors", "{corpus}", "out.npy"], "expected a file name ending in .bin"),
    (["vectors", "{corpus}"], "give the corpus (files, directories or '-') and then OUT"),
    (["build", "{new}", "--points", "{corpus}", "--text-column", "body"],
     "--text-column name columns of a corpus file"),
])
def test_usage_errors_exit_2_with_the_usage_hint(built, tmp_path, args, message):
    index, _ = built
    corpus_path, _ = tc.make_files(str(tmp_path))
    args = [a.format(index=index, new=tmp_path / "new", corpus=corpus_path) for a in args]
    result = run(*args, ok=False)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert re.search(r"Try 'main [a-z-]+ --help' for help\.", result.output), result.output


@pytest.mark.parametrize("args, message", [
    (["search", "{index}", "--key", "no-such-key"], "Error: key 'no-such-key' is not in"),
    (["add", "{index}", "{missing}"], "does not exist"),
    (["build", "{new}", "--corpus", "{missing}", "--vectors", "learn"], "missing.csv does not "
                                                                        "exist"),
    (["vectors", "{corpus}", "{corpus}"], "exists; choose a new file name"),
])
def test_other_errors_exit_1(built, tmp_path, args, message):
    index, _ = built
    _, vectors_path = tc.make_files(str(tmp_path))
    args = [a.format(index=index, new=tmp_path / "new", corpus=vectors_path,
                     missing=tmp_path / "missing.csv") for a in args]
    result = run(*args, ok=False)
    assert result.exit_code == 1, result.output
    assert message in result.output and "Try '" not in result.output


# ------------------------------------------- README: "Your own documents"
def readme_section(marker):
    """The commands of the bash block after ``<!-- ci:MARKER -->``."""
    with open(README, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    start = lines.index(f"<!-- ci:{marker} -->")
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```bash"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    return [line for line in lines[opening + 1:closing] if line.strip()]


def write_docs_csv(path, documents):
    """A user's CSV: a header row, then id, text, label per document."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text", "label"])
        for doc in documents:
            writer.writerow([doc["key"], doc["text"], doc["label"]])


@pytest.mark.skipif(not os.path.exists(README),
                    reason="README.md is not beside tests/ (a copy of the tests without it)")
@pytest.mark.slow
def test_readme_own_documents_section_runs_as_printed(tmp_path):
    from sobolev_index.ingest.stdlib_corpus import stdlib_documents

    commands = readme_section("own-documents")
    assert len(commands) == 3 and all(c.startswith("sobolev-index ") for c in commands)
    assert not any("--vectors " in c and "--vectors learn" not in c and "vecs" not in c
                   for c in commands)
    write_docs_csv(tmp_path / "docs.csv", stdlib_documents())
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep
           + os.environ.get("PATH", "")}
    outputs = []
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        outputs.append(done.stdout)
    assert "fileinput" in outputs[-1], outputs[-1]


# ------------------------------------------------- what a user runs into
def test_a_text_column_besides_the_text_is_refused_not_overwritten(writable, tmp_path):
    index, _ = writable
    path = tmp_path / "t.csv"
    path.write_text("id,body,text\nd1,space1 space2,a summary\n", encoding="utf-8")
    before = snapshot(index)
    result = run("add", index, path, "--text-column", "body", ok=False)
    assert result.exit_code == 1
    assert "d1 has a field 'text' besides the text it is indexed by" in result.output
    assert "(--no-text)" in result.output
    assert_unchanged(before, index)
    run("add", index, path, "--text-column", "body", "--no-text")
    assert json.loads(run("get", index, "d1").stdout)[0]["fields"] == {"text": "a summary"}


def test_repeated_ids_name_the_way_out(writable, tmp_path):
    index, _ = writable
    path = _jsonl(tmp_path / "dup.jsonl", [{"id": 1, "text": "space1"}, {"id": 1, "text": "space2"}])
    result = run("add", index, path, ok=False)
    assert result.exit_code == 1 and "key '1' appears twice in the input" in result.output
    assert "(--key-column none)" in result.output and "--upsert" not in result.output
    out = json.loads(run("add", index, path, "--key-column", "none", "--json").stdout)
    assert out["added"] == 2


def test_build_names_the_vectors_a_document_has_none_in(tmp_path):
    # "zebra" is seen once: learned vectors have none for it
    path = _jsonl(tmp_path / "c.jsonl",
                  [{"key": f"k{i}", "text": "space1 space2 music1 music2 cooking1"}
                   for i in range(6)] + [{"key": "rare", "text": "zebra"}])
    result = run("build", tmp_path / "ix", "--corpus", path, "--vectors", "learn", ok=False)
    assert result.exit_code == 1
    assert "rare has no word the index knows (1 token(s); none of its words has a vector in " \
           "the 5 word vectors given (learned from this corpus: words seen fewer than 2 times " \
           "get none)" in result.output
    assert not (tmp_path / "ix").exists()
    out = json.loads(run("build", tmp_path / "ix", "--corpus", path, "--vectors", "learn",
                         "--skip-empty", "--json", "--silent").stdout)
    assert out["documents"] == 6 and out["skipped"] == 1


def test_learned_vectors_are_not_offered_for_new_words(tmp_path):
    corpus = _jsonl(tmp_path / "c.jsonl", [{"key": f"k{i}", "text": "space1 space2 music1 music2"}
                                           for i in range(6)])
    run("build", tmp_path / "ix", "--corpus", corpus, "--vectors", "learn", "--silent")
    more = _jsonl(tmp_path / "m.jsonl", [{"key": "n1", "text": "space1 zebra"}])
    result = run("add", tmp_path / "ix", more)
    assert "new words get nodes from" not in result.output
    assert "dropped 1 words the index does not know (1 occurrences; the index's vectors were " \
           "learned from its build's corpus, so they have none; --vectors FILE places new " \
           "words): zebra" in result.output
    # a copy made by export has no learned-vectors file: info says none
    exported = run("export", tmp_path / "ix", tmp_path / "e.jsonl")
    assert exported.exit_code == 0
    run("build", tmp_path / "copy", "--from-export", tmp_path / "e.jsonl", "--graph-from",
        tmp_path / "ix", "--silent")
    assert json.loads(run("info", tmp_path / "copy", "--json").stdout)["vectors"] is None
    assert json.loads(run("info", tmp_path / "ix", "--json").stdout)["vectors"] == \
        str(tmp_path / "ix" / "learned-vectors.bin")


def test_export_to_a_pipe_is_utf8_whatever_the_locale(built, tmp_path):
    index, _ = built
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    run("add", copy, _jsonl(tmp_path / "u.jsonl", [{"key": "café-ü", "text": "space1 naïve"}]))
    command = [sys.executable, "-m", "sobolev_index"]
    env = {**os.environ, "PYTHONIOENCODING": "latin-1", "LC_ALL": "C", "PYTHONUTF8": "0"}
    exported = subprocess.run(command + ["export", str(copy), "-"], capture_output=True,
                              cwd=tmp_path, env=env, timeout=120)
    assert exported.returncode == 0, exported.stderr
    assert '"key":"café-ü"'.encode() in exported.stdout
    out = json.loads(run("build", tmp_path / "back", "--from-export", "-", "--graph-from", copy,
                         "--json", "--silent", input=exported.stdout).stdout)
    assert out["documents"] == 61
