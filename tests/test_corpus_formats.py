"""A user's own corpus files: CSV and TSV with a header, JSON lines keyed by
``id``, the format told by name and by content, and inputs that can be read
only once (pipes, FIFOs, stdin). The expected documents are written out by
hand or by the standard library's csv writer, never by the reader under test."""
import csv
import io
import json
import os
import sys
import threading

import pytest
from _support import corpus as tc
from _support.cli import run

from sobolev_index.errors import CorpusError
from sobolev_index.ingest.documents import read_corpus

ROWS = [
    # key, text, label, source: commas, quotes, newlines and non-ASCII inside cells
    ("a-1", "Space, the final frontier: rockets, orbits and stars.", "space", "tv"),
    ("a-2", 'He said "bake it"\nthen waited, for an hour.', "cooking", ""),
    ("a-3", "Zürich café naïve — straße", "music", "x,y"),
    ("a-4", "", "", "empty text and label"),
]


def _write_csv(path, rows=ROWS, header=("id", "text", "label", "source"), delimiter=",",
               encoding="utf-8", bom=False):
    with open(path, "w", newline="", encoding=encoding) as handle:
        if bom:
            handle.write("\ufeff")
        writer = csv.writer(handle, delimiter=delimiter)
        if header:
            writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def _expected(rows=ROWS, fields=("source",)):
    return [{"key": key, "text": text, "label": label or None,
             "fields": dict(zip(fields, rest)) or None}
            for key, text, label, *rest in rows]


# ------------------------------------------------------------------ CSV, TSV
@pytest.mark.parametrize("bom", [False, True])
def test_csv_with_quoted_commas_quotes_and_newlines(tmp_path, bom):
    path = _write_csv(tmp_path / "docs.csv", bom=bom)
    assert list(read_corpus(path)) == _expected()


def test_csv_in_another_encoding(tmp_path):
    rows = [("k1", "Café, crème brûlée", "food", "fr")]
    path = _write_csv(tmp_path / "docs.csv", rows=rows, encoding="cp1252")
    assert list(read_corpus(path, encoding="cp1252")) == _expected(rows)
    with pytest.raises(CorpusError, match="is not utf-8 text: line 2"):
        list(read_corpus(path))


def test_tsv_and_tab_files(tmp_path):
    for name in ("docs.tsv", "docs.tab"):
        path = _write_csv(tmp_path / name, delimiter="\t")
        assert list(read_corpus(path)) == _expected()


def test_semicolon_csv_from_a_spreadsheet(tmp_path):
    path = _write_csv(tmp_path / "docs.csv", delimiter=";")
    assert list(read_corpus(path)) == _expected()


def test_column_names_case_and_key_defaults(tmp_path):
    # "Key" beats "ID"; case and spaces around a name do not matter
    path = _write_csv(tmp_path / "a.csv", rows=[("k", "7", "words here", "L")],
                      header=(" Key ", "ID", "Text", "LABEL"))
    assert list(read_corpus(path)) == [
        {"key": "k", "text": "words here", "label": "L", "fields": {"ID": "7"}}]
    # neither key nor id: the index names the documents
    path = _write_csv(tmp_path / "b.csv", rows=[("words here", "x")], header=("text", "note"))
    assert list(read_corpus(path)) == [
        {"key": None, "text": "words here", "label": None, "fields": {"note": "x"}}]


def test_columns_named_by_the_user(tmp_path):
    path = _write_csv(tmp_path / "docs.csv", rows=[("n1", "body words", "c1", "7")],
                      header=("name", "body", "class", "id"))
    docs = list(read_corpus(path, key_column="name", text_column="body", label_column="class"))
    assert docs == [{"key": "n1", "text": "body words", "label": "c1", "fields": {"id": "7"}}]
    with pytest.raises(CorpusError, match="no column 'nope', the label column given"):
        list(read_corpus(path, text_column="body", label_column="nope"))
    with pytest.raises(ValueError, match="expected three different columns"):
        list(read_corpus(path, text_column="body", label_column="body"))


def test_unnamed_columns_get_a_name(tmp_path):
    # pandas writes its index as a first column with an empty name
    path = _write_csv(tmp_path / "docs.csv", rows=[("0", "some words", "a")],
                      header=("", "text", "label"))
    assert list(read_corpus(path))[0]["fields"] == {"column_1": "0"}


@pytest.mark.parametrize("name", ["docs.csv", "docs.tsv"])
def test_a_tabular_file_without_a_header_is_an_error_never_one_document(tmp_path, name):
    path = _write_csv(tmp_path / name, header=None, delimiter="\t" if name.endswith("tsv") else ",")
    with pytest.raises(CorpusError, match=r"has no column 'text' \(its first row: 'a-1', "
                                          r"'Space, the final.*needs a header row"):
        list(read_corpus(path))


def test_bad_rows_name_their_line(tmp_path):
    path = tmp_path / "docs.csv"
    path.write_text("id,text\nk1,fine\nk2,one, two\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="docs.csv line 3 has 3 cells; its header has 2"):
        list(read_corpus(str(path)))
    path.write_text('id,text\nk1,"never closed\nk2,x\n', encoding="utf-8")
    with pytest.raises(CorpusError, match="docs.csv line 2 is not valid CSV"):
        list(read_corpus(str(path)))
    path.write_text("id,text\n,no key\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="line 2: the key cell .* is empty"):
        list(read_corpus(str(path)))
    path.write_text("text,text\nx,y\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="more than once"):
        list(read_corpus(str(path)))


def test_cells_larger_than_the_csv_module_default(tmp_path):
    text = "word " * 60_000  # 300 KB, above csv's default 128 KiB per cell
    path = _write_csv(tmp_path / "big.csv", rows=[("k", text, "", "")])
    assert list(read_corpus(path))[0]["text"] == text


def test_an_empty_csv_holds_no_documents(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("", encoding="utf-8")
    assert list(read_corpus(str(path))) == []


# ------------------------------------------------------- format by content
def test_a_csv_header_is_recognised_in_a_file_named_otherwise(tmp_path):
    path = _write_csv(tmp_path / "export.txt")
    assert list(read_corpus(path)) == _expected()
    stdin = _write_csv(tmp_path / "stdin-copy")
    with open(stdin, encoding="utf-8") as handle:
        assert list(read_corpus_from_stdin(handle.read())) == _expected()


def read_corpus_from_stdin(text, **options):
    old = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8")
    try:
        return list(read_corpus("-", **options))
    finally:
        sys.stdin = old


def test_prose_that_mentions_text_is_not_a_csv(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("Text, images, and video\nare three kinds of media we keep.\n",
                    encoding="utf-8")
    docs = list(read_corpus(str(path)))
    assert len(docs) == 1 and docs[0]["text"].startswith("Text, images")
    # queries, one per line
    assert [d["text"] for d in read_corpus(str(path), plain="plain-lines")] == [
        "Text, images, and video", "are three kinds of media we keep."]


def test_labelled_lines_stay_labelled_lines(tmp_path):
    path = tmp_path / "tweets.txt"
    path.write_text('"positive"\tcall me, text, whatever\n"negative"\tno\n', encoding="utf-8")
    assert [(d["label"], d["text"]) for d in read_corpus(str(path))] == [
        ("positive", "call me, text, whatever"), ("negative", "no")]
    # a .tsv of such lines is read by naming the format
    tsv = tmp_path / "tweets.tsv"
    tsv.write_text("news\tthe first story\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="format 'lines'"):
        list(read_corpus(str(tsv)))
    assert [d["label"] for d in read_corpus(str(tsv), format="lines")] == ["news"]


def test_columns_do_not_apply_to_plain_text(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("just some words\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="has no columns"):
        list(read_corpus(str(path), text_column="body"))


# --------------------------------------------------------------- JSON lines
def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def test_jsonl_id_is_the_key_when_there_is_no_key(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", [{"id": 25, "text": "t", "lang": "en"},
                                               {"id": "x-2", "text": "u"}])
    assert list(read_corpus(path)) == [
        {"key": "25", "text": "t", "label": None, "fields": {"lang": "en"}},
        {"key": "x-2", "text": "u", "label": None, "fields": None}]


def test_jsonl_key_wins_over_id_which_stays_a_field(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", [{"key": "k", "id": 7, "text": "t", "label": "L"}])
    assert list(read_corpus(path)) == [
        {"key": "k", "text": "t", "label": "L", "fields": {"id": 7}}]


def test_jsonl_columns_named_by_the_user(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", [{"doc": "d1", "body": "t", "cat": "c", "id": 1}])
    assert list(read_corpus(path, key_column="doc", text_column="body", label_column="cat")) == [
        {"key": "d1", "text": "t", "label": "c", "fields": {"id": 1}}]
    with pytest.raises(CorpusError, match="has no 'text' field .*name the one that holds"):
        list(read_corpus(path))


# ------------------------------------------------------ inputs read once
def _fifo_with(tmp_path, data):
    """A named pipe that a thread fills with ``data`` (bytes) once opened."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes on this platform")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as handle:
            handle.write(data)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return str(fifo), thread


def _read_within(path, seconds=30):
    """read_corpus(path) as a list, or a failure when it is still reading
    after ``seconds`` (a reader that opens a FIFO twice waits for ever for
    a second writer)."""
    found = {}

    def read():
        try:
            found["docs"] = list(read_corpus(path))
        except BaseException as exc:  # reported below
            found["error"] = exc

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    if reader.is_alive():
        # Let the stuck reader go: a writer that opens and closes the pipe
        # gives it an end of file.
        with open(path, "wb"):
            pass
        reader.join(10)
        pytest.fail(f"reading {path} did not end within {seconds} s")
    if "error" in found:
        raise found["error"]
    return found["docs"]


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_a_fifo_is_read_once_from_its_start(tmp_path, kind):
    if kind == "jsonl":
        data = "".join(json.dumps({"key": f"k{i}", "text": f"words {i}"}) + "\n"
                       for i in range(2000))
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["key", "text"])
        writer.writerows([f"k{i}", f"words, {i}\nmore"] for i in range(2000))
        data = buffer.getvalue()
    fifo, thread = _fifo_with(tmp_path, data.encode("utf-8"))
    docs = _read_within(fifo)
    thread.join(10)
    assert [d["key"] for d in docs] == [f"k{i}" for i in range(2000)]


def test_a_few_lines_from_a_fifo(tmp_path):
    fifo, thread = _fifo_with(tmp_path, b'{"key": "a", "text": "x"}\n{"key": "b", "text": "y"}\n')
    assert [d["key"] for d in _read_within(fifo)] == ["a", "b"]
    thread.join(10)


# ------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def text_index(tmp_path_factory):
    directory = tmp_path_factory.mktemp("own-corpus")
    corpus_path, vectors_path = tc.make_files(str(directory))
    index = directory / "index"
    run("build", index, "--corpus", corpus_path, "--vectors", vectors_path, "--nodes", 12,
        "--roots", 2, "--silent")
    return index


def test_cli_build_add_and_search_a_csv(tmp_path, text_index):
    import shutil

    docs = tc.corpus()
    rows = [(d["key"], d["text"], d["label"], "src") for d in docs]
    path = _write_csv(tmp_path / "docs.csv", rows=rows)
    (tmp_path / "v").mkdir()
    _, vectors_path = tc.make_files(str(tmp_path / "v"))
    result = run("build", tmp_path / "ix", "--corpus", path, "--vectors", vectors_path,
                 "--nodes", 12, "--roots", 2, "--json", "--silent")
    assert json.loads(result.stdout)["documents"] == len(docs)
    got = json.loads(run("get", tmp_path / "ix", docs[1]["key"]).stdout)[0]
    assert got["label"] == docs[1]["label"] and got["fields"] == {"source": "src",
                                                                   "text": docs[1]["text"]}
    # add: a TSV with its own column names
    copy = tmp_path / "copy"
    shutil.copytree(text_index, copy)
    tsv = _write_csv(tmp_path / "more.tsv", rows=[("n-1", docs[0]["text"], "z")],
                     header=("name", "body", "kind"), delimiter="\t")
    out = json.loads(run("add", copy, tsv, "--key-column", "name", "--text-column", "body",
                         "--label-column", "kind", "--json").stdout)
    assert out["added"] == 1 and out["read"] == 1
    assert json.loads(run("get", copy, "n-1").stdout)[0]["label"] == "z"
    # search --file: the text column of every row is a query
    queries = _write_csv(tmp_path / "q.csv", rows=[("q1", docs[0]["text"], "", ""),
                                                   ("q2", docs[30]["text"], "", "")])
    found = json.loads(run("search", text_index, "--file", queries, "-k", 1, "--json").stdout)
    assert [hits[0]["key"] for hits in found] == [docs[0]["key"], docs[30]["key"]]


def test_cli_csv_without_text_column_is_one_clear_error(tmp_path, text_index):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(text_index, copy)
    path = _write_csv(tmp_path / "corpus.csv", rows=[("1", "words", "x")],
                      header=("id", "body", "label"))
    result = run("add", copy, path, ok=False)
    assert result.exit_code == 1
    assert "corpus.csv has no column 'text'" in result.output and "--text-column" in result.output
    assert "text_column=" not in result.output  # the Python spelling is not shown


# ------------------------------------------------------- shapes users have
def test_pandas_csv_with_an_unnamed_index_column_from_stdin():
    # pandas' to_csv writes its index as a first column with an empty name
    text = ',id,text,label\n0,d1,"space1, space2",pos\n1,d2,music1,neg\n'
    docs = read_corpus_from_stdin(text)
    assert [(d["key"], d["text"], d["label"], d["fields"]) for d in docs] == [
        ("d1", "space1, space2", "pos", {"column_1": "0"}),
        ("d2", "music1", "neg", {"column_1": "1"})]


def test_a_header_named_by_the_user_is_recognised_in_any_file(tmp_path):
    path = tmp_path / "notes"
    path.write_text("body,source\nsome words,web\n", encoding="utf-8")
    assert [d["text"] for d in read_corpus(str(path), text_column="body")] == ["some words"]


def test_a_csv_without_header_read_whole_gets_a_warning():
    import warnings

    text = "d1,some words here,pos\nd2,other words there,neg\nd3,more words,pos\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        docs = read_corpus_from_stdin(text)
    assert len(docs) == 1
    assert any("look like CSV rows" in str(w.message) and "header row" in str(w.message)
               for w in caught), [str(w.message) for w in caught]


def test_spaces_after_commas_are_not_part_of_keys_and_labels(tmp_path):
    path = tmp_path / "docs.csv"
    path.write_text("text, id, label\nspace1 space2, d1, pos\n", encoding="utf-8")
    assert list(read_corpus(str(path))) == [
        {"key": "d1", "text": "space1 space2", "label": "pos", "fields": None}]


def test_crlf_lines_and_quoted_newlines(tmp_path):
    path = tmp_path / "docs.csv"
    path.write_bytes(b'id,text\r\nk1,"two\r\nlines"\r\nk2,one\r\n')
    assert [(d["key"], d["text"]) for d in read_corpus(str(path))] == [
        ("k1", "two\nlines"), ("k2", "one")]


def test_utf16_csv(tmp_path):
    path = _write_csv(tmp_path / "docs.csv", encoding="utf-16")
    assert list(read_corpus(path, encoding="utf-16")) == _expected()


def test_a_quote_that_runs_over_tsv_rows_is_an_error(tmp_path):
    path = tmp_path / "docs.tsv"
    path.write_text('id\ttext\tlabel\n1\t"Quote at start\tpos\n2\tmiddle row\tneg\n'
                    '3\tends with a quote"\tpos\n4\tlast\tneg\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"docs.tsv line 2: the quoted cell 'text' runs over "
                                          r"lines 2-4 and holds TABs"):
        list(read_corpus(str(path)))


def test_no_key_column(tmp_path):
    path = _write_csv(tmp_path / "docs.csv", rows=[("1", "a b", "x", ""), ("1", "c d", "y", "")])
    docs = list(read_corpus(path, key_column=False))
    assert [d["key"] for d in docs] == [None, None]
    assert docs[0]["fields"] == {"id": "1", "source": ""}
    jsonl = _write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "t"}, {"id": 1, "text": "u"}])
    assert [d["key"] for d in read_corpus(jsonl, key_column=False)] == [None, None]


def test_errors_name_the_field_the_key_came_from(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", [{"id": True, "text": "t"}])
    with pytest.raises(CorpusError, match=r"a.jsonl line 1: the key \('id'\) is true"):
        list(read_corpus(path))
