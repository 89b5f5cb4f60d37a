"""The CLI end to end on the TWITTER data set (../shared/data/twitter) with
its MiniLM word vectors: build, search by a stored tweet, and label
agreement of the nearest neighbours against chance."""
import json
from collections import Counter

import numpy as np
import pytest
from _support.data import data_dir, missing_reason
from click.testing import CliRunner

from sobolev_index import SobolevIndex
from sobolev_index.cli import main

DATA = data_dir() / "twitter"
TWEETS = DATA / "all_twitter_by_line.txt"
VECTORS = DATA / "twitter-minilm-384.bin"

pytestmark = pytest.mark.skipif(
    not (TWEETS.exists() and VECTORS.exists()),
    reason=missing_reason(TWEETS if not TWEETS.exists() else VECTORS))


@pytest.fixture(scope="module")
def twitter_index(tmp_path_factory):
    index = tmp_path_factory.mktemp("twitter") / "index"
    # The vectors were made for the words of the "ascii" token pattern. The
    # build's defaults drop English stop words: four tweets have nothing else.
    result = CliRunner().invoke(main, ["build", str(index), "--corpus", str(TWEETS), "--vectors",
                                       str(VECTORS), "--token-pattern", "ascii", "--skip-empty",
                                       "--json", "--silent"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return index, json.loads(result.stdout)


@pytest.mark.slow
def test_the_default_build_takes_every_tweet_with_a_word_besides_stop_words(twitter_index):
    _, report = twitter_index
    assert report["documents"] == 3111 and report["skipped"] == 4
    # Every word its own node, 10 roots: the "quality" recipe.
    assert report["recipe"]["recipe"] == "quality"
    assert report["nodes"] == report["words_with_vectors"] == report["vocabulary"]
    assert len(report["roots"]) == 10
    # The vectors were made for exactly this file's tokens.
    assert report["token_coverage"] == 1.0


def test_a_tweet_of_stop_words_alone_stops_the_build_with_a_reason(tmp_path):
    corpus = tmp_path / "tweets.txt"
    lines = TWEETS.read_text(encoding="utf-8").splitlines()
    corpus.write_text("\n".join(lines[88:93]) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["build", str(tmp_path / "index"), "--corpus", str(corpus),
                                       "--vectors", str(VECTORS), "--token-pattern", "ascii",
                                       "--silent"])
    assert result.exit_code == 1
    # Line 4 of the file is tweet 92, "so".
    assert "tweets-4 has only stop words" in result.output, result.output
    assert "--stopwords none" in result.output and "--skip-empty" in result.output
    assert not (tmp_path / "index").exists()


@pytest.mark.slow
def test_a_stored_tweet_finds_itself_first(twitter_index):
    index, _ = twitter_index
    for key in ("all_twitter_by_line-17", "all_twitter_by_line-1500", "all_twitter_by_line-3115"):
        result = CliRunner().invoke(main, ["search", str(index), "--key", key, "-k", "5", "--json"])
        assert result.exit_code == 0, result.output
        hits = json.loads(result.stdout)[0]
        assert hits[0]["distance"] == 0.0
        # Tweet 1500 has several word-for-word duplicates with lower ids: the
        # query itself still comes first among them.
        assert hits[0]["key"] == key


@pytest.mark.slow
def test_neighbour_labels_beat_chance(twitter_index):
    index, _ = twitter_index
    k = 10
    with SobolevIndex.open(index) as reader:
        keys = list(reader)
        found = reader.search(keys, k=k + 1)
        labels = {key: reader.get(key)["label"] for key in keys}
    frequency = Counter(labels.values())
    assert sum(frequency.values()) == 3111
    assert frequency == {"neutral": 2142, "negative": 508, "positive": 461}
    chance = sum((n / len(keys)) ** 2 for n in frequency.values())
    agree = []
    for key, hits in zip(keys, found.keys):
        neighbours = [h for h in hits if h != key][:k]
        agree.append(np.mean([labels[h] == labels[key] for h in neighbours]))
    agreement = float(np.mean(agree))
    # About 3,115 x 10 neighbour pairs: the standard error of the mean is
    # well under 0.01, so 0.03 above chance is far beyond noise.
    assert agreement > chance + 0.03, (agreement, chance)
