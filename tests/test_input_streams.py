"""Inputs that are pipes, and the rules for keys and NUL characters.

A FIFO or ``/dev/stdin`` can be read once, from its start, and cannot seek:
every reader of an input path takes it whole (word vectors and ``.npy``
arrays through a temporary copy), and ``add`` reads its input before it
takes the write lock, so that a pipe nobody writes keeps no other writer
out. Keys are strings or integers in every reader; NUL characters are
refused in texts, keys and labels.
"""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from _support import corpus
from _support.index import small_text_index
from _support.processes import child_env

from sobolev_index import SobolevIndex
from sobolev_index.errors import CorpusError, IndexLockedError, PointsFileError
from sobolev_index.ingest.corpus import as_document, read_corpus
from sobolev_index.ingest.embeddings import load_vectors, vector_file_info
from sobolev_index.ingest.inputs import is_stream, regular_file
from sobolev_index.ingest.pointsets import read_diagram, read_point_clouds

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")


def _fifo_with(directory, name, data):
    """A named pipe ``directory/name`` that a thread fills with ``data``
    (bytes) once a reader opens it; the thread is returned to join."""
    fifo = os.path.join(str(directory), name)
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as handle:
            handle.write(data)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return fifo, thread


def _within(fn, seconds=30):
    """fn()'s result, or a failure when it is still running after
    ``seconds`` (a reader that opens a pipe twice waits for ever)."""
    found = {}

    def call():
        try:
            found["value"] = fn()
        except BaseException as exc:  # re-raised below
            found["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still reading after {seconds} s"
    if "error" in found:
        raise found["error"]
    return found["value"]


# ------------------------------------------------------------ pipes as input
def test_regular_file_is_the_path_itself_for_a_file_and_a_copy_for_a_pipe(tmp_path):
    plain = tmp_path / "v.vec"
    plain.write_bytes(b"abc")
    with regular_file(plain) as path:
        assert path == plain
    fifo, thread = _fifo_with(tmp_path, "w.vec", b"x" * 3_000_000)
    assert is_stream(fifo) and not is_stream(str(plain)) and not is_stream(str(tmp_path))
    with regular_file(fifo) as path:
        assert path != fifo and path.endswith("w.vec") and not is_stream(path)
        with open(path, "rb") as handle:
            assert handle.read() == b"x" * 3_000_000
        folder = os.path.dirname(path)
    thread.join(5)
    assert not os.path.exists(folder)


def test_an_error_about_a_piped_file_names_the_path_given(tmp_path):
    fifo, _ = _fifo_with(tmp_path, "broken.vec", b"3 2\nw 1 2\n")
    with pytest.raises(Exception) as caught:
        _within(lambda: load_vectors(fifo))
    assert fifo in str(caught.value) and "sobolev-index-input" not in str(caught.value)


@pytest.mark.parametrize("suffix", [".bin", ".vec", ".txt", ".vec.gz"])
def test_word_vectors_from_a_pipe_equal_those_from_the_file(tmp_path, suffix):
    # The readers seek (the gzip check, a binary record they skip) and a
    # format told by content opens the file twice: both failed on a pipe
    # ("File or stream is not seekable", or a reader waiting for ever).
    from sobolev_index.ingest.embeddings import write_word2vec_binary, write_word2vec_text

    words = ["alpha", "beta", "gamma", "delta"]
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    path = tmp_path / f"v{suffix}"
    (write_word2vec_binary if suffix == ".bin" else write_word2vec_text)(path, words, vectors)
    fifo, _ = _fifo_with(tmp_path / "..", f"{tmp_path.name}-pipe{suffix}", path.read_bytes())
    from_pipe = _within(lambda: load_vectors(fifo, words=["beta", "delta"]))
    from_file = load_vectors(path, words=["beta", "delta"])
    assert from_pipe.words == from_file.words == ["beta", "delta"]
    np.testing.assert_array_equal(from_pipe.vectors, from_file.vectors)
    fifo, _ = _fifo_with(tmp_path / "..", f"{tmp_path.name}-info{suffix}", path.read_bytes())
    info = _within(lambda: vector_file_info(fifo))
    assert (info["count"], info["dim"]) == (4, 3)


def test_a_diagram_array_from_a_pipe_is_read(tmp_path):
    rows = np.array([[0.0, 1.0], [0.2, 0.9], [0.1, 0.5]])
    np.save(tmp_path / "d.npy", rows)
    fifo, _ = _fifo_with(tmp_path, "piped.npy", (tmp_path / "d.npy").read_bytes())
    from_pipe = _within(lambda: read_diagram(fifo))
    np.testing.assert_array_equal(from_pipe, read_diagram(tmp_path / "d.npy"))
    assert len(from_pipe) == 3


def test_an_export_from_a_pipe_is_imported(tmp_path):
    # The import refused anything but a regular file ("does not exist").
    from sobolev_index.ingest.export import build_from_export, export_index

    index = small_text_index(tmp_path)
    with SobolevIndex.open(index) as source:
        export_index(source, str(tmp_path / "x.jsonl"))
        keys = sorted(source.ids_and_keys()[1])
    fifo, _ = _fifo_with(tmp_path, "piped.jsonl", (tmp_path / "x.jsonl").read_bytes())
    copy, _ = _within(lambda: build_from_export(str(tmp_path / "copy"), fifo, graph_from=index))
    try:
        assert sorted(copy.ids_and_keys()[1]) == keys
    finally:
        copy.close()


def _wait_until_blocked_on_a_pipe(child, seconds=60):
    """Return once ``child`` waits in the kernel to open a FIFO (Linux's
    /proc/PID/wchan names the wait: wait_for_partner, or fifo_open in older
    kernels; elsewhere, after a few seconds)."""
    wchan = f"/proc/{child.pid}/wchan"
    if not os.path.exists(wchan):
        time.sleep(5)
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and child.poll() is None:
        with open(wchan) as handle:
            if handle.read().strip() in ("wait_for_partner", "fifo_open"):
                return
        time.sleep(0.05)
    pytest.fail(f"the add did not reach the pipe within {seconds} s")


@pytest.mark.slow
def test_add_from_a_pipe_nobody_writes_does_not_hold_the_write_lock(tmp_path):
    # The add used to open the index for writing and then wait on the pipe,
    # so every other writer got IndexLockedError until someone wrote to it.
    index = small_text_index(tmp_path)
    fifo = str(tmp_path / "never-written")
    os.mkfifo(fifo)
    child = subprocess.Popen([sys.executable, "-m", "sobolev_index", "add", index, fifo],
                             env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd=str(tmp_path))
    try:
        _wait_until_blocked_on_a_pipe(child)
        assert child.poll() is None, child.communicate()
        try:
            writer = SobolevIndex.open(index, "a", timeout=5)
        except IndexLockedError as exc:
            pytest.fail(f"an add waiting on an empty pipe holds the write lock: {exc}")
        writer.delete(["music-1"])
        writer.close()
    finally:
        child.kill()
        child.communicate()
    # The pipe's writer comes late: the add then takes the lock and adds.
    docs = [{"key": "late-1", "text": " ".join(corpus.topic_words("music")[:5])}]
    fifo2, _ = _fifo_with(tmp_path, "late", "".join(json.dumps(d) + "\n" for d in docs).encode())
    done = subprocess.run([sys.executable, "-m", "sobolev_index", "add", index, fifo2, "--json",
                           "--silent"], env=child_env(), capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == 1
    with SobolevIndex.open(index) as reader:
        assert "late-1" in reader and "music-1" not in reader


# ------------------------------------------------------------- keys and NULs
def _jsonl(tmp_path, line, name="x.jsonl"):
    path = tmp_path / name
    path.write_text(line + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("key, shown", [("1.5", "1.5"), ("NaN", "NaN"), ("-Infinity", "-Infinity"),
                                        ("1e3", "1000.0"), ("true", "true"), ("[1, 2]", "a list of 2 items")])
def test_a_key_that_is_not_a_string_or_an_integer_is_refused_by_both_readers(tmp_path, key,
                                                                               shown):
    # Text keys given as JSON numbers were stored as their Python text
    # ("1.5", "nan"), while the point reader refused every number.
    text = _jsonl(tmp_path, f'{{"key": {key}, "text": "a b"}}')
    with pytest.raises(CorpusError, match=rf"line 1: the key \('key'\) is {shown}; expected a "
                                          "non-empty string or an integer"):
        list(read_corpus(text))
    points = _jsonl(tmp_path, f'{{"key": {key}, "points": [[0, 1]]}}', "p.jsonl")
    with pytest.raises(PointsFileError, match=rf"line 1: the key \('key'\) is {shown}"):
        list(read_point_clouds(points))


def test_an_integer_key_is_kept_as_its_decimal_text_by_both_readers(tmp_path):
    big = "123456789012345678901234567890"
    text = _jsonl(tmp_path, f'{{"key": {big}, "text": "a b"}}')
    assert [d["key"] for d in read_corpus(text)] == [big]
    points = _jsonl(tmp_path, '{"key": -12, "points": [[0, 1]]}', "p.jsonl")
    assert [s.key for s in read_point_clouds(points)] == ["-12"]
    assert as_document({"key": 7, "text": "a"}, 0)["key"] == "7"
    with pytest.raises(CorpusError, match="the key"):
        as_document({"key": 7.0, "text": "a"}, 0)


@pytest.mark.parametrize("record, what", [
    ('{"key": "k", "text": "open\\u0000file"}', "'text' holds a NUL character at character 5"),
    ('{"key": "a\\u0000b", "text": "open file"}', "'key' 'a\\\\x00b' holds a NUL character"),
    ('{"key": "k", "text": "open file", "label": "x\\u0000"}', "'label' 'x\\\\x00' holds a NUL"),
])
def test_a_nul_in_a_text_key_or_label_is_refused(tmp_path, record, what):
    # A JSON \u0000 passes the line reader (which refuses raw NUL bytes) and
    # was stored.
    path = _jsonl(tmp_path, record)
    with pytest.raises(CorpusError, match=what):
        list(read_corpus(path))


def test_a_nul_in_a_text_is_refused_by_add_and_nothing_is_written(tmp_path):
    from _support.index import assert_unchanged, snapshot

    from sobolev_index.ingest.pipelines import add_files

    index = small_text_index(tmp_path)
    path = _jsonl(tmp_path, '{"key": "k", "text": "open\\u0000file"}')
    before = snapshot(index)
    with SobolevIndex.open(index, "a") as writer, pytest.raises(CorpusError, match="NUL"):
        add_files(writer, [path])
    assert_unchanged(before, index)
