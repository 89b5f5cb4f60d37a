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
    # The vectors were made for the words of the "ascii" token pattern.
    result = CliRunner().invoke(main, ["build", str(index), "--corpus", str(TWEETS), "--vectors",
                                       str(VECTORS), "--nodes", "1000", "--token-pattern", "ascii",
                                       "--json", "--silent"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return index, json.loads(result.stdout)


def test_build_takes_every_tweet(twitter_index):
    _, report = twitter_index
    assert report["documents"] == 3115 and report["skipped"] == 0
    assert report["nodes"] == 1000
    # The vectors were made for exactly this file's tokens.
    assert report["token_coverage"] == 1.0


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


def test_neighbour_labels_beat_chance(twitter_index):
    index, _ = twitter_index
    k = 10
    with SobolevIndex.open(index) as reader:
        keys = list(reader)
        found = reader.search(keys, k=k + 1)
        labels = {key: reader.get(key)["label"] for key in keys}
    frequency = Counter(labels.values())
    assert frequency == {"neutral": 2144, "negative": 509, "positive": 462}
    chance = sum((n / len(keys)) ** 2 for n in frequency.values())
    agree = []
    for key, hits in zip(keys, found.keys):
        neighbours = [h for h in hits if h != key][:k]
        agree.append(np.mean([labels[h] == labels[key] for h in neighbours]))
    agreement = float(np.mean(agree))
    # About 3,115 x 10 neighbour pairs: the standard error of the mean is
    # well under 0.01, so 0.03 above chance is far beyond noise.
    assert agreement > chance + 0.03, (agreement, chance)
