"""Words: the "unicode" and "ascii" token patterns.

Expected words are written out by hand (or, for "ascii", computed with the
``re`` module directly from the regex of earlier releases), never taken from
the code under test."""
import re

import pytest

from sobolev_index.ingest import text as text_module
from sobolev_index.ingest.documents import TextSettings
from sobolev_index.ingest.text import tokenize

OLD_REGEX = r"[a-z0-9][a-z0-9']*"  # the default of releases before "unicode"


# ------------------------------------------------------------ the default
def test_the_default_is_unicode_and_keeps_accented_words_whole():
    assert text_module.DEFAULT_TOKEN_PATTERN == "unicode"
    assert tokenize("Café naïve Zürich straße") == ["café", "naïve", "zürich", "straße"]
    # the words of the issue, split by the old pattern
    assert tokenize("Café naïve Zürich straße", "ascii") == \
        ["caf", "na", "ve", "z", "rich", "stra", "e"]


@pytest.mark.parametrize("text, words", [
    ("Москва — столица России", ["москва", "столица", "россии"]),           # Cyrillic
    ("Η Αλήθεια ΚΑΙ το ψέμα", ["η", "αλήθεια", "και", "το", "ψέμα"]),       # Greek
    ("ΟΔΟΣ", ["\u03bf\u03b4\u03bf\u03c2"]),                                  # final sigma
    ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),      # Devanagari: a virama and vowel signs (marks)
    ("東京タワー、大阪", ["東京タワー", "大阪"]),  # no spaces: one word per run of letters
    ("مرحبا ١٢٣ x² ½", ["مرحبا", "١٢٣", "x²", "½"]),  # digits and numbers of any script
    ("snake_case e-mail a/b", ["snake", "case", "e", "mail", "a", "b"]),
])
def test_letters_and_digits_of_any_script(text, words):
    assert tokenize(text) == words


def test_lowercasing_is_str_lower_not_casefold():
    # casefold would make "straße" "strasse", and no vector file's "straße"
    # would be found again
    assert tokenize("STRASSE Straße") == ["strasse", "straße"]
    assert tokenize("Café", lowercase=False) == ["Café"]


def test_combining_marks_do_not_split_words():
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert tokenize(decomposed) == tokenize(composed) == [composed]  # NFC
    assert tokenize("CAFE\u0301") == [composed]
    # a mark with no precomposed letter stays in its word; one with no
    # letter before it is not a word
    assert tokenize("q\u0301x \u0301a") == ["q\u0301x", "a"]
    # a zero-width non-joiner inside a Persian word is part of it; at the
    # end of a word it is not
    assert tokenize("می\u200cخواهم a\u200c b") == ["می\u200cخواهم", "a", "b"]


@pytest.mark.parametrize("text, words", [
    ("don't l'homme o'clock 90's", ["don't", "l'homme", "o'clock", "90's"]),
    ("don\u2019t l\u2019homme", ["don't", "l'homme"]),   # typographic apostrophes
    ("'tis w' 'quoted' \u2018single\u2019", ["tis", "w", "quoted", "single"]),
    ("rock 'n' roll", ["rock", "n", "roll"]),
    ("a''b '' '", ["a", "b"]),
])
def test_apostrophes_only_inside_words(text, words):
    assert tokenize(text) == words


# ---------------------------------------------------------------- "ascii"
@pytest.mark.parametrize("text", [
    "Café naïve Zürich straße",
    "cafe\u0301 CAFE\u0301",  # no NFC: the old pattern saw "cafe" here
    "Don't stop 'tis w' 'quoted' rock 'n' roll a''b",
    "don\u2019t x² ½ Москва 東京",
    "snake_case e-mail 90's O'Neil",
])
def test_the_ascii_name_gives_the_old_words_exactly(text):
    assert tokenize(text, "ascii") == re.findall(OLD_REGEX, text.lower())
    # an index of an earlier release stores the regex itself: the same words
    assert tokenize(text, OLD_REGEX) == tokenize(text, "ascii")


def test_a_pattern_is_a_name_or_a_regex():
    assert tokenize("ab-cd", r"[a-z]") == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match=r"token pattern 'unicod\[' is neither a pattern name "
                                         r"\('unicode', 'ascii'\) nor a regular expression"):
        tokenize("x", "unicod[")
    with pytest.raises(ValueError, match="token pattern is int"):
        TextSettings(pattern=3)


def test_stop_words_meet_the_words_as_the_pattern_writes_them():
    settings = TextSettings(stopwords=("don\u2019t", "cafe\u0301", "The"))
    assert settings.stopwords == ("café", "don't", "the")
    assert settings.tokens("Don't go to the Café, Anna") == ["go", "to", "anna"]
    # a regex pattern (as stored by earlier releases) keeps its stop words as given
    assert TextSettings(pattern=OLD_REGEX, stopwords=("cafe\u0301",)).stopwords == ("cafe\u0301",)
