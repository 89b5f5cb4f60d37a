"""A segment whose stored arrays are malformed must raise CorruptIndexError,
never reach the compiled scan (which trusts its inputs) and crash."""
import os

import h5py
import numpy as np
import pytest
from _support.processes import run_python

from sobolev_index import Graph, SobolevIndex


@pytest.mark.parametrize("dataset,value", [
    ("features/0/indices", 2_000_000_000),
    ("features/0/indices", -5),
    ("features/0/indptr", 10**9),
])
def test_malformed_feature_arrays_raise(tmp_path, dataset, value):
    rng = np.random.default_rng(0)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=50, seed=0)
    path = tmp_path / "idx"
    with SobolevIndex.create(path, graph) as index:
        index.add([(rng.choice(50, 5), None) for _ in range(20)])
    segment = os.path.join(path, "segments", os.listdir(path / "segments")[0])
    with h5py.File(segment, "r+") as f:
        f[dataset][3] = value
    # Run in a child: a crash there must not take the test run with it.
    script = (
        "import sys\n"
        "from sobolev_index import SobolevIndex, CorruptIndexError\n"
        "try:\n"
        f"    SobolevIndex.open({str(path)!r}).search([([1, 2], None)], k=3)\n"
        "except CorruptIndexError as exc:\n"
        "    print('corrupt:', exc); sys.exit(3)\n"
    )
    done = run_python(script, cwd=str(tmp_path))
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "segment" in done.stdout
