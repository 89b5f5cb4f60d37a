"""The README's test command installs tests/requirements.txt: it must ask for
what the "test" extra of pyproject.toml asks for, no more and no less."""
import os
import re
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _normalised(requirement):
    # "Name[extras]>=x; marker" with spaces and case left out
    return re.sub(r"\s+", "", requirement).lower()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is in Python 3.11 and later")
def test_requirements_file_equals_the_test_extra():
    import tomllib

    pyproject = os.path.join(REPO, "pyproject.toml")
    listed = os.path.join(REPO, "tests", "requirements.txt")
    if not os.path.exists(pyproject):
        pytest.skip("no pyproject.toml beside the tests (an installed wheel's test copy)")
    with open(pyproject, "rb") as handle:
        extra = tomllib.load(handle)["project"]["optional-dependencies"]["test"]
    with open(listed, encoding="utf-8") as handle:
        lines = [line.split("#", 1)[0].strip() for line in handle]
    assert sorted(map(_normalised, filter(None, lines))) == sorted(map(_normalised, extra))
