"""Random measures, CSR batches and comparisons of measures and feature matrices."""
import numpy as np
import reference as ref
from hypothesis import strategies as st


def random_measure(rng, n, k=None, dup=True, integer=False):
    """Random (nodes int64, masses float64) with k supports (duplicates allowed when
    dup); masses in [0.05, 1), or integers in [1, 10) when ``integer``."""
    if k is None:
        k = int(rng.integers(1, min(n, 8) + 1))
    if dup:
        nodes = rng.integers(n, size=k)
    else:
        nodes = rng.choice(n, size=min(k, n), replace=False)
    if integer:
        masses = rng.integers(1, 10, size=len(nodes)).astype(np.float64)
    else:
        masses = rng.uniform(0.05, 1.0, size=len(nodes))
    return nodes.astype(np.int64), masses


def random_measures(rng, n, count, **kw):
    return [random_measure(rng, n, **kw) for _ in range(count)]


def measures_on(n, max_support=8):
    """Hypothesis strategy of (nodes, masses) with integer masses in [1, 20]."""
    return st.lists(
        st.tuples(st.integers(0, n - 1), st.integers(1, 20)), min_size=1, max_size=max_support
    ).map(
        lambda pairs: (
            np.array([a for a, _ in pairs], dtype=np.int64),
            np.array([b for _, b in pairs], dtype=np.float64),
        )
    )


def to_csr_input(measures):
    """list of (nodes, masses) -> (indptr, nodes, masses) CSR batch arrays."""
    indptr = np.zeros(len(measures) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(m[0]) for m in measures])
    nodes = (
        np.concatenate([np.asarray(m[0], dtype=np.int64) for m in measures])
        if measures
        else np.zeros(0, np.int64)
    )
    masses = (
        np.concatenate([np.asarray(m[1], dtype=np.float64) for m in measures])
        if measures
        else np.zeros(0)
    )
    return indptr, nodes, masses


def dense(nodes, masses, n_nodes):
    """Normalised dense vector of a measure (duplicates summed; masses None = uniform)."""
    nodes = np.asarray(nodes, dtype=np.int64).ravel()
    masses = np.ones(len(nodes)) if masses is None else masses
    return ref.dense_measure(nodes, masses, n_nodes)


def assert_same_measure(doc_nodes, doc_masses, nodes, masses, n_nodes, what=""):
    got = dense(doc_nodes, doc_masses, n_nodes)
    exp = dense(nodes, masses, n_nodes)
    np.testing.assert_allclose(got, exp, rtol=1e-12, atol=1e-15, err_msg=what)
    # get() returns normalised masses
    np.testing.assert_allclose(float(np.sum(doc_masses)), 1.0, rtol=1e-12, err_msg=what)


def _csr_difference(A, B):
    """None if A and B are the same CSR matrix bit for bit, else what differs."""
    import scipy.sparse as sp

    A = sp.csr_matrix(A)
    B = sp.csr_matrix(B)
    if A.shape != B.shape:
        return f"shape {A.shape} != {B.shape}"
    if not np.array_equal(A.indptr, B.indptr):
        return "indptr differs"
    if not np.array_equal(A.indices, B.indices):
        return "indices differ"
    if not np.array_equal(A.data, B.data):
        return f"data differs (max abs diff {np.max(np.abs(A.data - B.data))})"
    return None


def csr_identical(A, B):
    return _csr_difference(A, B) is None


def assert_csr_identical(A, B, what=""):
    difference = _csr_difference(A, B)
    assert difference is None, f"{what}: {difference}"
