"""Documents as measures: corpus readers, the word -> node table, weights,
unknown words, and building and growing a text index."""
import math
import os
from collections import Counter

import numpy as np
import pytest
from _support import corpus as tc

from sobolev_index import SobolevIndex
from sobolev_index.errors import CorpusError, InvalidMeasureError
from sobolev_index.ingest.documents import (
    TextEncoder,
    TextSettings,
    add_documents,
    build_index,
    read_corpus,
    text_measures,
)
from sobolev_index.ingest.embeddings import WordVectors
from sobolev_index.ingest.words import read_words


@pytest.fixture
def files(tmp_path):
    return tc.make_files(str(tmp_path))


@pytest.fixture
def built(tmp_path, files):
    corpus_path, vectors_path = files
    # Counts and every word, not the recipe's tf-idf and stop words: the
    # tests below check the stored words and masses against plain counts.
    index, report = build_index(str(tmp_path / "index"), read_corpus(corpus_path), vectors_path,
                                nodes=12, seed=0, settings=TextSettings())
    yield index, report
    index.close()


# ------------------------------------------------------------------ readers
def test_read_corpus_jsonl_keeps_keys_labels_and_extra_fields(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"key": "a", "text": "x y", "label": "L", "year": 1999}\n\n'
                    '{"text": "z", "label": 3}\n', encoding="utf-8")
    docs = list(read_corpus(str(path)))
    assert docs == [
        {"key": "a", "text": "x y", "label": "L", "fields": {"year": 1999}},
        {"key": None, "text": "z", "label": "3", "fields": None},
    ]


def test_read_corpus_labelled_lines_and_directory(tmp_path):
    lines = tmp_path / "tweets.txt"
    lines.write_text('"positive"\tgreat day\n"negative"\tbad "day"\n', encoding="utf-8")
    docs = list(read_corpus(str(lines)))
    assert [(d["key"], d["label"], d["text"]) for d in docs] == [
        ("tweets-1", "positive", "great day"), ("tweets-2", "negative", 'bad "day"')]

    folder = tmp_path / "docs"
    (folder / "sport").mkdir(parents=True)
    (folder / "sport" / "match.txt").write_text("goal", encoding="utf-8")
    (folder / "loose.txt").write_text("free text", encoding="utf-8")
    (folder / "ignored.md").write_text("not a txt", encoding="utf-8")
    docs = list(read_corpus(str(folder)))
    assert [(d["key"], d["label"], d["text"]) for d in docs] == [
        ("loose", None, "free text"), (os.path.join("sport", "match"), "sport", "goal")]


@pytest.mark.parametrize("content, message", [
    ('{"key": "a", "text": "x"}\nnot json\n', "line 2 is not JSON"),
    ('{"key": "a"}\n', "line 1 has no 'text' field"),
    ('[1, 2]\n', "line 1 is a JSON list"),
    ('{"key": "", "text": "x"}\n', r"the key \('key'\) is the string ''"),
    ('{"key": "a", "text": 5}\n', "'text' is int"),
])
def test_read_corpus_errors_name_the_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=message):
        list(read_corpus(str(path)))


def test_read_corpus_missing_path_and_bad_format(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        list(read_corpus(str(tmp_path / "nope.jsonl")))
    with pytest.raises(ValueError, match="format is 'xml'"):
        list(read_corpus(str(tmp_path), format="xml"))


def test_read_corpus_stdin(monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO('"a"\tfirst\n"b"\tsecond\n'))
    assert [d["label"] for d in read_corpus("-")] == ["a", "b"]


# ------------------------------------------------------------------ encoder
def test_counts_become_masses_per_node():
    encoder = TextEncoder(TextSettings(), {"cat": 3, "dog": 3, "fish": 7})
    nodes, masses = encoder.measure("Cat dog cat fish bird")
    assert nodes.tolist() == [3, 7]
    assert masses.tolist() == [3.0, 1.0]  # cat x2 + dog on node 3; "bird" has no node
    assert encoder.measure("bird only") is None


def test_tfidf_weights_match_the_smoothed_formula():
    settings = TextSettings(weighting="tfidf", n_documents=10)
    encoder = TextEncoder(settings, {"rare": 0, "common": 1}, {"rare": 1, "common": 9})
    nodes, masses = encoder.measure("rare common common")
    idf = lambda df: math.log(11 / (1 + df)) + 1  # noqa: E731
    assert nodes.tolist() == [0, 1]
    assert masses == pytest.approx([1 * idf(1), 2 * idf(9)])


def test_stopwords_and_pattern_are_applied():
    settings = TextSettings(stopwords=("the",), pattern=r"[a-z]+")
    encoder = TextEncoder(settings, {"the": 0, "cat": 1, "s": 2})
    nodes, masses = encoder.measure("The cat's")
    assert nodes.tolist() == [1, 2] and masses.tolist() == [1.0, 1.0]


def test_settings_reject_bad_values():
    with pytest.raises(ValueError, match="weighting is 'bm25'"):
        TextSettings(weighting="bm25")
    with pytest.raises(ValueError, match=r"token pattern '\[' is neither a pattern name "
                                         r"\('unicode', 'ascii'\) nor a regular expression"):
        TextSettings(pattern="[")


# -------------------------------------------------------------------- build
def test_build_maps_words_to_the_graph_assignment(built, files):
    index, report = built
    words, rows = tc.vectors(extra_words=("space99", "music99"))
    table = read_words(index.catalog)
    corpus_words = {w for d in tc.corpus() for w in d["text"].lower().rstrip(".").split()}
    assert set(table) == corpus_words  # exactly the corpus's words with vectors
    nodes = {w: n for w, (n, _) in table.items()}
    # A word sits at the node whose centre is nearest its vector.
    coords = index.graph.coords
    for word in table:
        vec = rows[words.index(word)].astype(np.float64)
        d = ((coords - vec) ** 2).sum(1)
        assert d[nodes[word]] == pytest.approx(d.min())
    assert report["vocabulary"] == len(corpus_words)
    assert report["token_coverage"] == 1.0
    assert len(index) == 60


def test_stored_document_measures_follow_the_word_counts(built):
    index, _ = built
    doc = tc.corpus()[5]
    stored = index.get(doc["key"])
    nodes = {w: n for w, (n, _) in read_words(index.catalog).items()}
    counts = Counter(doc["text"].lower().rstrip(".").split())
    expected = Counter()
    for word, c in counts.items():
        expected[nodes[word]] += c
    total = sum(expected.values())
    got = dict(zip(stored["nodes"].tolist(), stored["masses"].tolist()))
    assert got == pytest.approx({n: c / total for n, c in expected.items()})
    assert stored["label"] == doc["label"]
    assert stored["fields"]["text"] == doc["text"]


def test_text_search_finds_the_topic(built):
    index, _ = built
    found = index.search(text_measures(index, ["space1 space2 space3", "music4 music5"]), k=5)
    assert all(label == "space" for label in found.labels[0])
    assert all(label == "music" for label in found.labels[1])


def test_unknown_words_take_the_nearest_node_when_vectors_are_given(built, files):
    index, _ = built
    _, vectors_path = files
    before = len(index)
    report = add_documents(index, [{"key": "new", "text": "space99 space99 music99", "label": "x"}],
                           vectors_path)
    assert report["new_words"] == 2 and report["added"] == ["new"]
    table = read_words(index.catalog)
    words, rows = tc.vectors(extra_words=("space99", "music99"))
    expected = index.graph.nearest_nodes(rows[[words.index("space99"), words.index("music99")]])
    assert [table["space99"][0], table["music99"][0]] == expected.tolist()
    assert len(index) == before + 1
    # The new words are stored: a reader needs no vectors to use them.
    index.close()
    with SobolevIndex.open(index.path) as reader:
        assert text_measures(reader, "space99")[0][0].tolist() == [table["space99"][0]]


def test_documents_without_known_words_fail_or_are_skipped(built):
    index, _ = built
    before = len(index)
    docs = [{"key": "ok", "text": "space1"}, {"key": "empty", "text": "zzz qqq"}]
    with pytest.raises(CorpusError, match="empty has no word the index knows"):
        add_documents(index, docs)
    assert len(index) == before and "ok" not in index  # nothing written
    with pytest.warns(RuntimeWarning, match="skipped 1 document"):
        report = add_documents(index, docs, skip_empty=True)
    assert report["added"] == ["ok"] and report["skipped"] == ["empty"]


def test_duplicate_keys_are_refused_before_writing(built):
    index, _ = built
    before = len(index)
    with pytest.raises(CorpusError, match="appears twice"):
        add_documents(index, [{"key": "k", "text": "space1"}, {"key": "k", "text": "space2"}])
    with pytest.raises(CorpusError, match="already in the index"):
        add_documents(index, [{"key": "z", "text": "space1"}, {"key": "space-0", "text": "music1"}])
    assert len(index) == before and "z" not in index


def test_query_without_known_words_is_an_error(built):
    index, _ = built
    with pytest.raises(InvalidMeasureError, match="no word the index knows"):
        text_measures(index, "nothing known here")


def test_build_with_word_vectors_object_and_tfidf(tmp_path):
    words, rows = tc.vectors()
    index, report = build_index(str(tmp_path / "ix"), tc.corpus(), WordVectors(words, rows),
                                nodes=6, roots=2, settings=TextSettings(weighting="tfidf"))
    with index:
        assert len(index.roots) == 2 and index.graph.n_nodes == 6
        assert TextEncoder.of_index(index).settings.n_documents == 60


def test_build_refuses_a_corpus_without_vectors(tmp_path):
    words, rows = tc.vectors()
    with pytest.raises(CorpusError, match=r"none of the corpus's 2 distinct words \(besides stop "
                                          r"words\) has a vector in the 41 word vectors given"):
        build_index(str(tmp_path / "ix"), [{"text": "unknown words"}], WordVectors(words, rows))
    assert not os.path.exists(tmp_path / "ix")


def test_plain_measure_index_is_not_a_text_index(tmp_path):
    from sobolev_index import Graph

    rng = np.random.default_rng(0)
    graph = Graph.from_points(rng.normal(size=(50, 2)), n_nodes=10)
    with SobolevIndex.create(str(tmp_path / "plain"), graph) as index:
        with pytest.raises(CorpusError, match="was not built from text"):
            add_documents(index, ["some text"])


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    words, rows = tc.vectors()
    docs = tc.corpus()[:5] + [{"key": "hollow", "text": "only unknown tokens"}]
    with pytest.raises(CorpusError, match="hollow has no word the index knows"):
        build_index(str(tmp_path / "ix"), docs, WordVectors(words, rows), nodes=5)
    assert not (tmp_path / "ix").exists()
    (tmp_path / "given").mkdir()
    with pytest.raises(CorpusError):
        build_index(str(tmp_path / "given"), docs, WordVectors(words, rows), nodes=5)
    assert (tmp_path / "given").is_dir() and not list((tmp_path / "given").iterdir())


def test_build_reports_progress_by_stage(tmp_path, files):
    corpus_path, vectors_path = files
    seen = {}
    index, _ = build_index(str(tmp_path / "ix"), read_corpus(corpus_path), vectors_path, nodes=8,
                           progress=lambda stage, done, total: seen.setdefault(stage, []).append(
                               (done, total)))
    index.close()
    assert list(seen) == ["reading", "vectors", "graph", "adding"]
    assert seen["adding"][-1] == (60, 60)
    assert seen["vectors"][-1][0] <= seen["vectors"][-1][1] == os.path.getsize(vectors_path)


@pytest.mark.parametrize("pattern, expected", [
    (r"[a-z]+('[a-z]+)?", ["don't", "stop", "the", "cat's", "toy"]),  # groups: whole matches
    (r"[a-z]*", ["don", "t", "stop", "the", "cat", "s", "toy"]),       # no empty words
])
def test_token_patterns_give_whole_non_empty_words(pattern, expected):
    assert TextSettings(pattern=pattern).tokens("Don't stop the cat's toy") == expected


def test_corpus_formats_are_recognised_or_warned_about(tmp_path, monkeypatch):
    import io
    import warnings as warnings_module

    labelled = tmp_path / "labelled.txt"
    labelled.write_text("news\tthe first story\nsport\tthe second story\n", encoding="utf-8")
    docs = list(read_corpus(str(labelled)))
    assert [(d["label"], d["text"]) for d in docs] == [("news", "the first story"),
                                                        ("sport", "the second story")]
    # a byte-order mark is not part of the first label or key
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + b'{"key": "a", "text": "x"}\n')
    assert [d["key"] for d in read_corpus(str(bom))] == ["a"]
    # one long plain file: one document, and a warning naming the formats
    plain_lines = tmp_path / "big.txt"
    plain_lines.write_text("".join(f"label{i % 3} some words of row {i}\n" for i in range(3000)),
                           encoding="utf-8")
    with warnings_module.catch_warnings(record=True) as caught:
        warnings_module.simplefilter("always")
        docs = list(read_corpus(str(plain_lines)))
    assert len(docs) == 1 and any("plain-lines" in str(w.message) for w in caught)
    # queries: plain text is one per line, from a file or from stdin
    queries = tmp_path / "q.txt"
    queries.write_text("first query\n\nsecond query\n", encoding="utf-8")
    assert [d["text"] for d in read_corpus(str(queries), plain="plain-lines")] == \
        ["first query", "second query"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\nfirst query\nsecond query\n"))
    assert [d["text"] for d in read_corpus("-", plain="plain-lines")] == \
        ["first query", "second query"]


# ------------------------------------------- token pattern stored with the index
OLD_REGEX = r"[a-z0-9][a-z0-9']*"  # what every index of earlier releases stores


def _cafe_vectors():
    """The test vectors plus "caf" (by the space words) and "café" (by the
    music words): which of them a "Café" becomes shows which pattern read it."""
    words, rows = tc.vectors()
    extra = np.vstack([rows[words.index("space0")], rows[words.index("music0")]])
    return WordVectors(words + ["caf", "café"], np.vstack([rows, extra]))


def _cafe_corpus():
    return tc.corpus() + [{"key": "cafe-1", "text": "Café space1"},
                          {"key": "cafe-2", "text": "café music2"}]


@pytest.mark.parametrize("pattern", ["ascii", OLD_REGEX])
def test_an_index_reads_text_with_the_pattern_it_was_built_with(tmp_path, pattern):
    path = str(tmp_path / "ix")
    index, _ = build_index(path, _cafe_corpus(), _cafe_vectors(), nodes=10,
                           settings=TextSettings(pattern=pattern))
    index.close()
    with SobolevIndex.open(path, mode="a") as index:
        # the pattern is stored as given: a name, or (as earlier releases
        # stored their default) the regex itself
        assert index.catalog.meta_value("text")["pattern"] == pattern
        nodes = {w: n for w, (n, _) in read_words(index.catalog).items()}
        assert "caf" in nodes and "café" not in nodes
        # a query and a later document are read with it, not with the new default
        assert text_measures(index, ["Café"])[0][0].tolist() == [nodes["caf"]]
        add_documents(index, [{"key": "later", "text": "CAFÉ"}])
        assert index.get("later")["nodes"].tolist() == [nodes["caf"]]


def test_a_new_index_stores_the_unicode_pattern_by_name(tmp_path):
    index, _ = build_index(str(tmp_path / "ix"), _cafe_corpus(), _cafe_vectors(), nodes=10)
    with index:
        assert index.catalog.meta_value("text")["pattern"] == "unicode"
        nodes = {w: n for w, (n, _) in read_words(index.catalog).items()}
        assert "café" in nodes and "caf" not in nodes
        assert text_measures(index, ["CAFE\u0301"])[0][0].tolist() == [nodes["café"]]


# ------------------------------------------------------------- encodings
def test_read_corpus_decodes_the_given_encoding(tmp_path, monkeypatch):
    import io

    jsonl = tmp_path / "latin.jsonl"
    jsonl.write_bytes('{"key": "k", "text": "Café naïve"}\n'.encode("latin-1"))
    assert [d["text"] for d in read_corpus(str(jsonl), encoding="latin-1")] == ["Café naïve"]
    with pytest.raises(CorpusError, match=r"latin.jsonl is not utf-8 text: line 1, byte offset "
                                          r"25 \(0xe9\).*encoding 'cp1252'"):
        list(read_corpus(str(jsonl)))
    folder = tmp_path / "docs"
    (folder / "fr").mkdir(parents=True)
    (folder / "fr" / "a.txt").write_bytes("déjà “vu”".encode("cp1252"))
    assert [d["text"] for d in read_corpus(str(folder), encoding="cp1252")] == ["déjà “vu”"]
    lines = tmp_path / "tweets.txt"
    lines.write_bytes('"pos"\tsüß\n'.encode("utf-16"))
    assert [(d["label"], d["text"]) for d in read_corpus(str(lines), encoding="utf-16")] == \
        [("pos", "süß")]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("Zürich\n".encode("latin-1"))))
    assert [d["text"] for d in read_corpus("-", plain="plain-lines", encoding="latin-1")] == \
        ["Zürich"]
    with pytest.raises(ValueError, match="encoding 'latin-9000' is not a text encoding"):
        list(read_corpus(str(jsonl), encoding="latin-9000"))


def test_a_binary_file_is_not_a_document(tmp_path):
    import zipfile

    archive = tmp_path / "corpus.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("a.txt", "some text " * 50)
    # latin-1 decodes every byte: the NUL characters give a binary file away
    with pytest.raises(CorpusError, match="corpus.zip line 1 holds a NUL character"):
        list(read_corpus(str(archive), encoding="latin-1"))
    with pytest.raises(CorpusError, match="corpus.zip is not utf-8 text"):
        list(read_corpus(str(archive)))


def test_undecodable_files_write_nothing_and_the_encoding_reads_them(tmp_path, files):
    from _support.index import assert_unchanged, snapshot

    from sobolev_index.ingest.pipelines import add_files, build_from_files, query_measures

    corpus_path, vectors_path = files
    latin = tmp_path / "more.txt"
    latin.write_bytes("space1 space2 café\n".encode("latin-1"))
    with pytest.raises(CorpusError, match="more.txt is not utf-8 text"):
        build_from_files(str(tmp_path / "ix"), corpus=[corpus_path, str(latin)],
                         vectors=vectors_path, nodes=8)
    assert not (tmp_path / "ix").exists()
    index, _ = build_from_files(str(tmp_path / "ix"), corpus=[corpus_path], vectors=vectors_path,
                                nodes=8)
    with index:
        before = snapshot(index.path)
        with pytest.raises(CorpusError, match="more.txt is not utf-8 text"):
            add_files(index, [str(latin)])
        with pytest.raises(ValueError, match="encoding 'nope' is not a text encoding"):
            add_files(index, [str(latin)], encoding="nope")
        assert_unchanged(before, index.path, "add of an undecodable file")
        assert add_files(index, [str(latin)], encoding="latin-1")["added"] == ["more"]
        assert index.get("more")["fields"]["text"] == "space1 space2 café\n"
        measures, names = query_measures(index, files=[str(latin)], encoding="latin-1")
        assert names == ["space1 space2 café"] and len(measures) == 1
    with pytest.raises(ValueError, match="point-cloud and diagram files are read as UTF-8"):
        build_from_files(str(tmp_path / "pts"), points=[str(latin)], encoding="latin-1")
    assert not (tmp_path / "pts").exists()
