"""The quickstart's own corpus (standard-library docstrings and pydoc topics)
and the PPMI-SVD word vectors learned from it."""
import os
import sys
import sysconfig
import textwrap
from collections import Counter

import numpy as np
import pytest

from sobolev_index.errors import CorpusError
from sobolev_index.ingest.embeddings import WordVectors
from sobolev_index.ingest.learn import _ppmi_matrix, nearest_words, ppmi_svd_vectors
from sobolev_index.ingest.stdlib_corpus import stdlib_documents
from sobolev_index.ingest.text import tokenize

STDLIB = sysconfig.get_paths()["stdlib"]


# --------------------------------------------------------------------------- real stdlib

@pytest.fixture(scope="module")
def real():
    """The real corpus, built once, with the modules imported while building it."""
    before = set(sys.modules)
    documents, stats = stdlib_documents(return_stats=True)
    return {"documents": documents, "stats": stats, "imported": set(sys.modules) - before}


@pytest.fixture(scope="module")
def real_vectors(real):
    return ppmi_svd_vectors([tokenize(d["text"]) for d in real["documents"]],
                            dim=100, window=5, min_count=3)


@pytest.mark.slow
def test_real_corpus_shape_and_keys(real):
    documents = real["documents"]
    assert len(documents) > 1000
    keys = [d["key"] for d in documents]
    assert len(set(keys)) == len(keys)
    assert real["stats"]["documents"] == len(documents)
    for d in documents:
        assert isinstance(d["text"], str) and len(tokenize(d["text"])) >= 5
        if d["label"] == "topic":
            assert d["key"].startswith("topic:")
        else:
            # public, importable names only, labelled by their top-level module
            parts = d["key"].split(".")
            assert all(p.isidentifier() and not p.startswith("_") for p in parts), d["key"]
            assert d["label"] == parts[0]
            source_dirs = d["source"].split("/")[:-1]
            assert not {"test", "tests", "idlelib", "turtledemo", "site-packages"} & set(source_dirs)
    by_key = {d["key"]: d for d in documents}
    assert "json" in by_key["json.dumps"]["text"].lower()
    assert by_key["json.dumps"]["label"] == "json"
    assert by_key["json.dumps"]["source"] == "json/__init__.py"
    # several big modules must each contribute
    labels = Counter(d["label"] for d in documents)
    assert all(labels[m] >= 5 for m in ("os", "json", "socket", "email", "collections")), labels


@pytest.mark.slow
def test_real_corpus_is_sorted_by_source_then_topics(real):
    sources = [d["source"] for d in real["documents"] if d["label"] != "topic"]
    assert sources == sorted(sources)
    topics = [d["key"] for d in real["documents"] if d["label"] == "topic"]
    if topics:
        first_topic = next(i for i, d in enumerate(real["documents"]) if d["label"] == "topic")
        assert all(d["label"] == "topic" for d in real["documents"][first_topic:])
        assert topics == sorted(topics)


@pytest.mark.slow
def test_real_corpus_imports_nothing(real):
    # `this` prints the Zen and `antigravity` opens a browser when imported
    for name in ("this", "antigravity"):
        assert name not in real["imported"]
    documented = {d["label"] for d in real["documents"]}
    assert not documented & real["imported"]


@pytest.mark.slow
def test_real_corpus_has_pydoc_topics(real):
    if not os.path.isfile(os.path.join(STDLIB, "pydoc_data", "topics.py")):
        pytest.skip("this Python ships no pydoc_data/topics.py")
    by_key = {d["key"]: d for d in real["documents"]}
    assert real["stats"]["topics"] > 50
    assert '"with" statement' in by_key["topic:with"]["text"]
    assert by_key["topic:with"]["label"] == "topic"
    assert by_key["topic:with"]["source"] == "pydoc_data/topics.py"


@pytest.mark.slow
def test_real_corpus_without_topics(real, tmp_path):
    # A copy of pydoc_data alone keeps this fast: the topics are the only
    # difference include_topics makes.
    topics = os.path.join(STDLIB, "pydoc_data", "topics.py")
    if not os.path.isfile(topics):
        pytest.skip("this Python ships no pydoc_data/topics.py")
    (tmp_path / "pydoc_data").mkdir()
    (tmp_path / "pydoc_data" / "topics.py").write_bytes(open(topics, "rb").read())
    with_topics = stdlib_documents(tmp_path)
    assert {d["key"] for d in with_topics} == {d["key"] for d in real["documents"]
                                               if d["label"] == "topic"}
    assert stdlib_documents(tmp_path, include_topics=False) == []


@pytest.mark.parametrize("word, plausible", [
    ("socket", {"af", "inet", "inet6", "connect", "tcp", "address", "recv", "send", "sockets",
                "sock", "host", "port"}),
    ("json", {"dumps", "loads", "jsonencoder", "jsondecoder", "decoder", "encoder", "serialize"}),
    ("file", {"open", "opened", "files", "read", "write", "path", "directory"}),
    ("thread", {"threads", "lock", "threading", "wait", "acquire", "released", "blocking"}),
])
@pytest.mark.slow
def test_real_vectors_have_sensible_neighbours(real_vectors, word, plausible):
    neighbours = [w for w, _ in nearest_words(real_vectors, word, n=10)]
    assert len(neighbours) == 10 and word not in neighbours
    assert plausible & set(neighbours), neighbours


@pytest.mark.slow
def test_real_vectors_shape(real_vectors):
    assert real_vectors.dim == 100
    assert 2000 < len(real_vectors) < 20000
    assert np.isfinite(real_vectors.vectors).all()
    # frequency order: "the" is by far the commonest word of English prose
    assert real_vectors.words[0] == "the"


# --------------------------------------------------------------------------- synthetic stdlib

ALPHA = '''\
"""Alpha module docstring with enough words here."""
import os


def public_function(x):
    """Public function docstring with enough words here."""
    def inner():
        """Inner function docstring with enough words here."""


def _private_function():
    """Private function docstring with enough words here."""


def short():
    """Too short."""


def no_doc():
    pass


async def fetch():
    """Async function docstring with enough words here."""


class Widget:
    """Widget class docstring with enough words here."""

    def __init__(self):
        """Dunder init docstring with enough words here."""

    def draw(self):
        """Draw method docstring with enough words here."""

    def _helper(self):
        """Private method docstring with enough words here."""

    class Part:
        """Nested class docstring with enough words here."""

        def attach(self):
            """Nested method docstring with enough words here."""


class _Hidden:
    """Hidden class docstring with enough words here."""

    def visible(self):
        """Method of a private class with enough words."""


if os.name == "nt":
    def platform_thing():
        """Windows platform thing docstring with enough words."""
else:
    def platform_thing():
        """Posix platform thing docstring with enough words."""

try:
    from zlib import crc32
except ImportError:
    def crc32(data):
        """Fallback checksum docstring with enough words here."""
'''

BOOM = '''\
"""Importing this module would leave a marker file behind here."""
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text("yes")
'''

TOPICS = '''\
"""The topics module docstring must not become a document at all."""
topics = {'with': 'The "with" statement wraps a block with context methods.',
          'tiny': 'Too short.',
          'assert': 'The "assert" statement inserts debugging assertions into a program.'}
'''

DOC = '"""{} docstring with enough words here."""\n'

EXPECTED_KEYS = [
    "alpha", "alpha.public_function", "alpha.fetch", "alpha.Widget", "alpha.Widget.draw",
    "alpha.Widget.Part", "alpha.Widget.Part.attach", "alpha.platform_thing", "alpha.crc32",
    "boom", "cookie", "pkg", "pkg.mod", "pkg.mod.f", "topic:assert", "topic:with",
]


def _write(root, rel, text):
    path = root.joinpath(*rel.split("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.fixture
def fake_stdlib(tmp_path):
    root = tmp_path / "lib"
    files = {
        "alpha.py": ALPHA,
        "boom.py": BOOM,
        "broken.py": DOC.format("Broken") + "def oops(:\n    pass\n",
        "latin.py": b'"""Caf\xe9 module docstring with enough words here."""\n',
        "cookie.py": b'# -*- coding: latin-1 -*-\n"""Caf\xe9 module docstring with enough words."""\n',
        "_private.py": DOC.format("Private module"),
        "__main__.py": DOC.format("Main module"),
        "test_alpha.py": DOC.format("Test module"),
        "README.txt": "not python",
        "pkg/__init__.py": DOC.format("Package"),
        "pkg/mod.py": DOC.format("Mod") + "def f():\n    " + DOC.format("Function f"),
        "pkg/_impl.py": DOC.format("Private impl"),
        "pkg/test/__init__.py": DOC.format("Package tests"),
        "pkg/test/test_mod.py": DOC.format("Test mod"),
        "pkg/tests/__init__.py": DOC.format("Package tests"),
        "pkg/tests/helper.py": DOC.format("Test helper"),
        "pkg/no_init/x.py": DOC.format("Not in a package"),
        "tests/__init__.py": DOC.format("Top tests"),
        "tests/x.py": DOC.format("Top test x"),
        "_privpkg/__init__.py": DOC.format("Private package"),
        "_privpkg/mod.py": DOC.format("Private package mod"),
        "site-packages/third/__init__.py": DOC.format("Third party"),
        "dist-packages/third/__init__.py": DOC.format("Third party"),
        "idlelib/__init__.py": DOC.format("Idle"),
        "idlelib/editor.py": DOC.format("Idle editor"),
        "turtledemo/__init__.py": DOC.format("Turtle demo"),
        "__pycache__/alpha.py": DOC.format("Cache"),
        "pydoc_data/__init__.py": "",
        "pydoc_data/topics.py": TOPICS,
        "__init__.py": DOC.format("Root init"),
    }
    for rel, text in files.items():
        _write(root, rel, text)
    return root


def test_synthetic_keys_exact(fake_stdlib):
    documents, stats = stdlib_documents(fake_stdlib, return_stats=True)
    assert [d["key"] for d in documents] == EXPECTED_KEYS
    by_key = {d["key"]: d for d in documents}
    # the first definition wins when a name is defined twice
    assert by_key["alpha.platform_thing"]["text"].startswith("Windows")
    assert by_key["cookie"]["text"].startswith("Café")
    assert by_key["alpha.Widget"]["text"] == "Widget class docstring with enough words here."
    assert by_key["pkg.mod.f"]["label"] == "pkg" and by_key["pkg.mod.f"]["source"] == "pkg/mod.py"
    assert by_key["pkg"]["source"] == "pkg/__init__.py"
    assert by_key["topic:with"]["label"] == "topic"
    assert all(d["label"] == "alpha" for d in documents if d["key"].startswith("alpha"))
    assert stats["files"] == 5          # alpha, boom, cookie, pkg, pkg.mod
    assert stats["skipped_files"] == 2  # broken (syntax), latin (undecodable)
    assert stats["short_documents"] == 2  # alpha.short, topic:tiny
    assert stats["duplicate_keys"] == 1   # the second platform_thing
    assert stats["topics"] == 2 and stats["documents"] == len(EXPECTED_KEYS)


def test_synthetic_never_imports(fake_stdlib):
    stdlib_documents(fake_stdlib)
    assert not (fake_stdlib / "IMPORTED").exists()
    assert "boom" not in sys.modules and "alpha" not in sys.modules


def test_synthetic_options(fake_stdlib):
    without_topics = stdlib_documents(fake_stdlib, include_topics=False)
    assert [d["key"] for d in without_topics] == EXPECTED_KEYS[:-2]
    everything = [d["key"] for d in stdlib_documents(fake_stdlib, min_words=0)]
    assert set(everything) - set(EXPECTED_KEYS) == {"alpha.short", "topic:tiny"}
    assert everything.index("alpha.short") == everything.index("alpha.public_function") + 1
    # only boom's docstring (10 tokens) and the two topics (9 each) are this long
    assert [d["key"] for d in stdlib_documents(fake_stdlib, min_words=9)] == [
        "boom", "topic:assert", "topic:with"]
    assert stdlib_documents(fake_stdlib) == stdlib_documents(fake_stdlib)


def test_synthetic_without_topics_file(fake_stdlib):
    (fake_stdlib / "pydoc_data" / "topics.py").unlink()
    assert [d["key"] for d in stdlib_documents(fake_stdlib)] == EXPECTED_KEYS[:-2]
    # a topics.py without a literal dict is skipped too
    _write(fake_stdlib, "pydoc_data/topics.py", "topics = make_topics()\n")
    assert [d["key"] for d in stdlib_documents(fake_stdlib)] == EXPECTED_KEYS[:-2]


def test_bad_arguments(tmp_path):
    with pytest.raises(CorpusError, match="not a directory"):
        stdlib_documents(tmp_path / "missing")
    with pytest.raises(ValueError, match="min_words"):
        stdlib_documents(tmp_path, min_words=-1)


# --------------------------------------------------------------------------- PPMI and SVD

def _dense_ppmi(docs, window, min_count, alpha):
    """Straightforward reference: count every pair of positions, then PPMI."""
    counts = Counter(w for d in docs for w in d)
    words = sorted((w for w in counts if counts[w] >= min_count), key=lambda w: (-counts[w], w))
    row = {w: i for i, w in enumerate(words)}
    C = np.zeros((len(words), len(words)))
    for d in docs:
        for i in range(len(d)):
            for j in range(i + 1, min(len(d), i + window + 1)):
                if d[i] in row and d[j] in row:
                    C[row[d[i]], row[d[j]]] += 1
                    C[row[d[j]], row[d[i]]] += 1
    total = C.sum()
    p_word = C.sum(axis=1) / total
    p_context = C.sum(axis=0) ** alpha / (C.sum(axis=0) ** alpha).sum()
    with np.errstate(divide="ignore"):
        pmi = np.log(C / total) - np.log(np.outer(p_word, p_context))
    return words, np.where(C > 0, np.maximum(pmi, 0), 0.0)


TINY = [
    ["a", "b", "c", "a", "x"],
    ["b", "a", "d", "c"],
    ["c", "y", "a", "b", "d", "a"],
    ["b"],
    ["c", "e", "b"],
]  # a:5 b:5 c:4 d:2 e:1 x:1 y:1


def _random_corpus(seed, n_docs=40, vocab=25):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocab + 1)  # Zipf-like, so min_count bites
    weights /= weights.sum()
    return [[f"w{k}" for k in rng.choice(vocab, size=rng.integers(1, 15), p=weights)]
            for _ in range(n_docs)]


@pytest.mark.parametrize("window", [1, 2, 3, 50])
@pytest.mark.parametrize("min_count", [1, 2])
@pytest.mark.parametrize("alpha", [1.0, 0.75])
def test_ppmi_matches_dense_reference(window, min_count, alpha):
    for docs in (TINY, _random_corpus(window * 10 + min_count)):
        words, ppmi = _ppmi_matrix(docs, window, min_count, alpha=alpha)
        ref_words, ref = _dense_ppmi(docs, window, min_count, alpha)
        assert words == ref_words
        np.testing.assert_allclose(ppmi.toarray(), ref, rtol=1e-12, atol=1e-12)


def test_ppmi_document_boundaries_and_gaps():
    words, ppmi = _ppmi_matrix([["p", "q"], ["r", "s"]], window=5, min_count=1, alpha=1.0)
    assert words == ["p", "q", "r", "s"]
    expected = np.zeros((4, 4))
    # four ordered pairs in all, each word in one: PMI = log(1/4 / (1/4 * 1/4))
    for i, j in [(0, 1), (1, 0), (2, 3), (3, 2)]:
        expected[i, j] = np.log(4)
    np.testing.assert_allclose(ppmi.toarray(), expected)

    # Rare words keep their positions: the result is not that of the corpus
    # with them deleted (which would bring more pairs within the window).
    docs = _random_corpus(11, n_docs=60, vocab=40)
    words, ppmi = _ppmi_matrix(docs, window=2, min_count=3, alpha=1.0)
    kept = set(words)
    squeezed = [[w for w in d if w in kept] for d in docs]
    assert squeezed != docs
    np.testing.assert_allclose(ppmi.toarray(), _dense_ppmi(docs, 2, 3, 1.0)[1])
    assert not np.allclose(ppmi.toarray(), _dense_ppmi(squeezed, 2, 3, 1.0)[1])


def test_vectors_min_count_filter_exact():
    vectors = ppmi_svd_vectors(TINY, dim=2, window=2, min_count=3)
    assert isinstance(vectors, WordVectors)
    assert vectors.words == ["a", "b", "c"]
    assert vectors.vectors.shape == (3, 2) and vectors.vectors.dtype == np.float32
    assert ppmi_svd_vectors(TINY, dim=2, window=2, min_count=2, max_words=3).words == ["a", "b", "c"]
    assert ppmi_svd_vectors(TINY, dim=2, window=2, min_count=1).words == [
        "a", "b", "c", "d", "e", "x", "y"]


def test_vectors_are_u_sqrt_s_of_the_ppmi_matrix():
    docs = _random_corpus(7, n_docs=200, vocab=40)
    dim = 6
    vectors = ppmi_svd_vectors(docs, dim=dim, window=3, min_count=2)
    words, ppmi = _ppmi_matrix(docs, 3, 2)
    assert vectors.words == words
    u, s, _ = np.linalg.svd(ppmi.toarray())
    assert np.all(np.diff(s[:dim + 1]) < -1e-6), "singular values must be distinct for this check"
    u = u[:, :dim]
    u *= np.sign(u[np.argmax(np.abs(u), axis=0), np.arange(dim)])
    np.testing.assert_allclose(vectors.vectors, u * np.sqrt(s[:dim]), atol=1e-5)


def test_vectors_deterministic():
    docs = _random_corpus(3, n_docs=300, vocab=60)
    first = ppmi_svd_vectors(docs, dim=20, window=4, min_count=2, seed=5)
    second = ppmi_svd_vectors(iter(docs), dim=20, window=4, min_count=2, seed=5)
    assert first.words == second.words
    assert np.array_equal(first.vectors, second.vectors)
    assert first.vectors.shape == (len(first.words), 20)


def test_vectors_errors():
    with pytest.raises(ValueError, match=r"only 3 words .*dim=3 needs at least 4"):
        ppmi_svd_vectors(TINY, dim=3, window=2, min_count=3)
    with pytest.raises(ValueError, match="is a str"):
        ppmi_svd_vectors(["a b c", "d e f"], dim=2)
    with pytest.raises(ValueError, match="is a str"):
        ppmi_svd_vectors("a b c", dim=2)
    with pytest.raises(ValueError, match="window"):
        ppmi_svd_vectors(TINY, dim=2, window=0)
    with pytest.raises(ValueError, match="min_count"):
        ppmi_svd_vectors(TINY, dim=2, min_count=0)
    with pytest.raises(ValueError, match="alpha"):
        ppmi_svd_vectors(TINY, dim=2, alpha=0)
    with pytest.raises(ValueError, match="no word appears"):
        ppmi_svd_vectors(TINY, dim=2, min_count=100)
    with pytest.raises(ValueError, match="no two words"):
        ppmi_svd_vectors([["a"], ["b"], ["c"]], dim=2, min_count=1)
    with pytest.raises(ValueError, match="expected str"):
        ppmi_svd_vectors([[1, 2, 3]], dim=2, min_count=1)


# --------------------------------------------------------------------------- nearest_words

def test_nearest_words():
    vectors = WordVectors(["a", "b", "c", "d", "z"],
                          np.array([[1, 0], [2, 0.1], [0, 1], [-1, 0], [0, 0]]))
    result = nearest_words(vectors, "a", n=2)
    assert [w for w, _ in result] == ["b", "c"]
    assert result[0][1] == pytest.approx(2 / np.hypot(2, 0.1))
    # ties (c and the zero vector z, both 0) in row order; self never listed
    assert [w for w, _ in nearest_words(vectors, "a", n=10)] == ["b", "c", "z", "d"]
    assert nearest_words(vectors, "a", n=10)[-1][1] == pytest.approx(-1)
    assert nearest_words(vectors, "a", n=0) == []
    with pytest.raises(KeyError, match="no vector"):
        nearest_words(vectors, "missing")
