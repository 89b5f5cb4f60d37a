"""A small synthetic text corpus with word vectors, for the document, SQL and
CLI tests: three topics, each with its own words clustered around a centre in
vector space, and documents drawn from one topic's words plus common words.
Also the word2vec text format, written here by code independent of the
library's readers and writers."""
import json
import os

import numpy as np

TOPICS = ("space", "cooking", "music")
COMMON = ("the", "a", "of", "and", "is")


def topic_words(topic, n=12):
    return [f"{topic}{i}" for i in range(n)]


def corpus(seed=0, per_topic=20, words_per_doc=(6, 14)):
    """A list of {"key", "text", "label"} dicts."""
    rng = np.random.default_rng(seed)
    documents = []
    for topic in TOPICS:
        vocab = topic_words(topic)
        for i in range(per_topic):
            n = int(rng.integers(*words_per_doc))
            words = list(rng.choice(vocab, size=n)) + list(rng.choice(COMMON, size=3))
            rng.shuffle(words)
            documents.append({"key": f"{topic}-{i}", "text": " ".join(words).capitalize() + ".",
                              "label": topic})
    return documents


def vectors(dim=8, seed=1, extra_words=()):
    """(words, float32 vectors): each topic's words near their topic centre."""
    rng = np.random.default_rng(seed)
    words, rows = [], []
    for t, topic in enumerate(TOPICS):
        centre = np.zeros(dim)
        centre[t] = 10.0
        for word in topic_words(topic) + [w for w in extra_words if w.startswith(topic)]:
            words.append(word)
            rows.append(centre + rng.normal(scale=0.5, size=dim))
    for word in COMMON:
        words.append(word)
        rows.append(rng.normal(scale=0.5, size=dim))
    return words, np.asarray(rows, dtype=np.float32)


def word2vec_text(words, vectors, header=True, end="\n", trailing=""):
    """word2vec text format: a "count dim" header (unless not ``header``), then
    per word the word and the repr of each value, ``trailing`` and ``end``."""
    lines = [f"{len(words)} {vectors.shape[1]}{end}"] if header else []
    for word, vector in zip(words, vectors):
        lines.append(word + " " + " ".join(repr(float(v)) for v in vector) + trailing + end)
    return "".join(lines)


def write_vec(path, words, vectors, **kwargs):
    """Write ``word2vec_text(words, vectors, **kwargs)`` to ``path`` as UTF-8; returns path."""
    with open(path, "wb") as handle:
        handle.write(word2vec_text(words, vectors, **kwargs).encode("utf-8"))
    return path


def write_jsonl(path, documents):
    with open(path, "w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps(doc) + "\n")


def make_files(directory, seed=0, per_topic=20):
    """corpus.jsonl and vectors.vec in ``directory``; returns their paths."""
    corpus_path = os.path.join(directory, "corpus.jsonl")
    vectors_path = os.path.join(directory, "vectors.vec")
    write_jsonl(corpus_path, corpus(seed, per_topic))
    write_vec(vectors_path, *vectors(extra_words=("space99", "music99")))
    return corpus_path, vectors_path
