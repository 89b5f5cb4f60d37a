"""Words and text files: the "unicode" and "ascii" token patterns, and text
files in any encoding with clear errors for bytes that do not decode.

Expected words are written out by hand (or, for "ascii", computed with the
``re`` module directly from the regex of earlier releases), never taken from
the code under test."""
import io
import re

import pytest

from sobolev_index.errors import CorpusError
from sobolev_index.ingest import text as text_module
from sobolev_index.ingest.documents import TextSettings
from sobolev_index.ingest.text import read_stopwords, tokenize

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


# ------------------------------------------------------------- encodings
def test_encoding_names_are_checked():
    assert text_module.check_encoding("UTF8") == "utf-8"
    assert text_module.check_encoding("latin-1") == "iso8859-1"
    with pytest.raises(ValueError, match="encoding 'klingon' is not a text encoding"):
        text_module.check_encoding("klingon")
    with pytest.raises(ValueError, match="encoding 'base64' is not a text encoding"):
        text_module.check_encoding("base64")  # a codec, but bytes to bytes
    with pytest.raises(ValueError, match="encoding is ''"):
        text_module.check_encoding("")


def test_text_lines_decode_the_given_encoding(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("café\r\nnaïve\rZürich".encode("latin-1"))
    assert list(text_module.text_lines(path, "latin-1")) == ["café\n", "naïve\n", "Zürich"]
    path.write_bytes("\ufeffcafé\n".encode("utf-16"))  # the codec's BOM, and one in the text
    assert list(text_module.text_lines(path, "utf-16")) == ["café\n"]
    path.write_bytes(b"\xef\xbb\xbfcaf\xc3\xa9\n")  # UTF-8 with a byte-order mark
    assert list(text_module.text_lines(path)) == ["café\n"]


def test_undecodable_bytes_name_the_file_line_and_offset(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"first\r\nsecond\ncaf\xe9\n")
    with pytest.raises(CorpusError) as caught:
        list(text_module.text_lines(path))
    message = str(caught.value)
    assert str(path) in message and "is not utf-8 text: line 3, byte offset 17 (0xe9)" in message
    assert "encoding 'cp1252', 'latin-1', 'utf-16'" in message


def test_the_offset_and_line_are_those_of_the_file_far_into_it(tmp_path):
    # past the first 64 KiB the decoder's own position is not the file's
    path = tmp_path / "long.txt"
    head = "é" * 40_000 + "\n"  # 80,001 bytes: some chunk of the file ends inside an "é"
    path.write_bytes((head * 3).encode("utf-8") + b"ok \xff\n")
    with pytest.raises(CorpusError, match=r"line 4, byte offset 240,006 \(0xff\)"):
        list(text_module.text_lines(path))
    # and the same file without the bad byte reads whole
    path.write_bytes((head * 3).encode("utf-8"))
    assert list(text_module.text_lines(path)) == [head] * 3


@pytest.mark.parametrize("data, encoding, message", [
    ("abc\n".encode("utf-16-le"), "utf-8", r"line 1 holds a NUL character.*\(UTF-16\?\) read as utf-8"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00" * 3, "latin-1", "line 1 holds a NUL character"),
    ("abc\n".encode("utf-16"), "utf-8", r"line 1, byte offset 0 \(0xff\)"),
])
def test_binary_and_utf16_files_are_refused_not_read_as_garbage(tmp_path, data, encoding, message):
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    with pytest.raises(CorpusError, match=message):
        list(text_module.text_lines(path, encoding))


def test_stdin_is_decoded_with_the_encoding(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("café\n".encode("cp1252"))))
    assert list(text_module.text_lines("-", "cp1252")) == ["café\n"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("café\n".encode("cp1252"))))
    with pytest.raises(CorpusError, match=r"<stdin> is not utf-8 text: line 1, byte offset 3"):
        list(text_module.text_lines("-"))


def test_stop_word_files_take_an_encoding(tmp_path):
    path = tmp_path / "stop.txt"
    path.write_bytes("# mots vides\nà où\nDéjà\n".encode("latin-1"))
    assert read_stopwords(path, "latin-1") == {"à", "où", "déjà"}
    with pytest.raises(CorpusError, match="line 2, byte offset 13"):
        read_stopwords(path)
