"""Word vectors learned from a corpus itself: ``learn_vectors``,
``write_vectors``, ``sobolev-index vectors`` and ``build --vectors learn``.

The vectors' math (PPMI, U sqrt(S)) is checked against its own
construction in test_stdlib_corpus.py; here the corpus-level behaviour: the
words and options used, the neighbours of words with known relatives on the
standard library's docstrings, files that read back, and a build and a
search end to end."""
import csv
import json
import os

import numpy as np
import pytest
from _support import corpus as tc
from _support.cli import run

from sobolev_index import SobolevIndex
from sobolev_index.errors import SkippedDocumentsWarning
from sobolev_index.ingest.documents import build_index, text_measures
from sobolev_index.ingest.embeddings import load_vectors
from sobolev_index.ingest.learn import learn_vectors, nearest_words, write_vectors
from sobolev_index.ingest.stdlib_corpus import stdlib_documents
from sobolev_index.ingest.text import tokenize


@pytest.fixture(scope="module")
def stdlib_docs():
    return stdlib_documents()


# The modules the searches below look for, kept whole in the smaller corpus.
SEARCHED = {"gzip", "zlib", "bz2", "lzma", "datetime", "time", "calendar", "fileinput", "io"}


@pytest.fixture(scope="module")
def some_docs(stdlib_docs):
    """About a third of the docstrings, the searched modules among them:
    enough to learn vectors from, quicker to build."""
    return [doc for i, doc in enumerate(stdlib_docs) if doc["label"] in SEARCHED or i % 4 == 0]


@pytest.fixture(scope="module")
def stdlib_csv(tmp_path_factory, some_docs):
    """Those docstrings as a user's CSV: id, text (with commas, quotes and
    newlines inside), label."""
    path = tmp_path_factory.mktemp("stdlib-csv") / "docs.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text", "label"])
        for doc in some_docs:
            writer.writerow([doc["key"], doc["text"], doc["label"]])
    assert any("\n" in doc["text"] and "," in doc["text"] for doc in some_docs)
    return path


@pytest.fixture(scope="module")
def learned(stdlib_docs):
    return learn_vectors(stdlib_docs)


@pytest.mark.slow
def test_learned_words_are_those_seen_min_count_times(stdlib_docs, learned):
    vectors, report = learned
    counts = {}
    for doc in stdlib_docs:
        for word in tokenize(doc["text"]):  # the build's default pattern, stop words kept
            counts[word] = counts.get(word, 0) + 1
    assert set(vectors.words) == {w for w, c in counts.items() if c >= 2}
    assert vectors.dim == 100 and vectors.vectors.dtype == np.float32
    assert report["documents"] == len(stdlib_docs)
    assert report["tokens"] == sum(counts.values())
    assert report["distinct_words"] == len(counts) and report["words"] == len(vectors)
    assert (report["dim"], report["dim_asked"], report["window"], report["min_count"]) == \
        (100, 100, 5, 2)


@pytest.mark.parametrize("word, relatives", [
    ("json", {"dumps", "loads", "jsonencoder", "decoder", "encoder"}),
    ("socket", {"sockets", "sock", "af", "socketpair"}),
    ("thread", {"threads", "threading", "lock"}),
])
@pytest.mark.slow
def test_neighbours_of_a_word_include_its_relatives(learned, word, relatives):
    vectors, _ = learned
    neighbours = {w for w, _ in nearest_words(vectors, word, n=10)}
    assert neighbours & relatives, (word, neighbours)


@pytest.mark.slow
def test_same_corpus_and_seed_same_vectors_any_thread_count(some_docs):
    one, _ = learn_vectors(some_docs, dim=30, threads=1)
    two, _ = learn_vectors(some_docs, dim=30, threads=2)
    assert one.words == two.words
    np.testing.assert_allclose(one.vectors, two.vectors, atol=1e-4)


def test_a_small_corpus_lowers_dim_and_says_so():
    docs = ["alpha beta gamma delta", "alpha beta gamma", "beta gamma delta alpha"]
    vectors, report = learn_vectors(docs, dim=100, min_count=2)
    assert vectors.words == ["alpha", "beta", "gamma", "delta"]
    assert (report["dim"], report["dim_asked"]) == (3, 100) and vectors.dim == 3


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="no documents"):
        learn_vectors([])
    with pytest.raises(ValueError, match="only 0 of the corpus's 3 distinct words appear at "
                                         r"least 2 times \(min_count\)"):
        learn_vectors(["one two three"])
    with pytest.raises(ValueError, match="document 1 is 3; expected a str or a dict"):
        learn_vectors(["a b", 3])
    with pytest.raises(ValueError, match="window=0"):
        learn_vectors(["a b a b"], window=0)


@pytest.mark.parametrize("name", ["v.bin", "v.vec", "v.txt", "v.bin.gz", "v.txt.gz"])
def test_written_vectors_read_back(tmp_path, name):
    # vectors learned from the test corpus: quicker than the docstrings'
    vectors, _ = learn_vectors([doc["text"] for doc in tc.corpus()], dim=16, min_count=1)
    assert len(vectors.words) > 30
    path = write_vectors(tmp_path / name, vectors)
    again = load_vectors(path)
    assert again.words == vectors.words
    np.testing.assert_allclose(again.vectors, vectors.vectors, rtol=1e-6)
    assert os.listdir(tmp_path) == [name]  # nothing else left behind


def test_write_vectors_refuses_what_it_cannot_write(tmp_path):
    vectors, _ = learn_vectors([doc["text"] for doc in tc.corpus()], dim=16, min_count=1)
    (tmp_path / "taken.bin").write_bytes(b"mine")
    with pytest.raises(ValueError, match="exists; choose a new file name"):
        write_vectors(tmp_path / "taken.bin", vectors)
    assert (tmp_path / "taken.bin").read_bytes() == b"mine"
    with pytest.raises(ValueError, match=r"expected a file name ending in \.bin"):
        write_vectors(tmp_path / "v.npy", vectors)
    with pytest.raises(ValueError, match="does not exist"):
        write_vectors(tmp_path / "no" / "v.bin", vectors)


@pytest.mark.slow
def test_build_with_learned_vectors_keeps_them_in_the_index(tmp_path, some_docs):
    docs = some_docs
    index, report = build_index(tmp_path / "ix", docs, "learn", skip_empty=True,
                                learn={"dim": 20})
    with index:
        kept = os.path.join(index.path, "learned-vectors.bin")
        assert os.path.exists(kept)
        expected, _ = learn_vectors(docs, dim=20)
        np.testing.assert_allclose(load_vectors(kept).vectors, expected.vectors, atol=1e-5)
        assert report["learned"]["dim"] == 20 and report["learned"]["words"] == len(expected)
        hits = index.search(text_measures(index, "read a file line by line"), k=3)
        assert hits.keys[0][0].startswith("fileinput")
    # moved elsewhere, the index still finds its vectors
    os.rename(tmp_path / "ix", tmp_path / "moved")
    from sobolev_index.ingest.documents import stored_vectors_path

    with SobolevIndex.open(tmp_path / "moved") as moved:
        assert stored_vectors_path(moved) == os.path.join(str(tmp_path / "moved"),
                                                          "learned-vectors.bin")
    with pytest.raises(ValueError, match="learn has 'dims'"):
        build_index(tmp_path / "other", docs, "learn", learn={"dims": 20})
    assert not (tmp_path / "other").exists()


# ------------------------------------------------------------- command line
@pytest.mark.slow
def test_cli_vectors_then_build_then_search(tmp_path, stdlib_csv):
    out = json.loads(run("vectors", stdlib_csv, tmp_path / "v.bin", "--json", "--silent").stdout)
    vectors = load_vectors(tmp_path / "v.bin")
    assert out["words"] == len(vectors) and out["dim"] == vectors.dim == 100
    assert out["path"] == str(tmp_path / "v.bin")
    run("build", tmp_path / "ix", "--corpus", stdlib_csv, "--vectors", tmp_path / "v.bin",
        "--skip-empty", "--silent")
    found = json.loads(run("search", tmp_path / "ix", "--text", "compress data with gzip",
                           "-k", 3, "--json").stdout)
    assert any(hit["key"].startswith("gzip") for hit in found[0])
    # the output is never written over
    again = run("vectors", stdlib_csv, tmp_path / "v.bin", ok=False)
    assert again.exit_code == 1 and "exists" in again.output


@pytest.mark.slow
def test_cli_build_vectors_learn_in_one_step(tmp_path, stdlib_csv):
    result = run("build", tmp_path / "ix", "--corpus", stdlib_csv, "--vectors", "learn",
                 "--skip-empty", "--json", "--silent")
    out = json.loads(result.stdout)
    assert out["learned"]["path"] == str(tmp_path / "ix" / "learned-vectors.bin")
    assert out["learned"]["min_count"] == 2 and out["learned"]["dim"] == 100
    info = json.loads(run("info", tmp_path / "ix", "--json").stdout)
    assert info["vectors"] == out["learned"]["path"]
    found = json.loads(run("search", tmp_path / "ix", "--text", "current date and time", "-k", 3,
                           "--json").stdout)
    assert any(hit["key"].startswith("datetime") for hit in found[0])


def test_cli_build_without_vectors_names_both_ways(tmp_path):
    corpus_path, _ = tc.make_files(str(tmp_path))
    result = run("build", tmp_path / "ix", "--corpus", corpus_path, ok=False)
    assert result.exit_code == 2
    assert "--vectors FILE" in result.output and "--vectors learn" in result.output
    assert ".bin" in result.output and ".vec" in result.output and "GloVe" in result.output
    assert not (tmp_path / "ix").exists()


def test_words_with_no_context_get_no_vector(tmp_path):
    # Each "lonelyN" is seen twice, always alone: it co-occurs with nothing,
    # so its PPMI row, and its vector, are zero. Zero vectors would be graph
    # nodes a rounding error apart, with ties in every shortest path.
    lonely = [f"lonely{i}" for i in range(6)]
    docs = tc.corpus(per_topic=40) + [word for word in lonely for _ in range(2)]
    vectors, report = learn_vectors(docs, dim=20)
    assert not set(lonely) & set(vectors.words)
    assert report["zero_vectors"] == len(lonely)
    assert np.linalg.norm(vectors.vectors, axis=1).min() > 1e-3
    with pytest.warns(SkippedDocumentsWarning, match="skipped 12 document"):
        index, built = build_index(tmp_path / "ix", docs, "learn", learn={"dim": 20},
                                   skip_empty=True)
    with index:
        assert len(built["skipped"]) == 2 * len(lonely)
        assert len(index) == len(docs) - 2 * len(lonely)


def test_cli_defaults_are_the_librarys():
    # `vectors` and `build --vectors learn` must learn the same vectors.
    from sobolev_index.cli import main
    from sobolev_index.ingest.learn import LEARN_DEFAULTS

    defaults = {param.name: param.default for param in main.commands["vectors"].params}
    assert {name: defaults[name] for name in LEARN_DEFAULTS} == LEARN_DEFAULTS
