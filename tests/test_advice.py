"""Advice in library messages (errors.ADVICE) and its words on the command
line (cli._common.CLI_ADVICE): every message gives the advice through the
table, never through its own copy of the words, so the command line's
rewording cannot miss a message, and every piece of advice has command-line
words."""
import os
import re

import pytest
from _support import REPO_DIR

from sobolev_index.cli._common import CLI_ADVICE, _cli_words
from sobolev_index.errors import ADVICE

PACKAGE_DIR = os.path.join(REPO_DIR, "sobolev_index")


def test_every_piece_of_advice_has_command_line_words():
    assert set(CLI_ADVICE) == set(ADVICE)
    for name, words in CLI_ADVICE.items():
        assert words != ADVICE[name], name
        # The command line's words name options and commands, never the
        # Python API's arguments (name=value) or calls (name()).
        assert not re.search(r"[a-z_]=|\w\(\)", words), (name, words)


@pytest.mark.parametrize("name", sorted(ADVICE))
def test_the_command_line_words_replace_the_advice(name):
    message = f"something went wrong; {ADVICE[name]} then more"
    assert _cli_words(message) == f"something went wrong; {CLI_ADVICE[name]} then more"


def test_no_library_module_spells_out_the_advice_itself():
    """A message that wrote the words out (rather than ADVICE[name]) would
    keep the Python API's words on the command line."""
    found = []
    for directory, _, files in os.walk(PACKAGE_DIR):
        if os.path.basename(directory) == "__pycache__":
            continue
        for name in files:
            path = os.path.join(directory, name)
            if not name.endswith((".py", ".pyx")) or path == os.path.join(PACKAGE_DIR, "errors.py"):
                continue
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            # Words split over two string literals are found too: the
            # quotes and line breaks between them are dropped.
            joined = re.sub(r'"\s*\n\s*[fF]?"', "", text)
            for advice, words in ADVICE.items():
                if words in text or words in joined:
                    found.append((os.path.relpath(path, REPO_DIR), advice))
    assert not found, found
