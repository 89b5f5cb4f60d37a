"""The console script: a Ctrl-C at any moment, including while the command
line's modules load, ends with ``Aborted!`` and exit status 130, never a
traceback; and importing the package loads nothing heavy."""
import pytest
from _support.processes import run_python

# In the child: deliver a real SIGINT the moment ``TARGET`` starts to load,
# then run the console script as the installed ``sobolev-index`` would.
INTERRUPT_DURING_IMPORT = """
import importlib.abc, signal, sys

# As in a terminal: a process started in the background by a shell without
# job control (a CI runner, say) inherits SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

TARGET = sys.argv[1]

class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["sobolev-index", "info", "no-such-index"]
from sobolev_index._console import run
run()
"""


@pytest.mark.parametrize("module", ["click", "numpy", "h5py", "sobolev_index.cli"])
def test_ctrl_c_while_the_command_line_loads(module):
    done = run_python(INTERRUPT_DURING_IMPORT, args=[module])
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Aborted!" in done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr


def test_ctrl_c_inside_a_command():
    # After the imports: the command itself is interrupted.
    code = """
import signal, sys
import sobolev_index.ingest.pipelines as pipelines

signal.signal(signal.SIGINT, signal.default_int_handler)

def interrupted(*args, **kwargs):
    signal.raise_signal(signal.SIGINT)

pipelines.index_details = interrupted
sys.argv = ["sobolev-index", "info", sys.argv[1]]
from sobolev_index._console import run
run()
"""
    import tempfile

    from _support.graphs import pick_roots, random_graph

    from sobolev_index import SobolevIndex

    spec = random_graph(3, 20, extra=10)
    with tempfile.TemporaryDirectory() as tmp:
        SobolevIndex.create(f"{tmp}/idx", spec.lib(), roots=pick_roots(spec, 1)).close()
        done = run_python(code, args=[f"{tmp}/idx"])
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Aborted!" in done.stderr and "Traceback" not in done.stderr


def test_importing_the_package_loads_no_numerical_library():
    done = run_python("import sys, sobolev_index, sobolev_index._console\n"
                      "print(sorted(m for m in ('numpy', 'scipy', 'h5py', 'click') "
                      "if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    # and its names are there on first use
    done = run_python("import sobolev_index as s\nprint(s.SobolevIndex.__name__, "
                      "s.pairwise_sobolev.__name__, 'Graph' in dir(s))")
    assert done.stdout.split() == ["SobolevIndex", "pairwise_sobolev", "True"], done.stderr


@pytest.mark.slow
def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    import subprocess
    import sys

    import numpy as np

    from sobolev_index import Graph, SobolevIndex

    graph = Graph.from_points(np.random.default_rng(0).normal(size=(20, 2)), n_nodes=20, seed=0)
    rng = np.random.default_rng(1)
    with SobolevIndex.create(tmp_path / "ix", graph, on_violation="perturb") as index:
        index.add([(np.array([int(rng.integers(20))]), np.array([1.0])) for _ in range(3000)])
    # `sobolev-index search ... | head -1`: far more output than a pipe holds.
    child = subprocess.Popen(
        [sys.executable, "-m", "sobolev_index", "search", str(tmp_path / "ix"), "--key", "doc-1",
         "-k", "3000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # Not the checkout: there, `-m sobolev_index` finds the source tree.
        cwd=tmp_path)
    first = child.stdout.readline()
    child.stdout.close()
    stderr = child.stderr.read().decode()
    child.wait(timeout=120)
    assert first.startswith(b"query"), stderr
    assert child.returncode == 141, (child.returncode, stderr)
    assert stderr == ""
