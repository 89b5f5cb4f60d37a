"""Tokenizing text into words, shared by the document pipeline and the
quickstart corpus so that both see the same vocabulary."""
import re

__all__ = ["DEFAULT_TOKEN_PATTERN", "ENGLISH_STOPWORDS", "read_stopwords", "stopwords_from", "tokenize"]

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
    # Whole matches: findall would return the groups of a pattern that has
    # any, and empty matches are not words.
    words = [m.group(0) for m in _regex(pattern).finditer(text) if m.end() > m.start()]
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


# Common English function words: articles, pronouns, auxiliaries,
# prepositions and conjunctions. They carry little topic, and in short texts
# their mass would otherwise dominate the distance.
ENGLISH_STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been
before being below between both but by can could did do does doing down during
each few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just me more most my myself no
nor not now of off on once only or other our ours ourselves out over own same
she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what
when where which while who whom why will with would you your yours yourself
yourselves
""".split())


def stopwords_from(spec):
    """Stop words from a CLI-style spec: None or "none" (no list),
    "english" (:data:`ENGLISH_STOPWORDS`), or a file path."""
    if spec is None or spec == "none":
        return frozenset()
    if spec == "english":
        return ENGLISH_STOPWORDS
    try:
        return read_stopwords(spec)
    except FileNotFoundError:
        raise ValueError(f"stop-word file {spec!r} does not exist; give a file with one word "
                         "per line, 'english' or 'none'") from None
