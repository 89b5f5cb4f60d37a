"""Word-vector readers: round trips, streaming subsets, case folding and errors.

Files are written here by code independent of the readers (struct / tobytes
for the binary format, repr of floats for text) so a reader and its writer
cannot agree on the same mistake.
"""
import gzip
import re
import struct

import numpy as np
import pytest
from _support.corpus import word2vec_text, write_vec
from _support.data import data_dir, missing_reason

from sobolev_index.errors import VectorFileError
from sobolev_index.ingest import embeddings
from sobolev_index.ingest.embeddings import (
    WordVectors,
    load_vectors,
    vector_file_info,
    write_word2vec_binary,
    write_word2vec_text,
)

TWITTER = data_dir() / "twitter" / "twitter-minilm-384.bin"

NEWLINE = b"\n"
WORDS = ["the", "of", "café", "日本", "don't", "x", "a" * 40, "Apple", "apple", "42"]


def random_vectors(n, dim, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def binary_bytes(words, vectors, before=b"", after=b"", count=None):
    """word2vec binary bytes, built with struct: header, then per word
    ``before + word + b" " + float32 LE values + after``."""
    dim = vectors.shape[1]
    out = [f"{len(words) if count is None else count} {dim}\n".encode()]
    for word, vector in zip(words, vectors):
        raw = word if isinstance(word, bytes) else word.encode("utf-8")
        out.append(before + raw + b" " + struct.pack(f"<{dim}f", *vector.tolist()) + after)
    return b"".join(out)


def record_offsets(words, dim, before=b"", after=b""):
    """Byte offset of each word's first byte in ``binary_bytes``."""
    offsets = []
    position = len(f"{len(words)} {dim}\n".encode())
    for word in words:
        position += len(before)
        offsets.append(position)
        position += len(word.encode("utf-8")) + 1 + 4 * dim + len(after)
    return offsets


def expected_subset(words, vectors, wanted):
    rows = [i for i, w in enumerate(words) if w in set(wanted)]
    return [words[i] for i in rows], vectors[rows]


def message(excinfo):
    return str(excinfo.value)


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("before, after", [(b"", b""), (b"\n", b""), (b"", b"\n"), (b"\n\n", b"")],
                         ids=["bare", "newline-before", "newline-after", "two-newlines"])
def test_binary_reads_independently_written_bytes(tmp_path, before, after):
    vectors = random_vectors(len(WORDS), 13)
    path = tmp_path / "v.bin"
    path.write_bytes(binary_bytes(WORDS, vectors, before, after))
    wv = load_vectors(path)
    assert wv.words == WORDS
    assert wv.vectors.dtype == np.float32
    np.testing.assert_array_equal(wv.vectors, vectors)


def test_binary_writer_round_trip_and_matches_struct_layout(tmp_path):
    vectors = random_vectors(len(WORDS), 5, seed=1)
    path = tmp_path / "v.bin"
    write_word2vec_binary(path, WORDS, vectors)
    # word2vec's own writer puts a newline after each vector; so does ours
    assert path.read_bytes() == binary_bytes(WORDS, vectors, after=b"\n")
    wv = load_vectors(path)
    assert wv.words == WORDS
    np.testing.assert_array_equal(wv.vectors, vectors)


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096])
@pytest.mark.parametrize("subset", [False, True])
def test_binary_records_straddling_read_chunks(tmp_path, monkeypatch, chunk, subset):
    # Small chunks put chunk boundaries inside words, spaces and vectors, and
    # make unwanted vectors overrun the buffer so the reader seeks past them.
    monkeypatch.setattr(embeddings, "_CHUNK", chunk)
    words = [f"w{i}" * (1 + i % 5) for i in range(60)]
    vectors = random_vectors(60, 9, seed=2)
    path = tmp_path / "v.bin"
    path.write_bytes(binary_bytes(words, vectors, before=b"\n"))
    wanted = words[::7] + [words[-1]] if subset else None
    wv = load_vectors(path, wanted)
    exp_words, exp_vectors = expected_subset(words, vectors, wanted or words)
    assert wv.words == exp_words
    np.testing.assert_array_equal(wv.vectors, exp_vectors)


@pytest.mark.parametrize("variant", ["plain", "crlf", "trailing-space"])
def test_word2vec_text_round_trip(tmp_path, variant):
    vectors = random_vectors(len(WORDS), 6, seed=3)
    kwargs = {"crlf": {"end": "\r\n"}, "trailing-space": {"trailing": " "}}.get(variant, {})
    path = write_vec(tmp_path / "v.vec", WORDS, vectors, **kwargs)
    wv = load_vectors(path)
    assert wv.words == WORDS
    np.testing.assert_array_equal(wv.vectors, vectors)
    assert vector_file_info(path) == {"format": "word2vec-text", "count": len(WORDS), "dim": 6}


def test_glove_round_trip_with_blank_last_line(tmp_path):
    vectors = random_vectors(len(WORDS), 4, seed=4)
    path = tmp_path / "glove.txt"
    path.write_text(word2vec_text(WORDS, vectors, header=False) + "\n", encoding="utf-8")
    wv = load_vectors(path)
    assert wv.words == WORDS
    np.testing.assert_array_equal(wv.vectors, vectors)
    assert vector_file_info(path) == {"format": "glove", "count": None, "dim": 4}


def test_package_text_writer_round_trips_exactly(tmp_path):
    vectors = random_vectors(len(WORDS), 8, seed=5) * np.float32(1e-3)
    write_word2vec_text(tmp_path / "a.vec", WORDS, vectors)
    write_word2vec_text(tmp_path / "a.txt", WORDS, vectors, header=False)
    for name, fmt in [("a.vec", "word2vec-text"), ("a.txt", "glove")]:
        wv = load_vectors(tmp_path / name)
        assert vector_file_info(tmp_path / name)["format"] == fmt
        assert wv.words == WORDS
        np.testing.assert_array_equal(wv.vectors, vectors)


def test_gzip_text_and_binary(tmp_path):
    vectors = random_vectors(len(WORDS), 5, seed=6)
    with gzip.open(tmp_path / "v.vec.gz", "wb") as handle:
        handle.write(word2vec_text(WORDS, vectors).encode("utf-8"))
    with gzip.open(tmp_path / "v.bin.gz", "wb") as handle:
        handle.write(binary_bytes(WORDS, vectors))
    for name in ("v.vec.gz", "v.bin.gz"):
        wv = load_vectors(tmp_path / name)
        assert wv.words == WORDS, name
        np.testing.assert_array_equal(wv.vectors, vectors)
        sub = load_vectors(tmp_path / name, ["x", "of", "missing"])
        assert sub.words == ["of", "x"]
        np.testing.assert_array_equal(sub.vectors, vectors[[1, 5]])


@pytest.mark.parametrize("vocab_name", ["v.vocab", "v.txt", "explicit"])
def test_npy_with_vocabulary(tmp_path, vocab_name):
    vectors = random_vectors(len(WORDS), 7, seed=7).astype(np.float64)
    np.save(tmp_path / "v.npy", vectors)
    # extra fields (counts) after the word are ignored
    lines = "".join(f"{w}\t{100 - i}\n" for i, w in enumerate(WORDS))
    vocab_path = tmp_path / ("words.list" if vocab_name == "explicit" else vocab_name)
    vocab_path.write_text(lines, encoding="utf-8")
    vocab = vocab_path if vocab_name == "explicit" else None
    wv = load_vectors(tmp_path / "v.npy", vocab=vocab)
    assert wv.words == WORDS
    np.testing.assert_array_equal(wv.vectors, vectors.astype(np.float32))
    sub = load_vectors(tmp_path / "v.npy", ["42", "the", "nope"], vocab=vocab)
    assert sub.words == ["the", "42"]
    np.testing.assert_array_equal(sub.vectors, vectors[[0, 9]].astype(np.float32))
    info = vector_file_info(tmp_path / "v.npy", vocab=vocab)
    assert (info["format"], info["count"], info["dim"]) == ("npy", len(WORDS), 7)
    assert info["vocab"] == str(vocab_path)


def test_dtype_float64_keeps_text_precision(tmp_path):
    vectors = np.random.default_rng(8).normal(size=(4, 3))
    path = tmp_path / "v.vec"
    path.write_text(word2vec_text(["a", "b", "c", "d"], vectors))
    wv = load_vectors(path, dtype=np.float64)
    assert wv.vectors.dtype == np.float64
    np.testing.assert_array_equal(wv.vectors, vectors)
    assert load_vectors(path).vectors.dtype == np.float32
    with pytest.raises(ValueError, match="floating-point"):
        load_vectors(path, dtype=np.int32)


# ----------------------------------------------------------- streaming subset


FORMATS = ["word2vec-bin", "word2vec-text", "glove", "npy"]


def write_format(tmp_path, fmt, words, vectors):
    if fmt == "word2vec-bin":
        path = tmp_path / "v.bin"
        path.write_bytes(binary_bytes(words, vectors, after=b"\n"))
    elif fmt == "word2vec-text":
        path = write_vec(tmp_path / "v.vec", words, vectors)
    elif fmt == "glove":
        path = write_vec(tmp_path / "v.txt", words, vectors, header=False)
    else:
        path = tmp_path / "v.npy"
        np.save(path, vectors)
        (tmp_path / "v.vocab").write_text("".join(w + "\n" for w in words), encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_streaming_subset_returns_exactly_the_wanted_words(tmp_path, fmt):
    words = [f"word{i}" for i in range(500)]
    vectors = random_vectors(500, 10, seed=9)
    path = write_format(tmp_path, fmt, words, vectors)
    wanted = {"word499", "word0", "word250", "word13", "absent", "WORD1"}
    wv = load_vectors(path, iter(sorted(wanted)))  # any iterable, even one-shot
    assert wv.words == ["word0", "word13", "word250", "word499"]  # file order
    np.testing.assert_array_equal(wv.vectors, vectors[[0, 13, 250, 499]])
    assert len(load_vectors(path, [])) == 0
    assert load_vectors(path, []).dim == 10


@pytest.mark.parametrize("fmt", ["word2vec-bin", "word2vec-text", "glove"])
def test_streaming_stops_once_every_word_is_found(tmp_path, fmt):
    words = [f"w{i}" for i in range(50)]
    vectors = random_vectors(50, 4, seed=10)
    path = write_format(tmp_path, fmt, words, vectors)
    data = path.read_bytes()
    # the last record loses its last value
    path.write_bytes(data[:-7] if fmt == "word2vec-bin" else data.rsplit(b" ", 1)[0] + b"\n")
    wv = load_vectors(path, ["w3", "w10"])
    assert wv.words == ["w3", "w10"]
    np.testing.assert_array_equal(wv.vectors, vectors[[3, 10]])
    with pytest.raises(VectorFileError):
        load_vectors(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_fold_case_first_occurrence_wins(tmp_path, fmt):
    words = ["The", "Apple", "apple", "APPLE", "the", "pear"]
    vectors = random_vectors(len(words), 3, seed=11)
    path = write_format(tmp_path, fmt, words, vectors)

    exact = load_vectors(path)
    assert exact.words == words

    folded = load_vectors(path, fold_case=True)
    assert folded.words == ["the", "apple", "pear"]
    np.testing.assert_array_equal(folded.vectors, vectors[[0, 1, 5]])

    wanted = load_vectors(path, ["apple", "pear"], fold_case=True)
    assert wanted.words == ["apple", "pear"]
    np.testing.assert_array_equal(wanted.vectors, vectors[[1, 5]])

    # without folding, "apple" is its own (third) row
    plain = load_vectors(path, ["apple"])
    np.testing.assert_array_equal(plain.vectors, vectors[[2]])


@pytest.mark.parametrize("fmt", FORMATS)
def test_duplicated_word_first_occurrence_wins(tmp_path, fmt):
    words = ["a", "b", "a", "c", "b"]
    vectors = random_vectors(5, 3, seed=12)
    path = write_format(tmp_path, fmt, words, vectors)
    wv = load_vectors(path)
    assert wv.words == ["a", "b", "c"]
    np.testing.assert_array_equal(wv.vectors, vectors[[0, 1, 3]])
    sub = load_vectors(path, ["b"])
    np.testing.assert_array_equal(sub.vectors, vectors[[1]])


def test_invalid_utf8_word_is_read_as_latin1(tmp_path):
    vectors = random_vectors(3, 4, seed=13)
    path = tmp_path / "v.bin"
    path.write_bytes(binary_bytes([b"ok", b"caf\xe9", "日本".encode()], vectors))
    wv = load_vectors(path)
    assert wv.words == ["ok", "café", "日本"]
    np.testing.assert_array_equal(wv.vectors, vectors)
    assert load_vectors(path, ["café"]).words == ["café"]


def test_glove_word_with_spaces(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("the 1 2 3\n. . . 4 5 6\nend 7 8 9\n")
    wv = load_vectors(path)
    assert wv.words == ["the", ". . .", "end"]
    np.testing.assert_array_equal(wv.vectors, [[1, 2, 3], [4, 5, 6], [7, 8, 9]])


def test_progress_reports_bytes_about_once_per_megabyte(tmp_path):
    words = [f"w{i}" for i in range(3000)]
    path = tmp_path / "v.bin"
    path.write_bytes(binary_bytes(words, random_vectors(3000, 300, seed=14)))
    size = path.stat().st_size
    for wanted in (None, ["w5", "absent"]):
        calls = []
        load_vectors(path, wanted, progress=calls.append)
        assert calls[-1] == size
        assert calls == sorted(calls)
        assert 2 <= len(calls) <= size // (1 << 20) + 2


def test_auto_detection_by_content(tmp_path):
    vectors = random_vectors(4, 300, seed=15)
    words = ["a", "b", "c", "d"]
    (tmp_path / "binary.w2v").write_bytes(binary_bytes(words, vectors))
    (tmp_path / "text.w2v").write_text(word2vec_text(words, vectors))
    (tmp_path / "glove.w2v").write_text(word2vec_text(words, vectors, header=False))
    with open(tmp_path / "array.data", "wb") as handle:
        np.save(handle, vectors)
    (tmp_path / "array.vocab").write_text("a\nb\nc\nd\n")
    for name, fmt in [("binary.w2v", "word2vec-bin"), ("text.w2v", "word2vec-text"),
                      ("glove.w2v", "glove"), ("array.data", "npy")]:
        assert vector_file_info(tmp_path / name)["format"] == fmt
        wv = load_vectors(tmp_path / name)
        np.testing.assert_array_equal(wv.vectors, vectors)


# ---------------------------------------------------------------------- errors


def test_truncated_binary_record_names_its_offset(tmp_path):
    words = [f"w{i}" for i in range(20)]
    vectors = random_vectors(20, 8, seed=16)
    offsets = record_offsets(words, 8, after=b"\n")
    data = binary_bytes(words, vectors, after=b"\n")
    path = tmp_path / "v.bin"
    path.write_bytes(data[: offsets[17] + len("w17 ") + 10])
    for wanted in (None, ["w2", "w18"]):  # kept and skipped vectors alike
        with pytest.raises(VectorFileError) as excinfo:
            load_vectors(path, wanted)
        text = message(excinfo)
        assert str(path) in text
        assert f"truncated record at byte offset {offsets[17]}" in text
        assert "expected 32 bytes of vector" in text and "found 10" in text


def test_binary_truncated_inside_a_word(tmp_path):
    words = [f"w{i}" for i in range(5)]
    offsets = record_offsets(words, 2)
    data = binary_bytes(words, random_vectors(5, 2))
    path = tmp_path / "v.bin"
    path.write_bytes(data[: offsets[3] + 2])
    with pytest.raises(VectorFileError, match=f"byte offset {offsets[3]} \\(word 4 of 5\\)"):
        load_vectors(path)


def test_binary_fewer_records_than_header(tmp_path):
    vectors = random_vectors(3, 2)
    path = tmp_path / "v.bin"
    data = binary_bytes(["a", "b", "c"], vectors, count=5, after=b"\n")
    path.write_bytes(data)
    with pytest.raises(VectorFileError) as excinfo:
        load_vectors(path)
    assert f"ends at byte offset {len(data)} after 3 words; expected 5" in message(excinfo)


def test_binary_more_data_than_header(tmp_path):
    path = tmp_path / "v.bin"
    data = binary_bytes(["a", "b", "c"], random_vectors(3, 2), count=2)
    path.write_bytes(data)
    offset = record_offsets(["a", "b", "c"], 2)[2]  # headers "3 2" and "2 2" are as long
    with pytest.raises(VectorFileError, match=f"at byte offset {offset}; expected the end"):
        load_vectors(path)


@pytest.mark.parametrize("header", [b"300\n", b"three 300\n", b"10 0\n", b"10 300 5\n", b"-1 3\n"])
def test_binary_bad_header(tmp_path, header):
    path = tmp_path / "v.bin"
    path.write_bytes(header + b"a " + b"\0" * 16)
    expected = r"byte offset 0 the header is .*expected '<count> <dim>'"
    with pytest.raises(VectorFileError, match=expected):
        load_vectors(path)
    with pytest.raises(VectorFileError, match="byte offset 0"):
        vector_file_info(path)


def test_binary_without_header_line(tmp_path):
    path = tmp_path / "v.bin"
    path.write_bytes(b"1" * 5000)
    with pytest.raises(VectorFileError, match="no header line"):
        load_vectors(path)


def test_wrong_number_of_values_names_the_line(tmp_path):
    vectors = random_vectors(20, 300, seed=17)
    lines = word2vec_text([f"w{i}" for i in range(20)], vectors).splitlines(keepends=True)
    lines[16] = lines[16].rsplit(" ", 1)[0] + "\n"  # line 17 loses its last value
    path = tmp_path / "v.vec"
    path.write_text("".join(lines))
    with pytest.raises(VectorFileError) as excinfo:
        load_vectors(path)
    assert message(excinfo) == (f"{path}: line 17 has 299 values; expected 300 "
                                f"(the header says 300)")
    # streaming checks the lines it keeps
    with pytest.raises(VectorFileError, match="line 17 has 299 values"):
        load_vectors(path, ["w15"])


def test_glove_wrong_number_of_values_refers_to_the_first_line(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("a 1 2 3\nb 4 5 6\nc 7 8 9 10\n")
    with pytest.raises(VectorFileError) as excinfo:
        load_vectors(path)
    assert message(excinfo) == f"{path}: line 3 has 4 values; expected 3 (line 1 has 3)"


def test_non_numeric_value_names_line_and_token(tmp_path):
    path = tmp_path / "v.vec"
    path.write_text("3 3\na 1 2 3\nb 4 five 6\nc 7 8 9\n")
    with pytest.raises(VectorFileError) as excinfo:
        load_vectors(path)
    assert message(excinfo) == f"{path}: line 3: value 2 of 'b' is 'five'; expected a number"


def test_text_bad_header_and_count_mismatch(tmp_path):
    bad = tmp_path / "bad.vec"
    bad.write_text("3 x\na 1\n")
    with pytest.raises(VectorFileError, match=r"line 1: the header is '3 x"):
        load_vectors(bad, format="word2vec-text")
    short = tmp_path / "short.vec"
    short.write_text("4 2\na 1 2\nb 3 4\n")
    with pytest.raises(VectorFileError, match="ends at line 3 after 2 words; expected 4"):
        load_vectors(short)
    long = tmp_path / "long.vec"
    long.write_text("1 2\na 1 2\nb 3 4\n")
    with pytest.raises(VectorFileError, match="line 3 is word 2, but the header says 1"):
        load_vectors(long)


@pytest.mark.parametrize("fmt", ["word2vec-bin", "word2vec-text", "glove"])
def test_non_finite_value_names_word_and_place(tmp_path, fmt):
    words = ["a", "b", "c"]
    vectors = random_vectors(3, 4, seed=18)
    vectors[1, 2] = np.nan if fmt != "glove" else np.inf
    path = write_format(tmp_path, fmt, words, vectors)
    if fmt == "word2vec-bin":
        where = f"byte offset {record_offsets(words, 4, after=NEWLINE)[1]}"
    else:
        where = f"line {2 if fmt == 'glove' else 3}:"
    with pytest.raises(VectorFileError, match=f"{re.escape(where)}.*'b' has a non-finite"):
        load_vectors(path)
    # a vector that is not kept is not checked
    assert load_vectors(path, ["a", "c"]).words == ["a", "c"]


def test_npy_errors(tmp_path):
    vectors = random_vectors(4, 3)
    np.save(tmp_path / "v.npy", vectors)
    with pytest.raises(FileNotFoundError, match=r"v\.vocab or .*v\.txt"):
        load_vectors(tmp_path / "v.npy")
    (tmp_path / "v.vocab").write_text("a\nb\nc\n")
    with pytest.raises(VectorFileError, match="has 3 words but .*v.npy has 4 rows"):
        load_vectors(tmp_path / "v.npy")
    (tmp_path / "v.vocab").write_text("a\n\nb\nc\n")
    with pytest.raises(VectorFileError, match=r"line 2 is blank; expected a word \(row 1"):
        load_vectors(tmp_path / "v.npy")
    vectors[2, 0] = np.inf
    np.save(tmp_path / "v.npy", vectors)
    (tmp_path / "v.vocab").write_text("a\nb\nc\nd\n\n")  # blank lines at the end are fine
    with pytest.raises(VectorFileError, match=r"row 2 \(line 3 of .*'c' has a non-finite"):
        load_vectors(tmp_path / "v.npy")
    assert load_vectors(tmp_path / "v.npy", ["d"]).words == ["d"]
    np.save(tmp_path / "flat.npy", np.zeros(5))
    (tmp_path / "flat.vocab").write_text("a\n")
    with pytest.raises(VectorFileError, match=r"shape \(5,\); expected a 2-D"):
        load_vectors(tmp_path / "flat.npy")
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    with pytest.raises(VectorFileError, match="junk.npy is not a readable .npy"):
        load_vectors(tmp_path / "junk.npy", vocab=tmp_path / "v.vocab")


@pytest.mark.parametrize("name, fmt", [("e.bin", "auto"), ("e.vec", "auto"), ("e.txt", "glove"),
                                       ("e.vec", "word2vec-text")])
def test_empty_file(tmp_path, name, fmt):
    path = tmp_path / name
    path.write_bytes(b"")
    with pytest.raises(VectorFileError, match=f"{re.escape(str(path))}.*(is empty|no vectors)"):
        load_vectors(path, format=fmt)


def test_missing_file_names_it(tmp_path):
    for fmt in ("auto", "word2vec-bin", "glove", "npy"):
        path = tmp_path / f"nowhere-{fmt}.bin"
        with pytest.raises(FileNotFoundError, match=re.escape(str(path))):
            load_vectors(path, format=fmt)


def test_bad_arguments(tmp_path):
    path = write_vec(tmp_path / "v.vec", ["a"], random_vectors(1, 2))
    with pytest.raises(ValueError, match="'glove2'.* 'auto', 'word2vec-bin', 'word2vec-text', "
                                         "'glove', 'npy'"):
        load_vectors(path, format="glove2")
    with pytest.raises(ValueError, match="words is a str"):
        load_vectors(path, "a")
    with pytest.raises(ValueError, match="expected str"):
        load_vectors(path, ["a", 3])
    with pytest.raises(ValueError, match="vocab is only used with format 'npy'"):
        load_vectors(path, vocab=tmp_path / "x")


def test_writers_refuse_words_that_would_corrupt_the_file(tmp_path):
    for word in ["two words", "", "tab\there", "new\nline"]:
        with pytest.raises(ValueError, match="cannot be written"):
            write_word2vec_binary(tmp_path / "v.bin", [word], np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"expected \(2, dim\)"):
        write_word2vec_text(tmp_path / "v.vec", ["a", "b"], np.zeros((3, 2)))


def test_word_vectors_dtype():
    wv = WordVectors(["a", "b"], np.arange(6.0).reshape(2, 3))
    assert wv.vectors.dtype == np.float32
    wide = WordVectors(["a", "b"], np.arange(6.0).reshape(2, 3), dtype=np.float64)
    assert wide.vectors.dtype == np.float64
    assert wide.subset(["b"]).vectors.dtype == np.float64
    with pytest.raises(ValueError, match="floating-point"):
        WordVectors(["a"], np.zeros((1, 2)), dtype=int)


# ------------------------------------------------------------------ real data


@pytest.mark.skipif(not TWITTER.is_file(), reason=missing_reason(TWITTER))
def test_twitter_vectors():
    assert vector_file_info(TWITTER) == {"format": "word2vec-bin", "count": 6324, "dim": 384}
    wv = load_vectors(TWITTER)
    assert len(wv) == 6324 and wv.dim == 384
    assert np.isfinite(wv.vectors).all()
    # the vectors are sentence-embedding outputs, not all zero or all equal
    assert np.linalg.norm(wv.vectors, axis=1).min() > 0
    picks = [wv.words[0], wv.words[3000], wv.words[-1]]
    sub = load_vectors(TWITTER, picks + ["not-a-twitter-word"])
    assert sub.words == picks
    np.testing.assert_array_equal(sub.vectors, wv.vectors[[0, 3000, 6323]])
