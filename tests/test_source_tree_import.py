"""Importing the package from a source tree without compiled modules (for
instance from the repository root after a plain ``pip install .``) gives one
clear ImportError that says what to do, not a circular-import puzzle."""
import shutil
import subprocess
import sys
from pathlib import Path

import sobolev_index


def test_unbuilt_source_tree_gives_a_clear_import_error(tmp_path):
    source = Path(sobolev_index.__file__).parent
    # The Python files of the package, without any compiled module.
    shutil.copytree(source, tmp_path / "sobolev_index",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "*.c", "__pycache__"))
    done = subprocess.run([sys.executable, "-c", "import sobolev_index"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: sobolev_index was imported from")
    assert "pip install -e ." in last and "circular" not in done.stderr
