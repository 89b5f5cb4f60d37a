"""The README's "A five-minute tour" run as printed: every `$ command` in its
block, through the installed console script in a folder like the README's,
with the output and exit code compared line for line to the README's text.

Only wall-clock times are masked. Everything else (documents found,
distances, tables, JSON, counts and sizes) must match byte for byte, so a
change to the command line's output, or a README that no longer shows what
the package prints, fails here. The quickstart's corpus is this Python's
own documentation: on a Python whose documentation differs from the one the
README was recorded with, the comparison cannot hold and the test skips,
saying so."""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
RECORDED_IN = "/tmp/tour"

# "(1.2 s)", "(0.02 s)", "done in 3.9 s", "; 0.1 s": wall-clock times only.
SECONDS = re.compile(r"\b\d+(?:\.\d+)? s\b")


def tour_steps():
    """[(command, expected output lines)] from the README's tour block."""
    with open(README, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    start = lines.index("## A five-minute tour")
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    steps = []
    for line in lines[opening + 1:closing]:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"output before the first command in the tour: {line!r}"
            steps[-1][1].append(line)
    for _, expected in steps:
        while expected and not expected[-1].strip():
            expected.pop()
    return steps


def masked(text):
    return SECONDS.sub("<t> s", text)


def corpus_size(lines):
    for line in lines:
        found = re.search(r"corpus: ([\d,]+) docstrings", line)
        if found:
            return found.group(1)
    return None


@pytest.mark.skipif(not os.path.exists(README),
                    reason="README.md is not beside tests/ (a copy of the tests without it)")
@pytest.mark.slow
def test_the_readme_tour_prints_what_the_readme_shows(tmp_path):
    steps = tour_steps()
    commands = [command for command, _ in steps]
    assert commands[0] == "sobolev-index quickstart demo", commands[0]
    assert len(steps) >= 8 and all(c.startswith(("sobolev-index ", "echo ")) for c in commands)

    # The README's paths are under /tmp/tour; the run's are under tmp_path.
    here = tmp_path / "tour"
    here.mkdir()
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep
           + os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1"}
    for number, (command, expected) in enumerate(steps):
        done = subprocess.run(["bash", "-c", command], cwd=here, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=600)
        assert done.returncode == 0, (command, done.returncode, done.stdout)
        # As a terminal shows it: errors and notes in their place among the output.
        got = done.stdout.replace(str(here), RECORDED_IN).splitlines()
        while got and not got[-1].strip():
            got.pop()
        if number == 0 and corpus_size(got) != corpus_size(expected):
            pytest.skip(f"this Python ({sys.version.split()[0]}) documents "
                        f"{corpus_size(got)} docstrings and topics; the README's tour was "
                        f"recorded on a Python with {corpus_size(expected)}")
        assert [masked(line) for line in got] == [masked(line) for line in expected], command
