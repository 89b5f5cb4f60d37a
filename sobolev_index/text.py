"""Tokenizing text into words, shared by the document pipeline and the
quickstart corpus so that both see the same vocabulary."""
import re

__all__ = ["DEFAULT_TOKEN_PATTERN", "read_stopwords", "tokenize"]

# Lowercase words and numbers with inner apostrophes ("don't", "o'clock"):
# the pattern the shared TWITTER vectors were made with.
DEFAULT_TOKEN_PATTERN = r"[a-z0-9][a-z0-9']*"

_compiled = {}


def _regex(pattern):
    regex = _compiled.get(pattern)
    if regex is None:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"token pattern {pattern!r} is not a regular expression: {exc}") from None
        _compiled[pattern] = regex
    return regex


def tokenize(text, pattern=DEFAULT_TOKEN_PATTERN, lowercase=True, stopwords=None):
    """The words of ``text`` in order: lowercased first (unless told not
    to), then every match of ``pattern``, without the ``stopwords``."""
    if not isinstance(text, str):
        raise ValueError(f"text is {type(text).__name__} {text!r:.60}; expected a str")
    if lowercase:
        text = text.lower()
    words = _regex(pattern).findall(text)
    if stopwords:
        words = [w for w in words if w not in stopwords]
    return words


def read_stopwords(path):
    """A frozenset of the words in a file: one or more per line, blank lines
    and lines starting with '#' ignored, lowercased."""
    words = set()
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line and not line.startswith("#"):
                words.update(w.lower() for w in line.split())
    return frozenset(words)
