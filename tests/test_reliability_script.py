"""The reliability bench (``python -m bench.reliability``) runs, counts its
trials and writes its table.

A smoke test of the bench that generates docs/reliability.md: one cheap kind
with --quick, written into a temporary directory (never over the committed
JSON and page). Skipped where bench/ is not beside tests/ (the wheel tests
copy both, a bare tests/ folder may not have it).
"""
import json
import os
import subprocess
import sys

import pytest
from _support import REPO_DIR
from _support.processes import repo_child_env

PACKAGE = os.path.join(REPO_DIR, "bench", "reliability", "__main__.py")
KIND = "foreign"  # in-process trials on a small index: a few seconds


@pytest.mark.slow
def test_quick_run_of_one_kind_writes_json_and_table(tmp_path):
    if not os.path.isfile(PACKAGE):
        pytest.skip(f"{PACKAGE} is not in this tree (bench/ is not beside tests/)")
    out_json, out_md = tmp_path / "reliability.json", tmp_path / "reliability.md"
    # Not the source tree as the current directory: from a checkout, the
    # children would import its package by path (see _support/processes.py);
    # the repository's root is last on PYTHONPATH instead, for bench/.
    done = subprocess.run([sys.executable, "-m", "bench.reliability", "--quick", "--only", KIND,
                           "--out-json", str(out_json), "--out-md", str(out_md)],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                          env=repo_child_env())
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out_json.read_text())
    assert result["passed"] is True and result["options"]["quick"] is True
    assert result["version"] and result["machine"]["cpus"] >= 1
    rows = [row for row in result["rows"] if row["group"] == KIND]
    assert rows and all(row["trials"] > 0 and row["passed"] for row in rows)
    assert result["trials"] == sum(row["trials"] for row in result["rows"])
    table = out_md.read_text()
    assert "| Fault or input |" in table
    for row in rows:
        line = next(line for line in table.splitlines() if f"(`{row['id']}`)" in line)
        assert f"| {row['trials']:,} |" in line and line.rstrip().endswith("| pass |")
    # progress went to stderr, nothing else to stdout
    assert KIND in done.stderr and done.stdout == ""
