"""Feature map alpha[v] = mu(subtree of v) (Prop. 4.4), its validation and its inverse."""

import re

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp
from _support.graphs import graph_specs, random_graph
from _support.measures import measures_on, random_measures, to_csr_input
from _support.settings import examples
from hypothesis import given, settings
from hypothesis import strategies as st


def _setup(seed=0, n=30, kind="euclidean", tree=False, root=None):
    spec = random_graph(seed, n, extra=n, kind=kind, tree=tree)
    root = spec.n // 3 if root is None else root
    assert not ref.tie_nodes(spec.n, spec.edges, spec.lengths, root)
    g = spec.lib()
    return spec, g.tree(root), spec.ref_tree(root)


def _check_csr(F, N, n, root):
    assert sp.issparse(F) and F.format == "csr"
    assert F.shape == (N, n)
    assert F.dtype == np.float64
    assert F.has_sorted_indices
    # the check above trusts a flag: verify the indices really are sorted and unique
    for i in range(N):
        idx = F.indices[F.indptr[i] : F.indptr[i + 1]]
        assert np.all(np.diff(idx) > 0)
    assert F[:, [root]].nnz == 0, "root column must be empty"


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("kind", ["euclidean", "random"])
@pytest.mark.parametrize("tree", [False, True])
def test_features_match_reference(seed, kind, tree):
    spec, t, R = _setup(seed, n=10 + 10 * seed, kind=kind, tree=tree)
    rng = np.random.default_rng(seed)
    ms = random_measures(rng, spec.n, 12)
    F = t.features_of(ms)
    _check_csr(F, len(ms), spec.n, t.root)
    A = np.array([ref.ref_features(R, *m) for m in ms])
    np.testing.assert_allclose(F.toarray(), A, rtol=1e-12, atol=1e-15)
    # nnz per row = number of distinct tree edges on the supports' root paths
    nnz = np.diff(F.indptr)
    expect = [len(ref.ref_support_edges(R, *m)) for m in ms]
    assert nnz.tolist() == expect
    assert np.all(F.data > 0)
    # the CSR batch entry point agrees with the list entry point, bit for bit
    F2 = t.features(*to_csr_input(ms))
    _check_csr(F2, len(ms), spec.n, t.root)
    assert np.array_equal(F2.indptr, F.indptr)
    assert np.array_equal(F2.indices, F.indices)
    assert np.array_equal(F2.data, F.data)


def test_features_accept_int32_nodes_and_lists():
    spec, t, R = _setup(1)
    rng = np.random.default_rng(1)
    ms = random_measures(rng, spec.n, 5)
    F = t.features_of(ms)
    indptr, nodes, masses = to_csr_input(ms)
    F32 = t.features(indptr.astype(np.int32), nodes.astype(np.int32), masses)
    np.testing.assert_array_equal(F32.toarray(), F.toarray())
    Fl = t.features_of([(m[0].tolist(), m[1].tolist()) for m in ms])
    np.testing.assert_array_equal(Fl.toarray(), F.toarray())


def test_features_duplicates_summed_and_normalised():
    spec, t, R = _setup(2)
    a = t.features_of([(np.array([3, 7, 3, 12]), np.array([0.25, 0.5, 0.75, 1.0]))])
    b = t.features_of([(np.array([3, 7, 12]), np.array([1.0, 0.5, 1.0]))])
    c = t.features_of([(np.array([12, 3, 7]), np.array([4.0, 4.0, 2.0]))])  # scaled x4
    np.testing.assert_allclose(a.toarray(), b.toarray(), rtol=1e-14)
    np.testing.assert_allclose(c.toarray(), b.toarray(), rtol=1e-14)
    expect = ref.ref_features(R, [3, 7, 12], [1.0, 0.5, 1.0])
    np.testing.assert_allclose(b.toarray()[0], expect, rtol=1e-14, atol=1e-16)
    # normalised features: the mass leaving the root is 1
    kids = [v for v in range(spec.n) if t.parent[v] == t.root]
    assert abs(b.toarray()[0, kids].sum() - 1.0) < 1e-14


def test_features_unnormalised():
    spec, t, R = _setup(3)
    rng = np.random.default_rng(3)
    ms = random_measures(rng, spec.n, 6)
    F = t.features_of(ms, normalize=False)
    _check_csr(F, 6, spec.n, t.root)
    A = np.array([ref.ref_features(R, *m, normalize=False) for m in ms])
    np.testing.assert_allclose(F.toarray(), A, rtol=1e-12, atol=1e-15)
    F2 = t.features(*to_csr_input(ms), normalize=False)
    np.testing.assert_array_equal(F2.toarray(), F.toarray())


# --------------------------------------------------------------------------- invalid input
def _bad(t, measure, pattern):
    with pytest.raises(ValueError) as info:
        t.features_of([measure])
    assert re.search(pattern, str(info.value), flags=re.IGNORECASE), str(info.value)
    # the CSR batch entry point validates too (the bad measure is the 2nd row here)
    good = (np.array([1]), np.array([1.0]))
    with pytest.raises(ValueError) as info:
        t.features(*to_csr_input([good, measure]))
    assert re.search(pattern, str(info.value), flags=re.IGNORECASE), str(info.value)
    # ... and says which measure of the batch is bad
    assert re.search(r"\b1\b", str(info.value)), str(info.value)


def test_features_reject_nan_mass():
    _, t, _ = _setup(4)
    _bad(t, (np.array([4, 2]), np.array([0.5, np.nan])), r"nan")


def test_features_reject_inf_mass():
    _, t, _ = _setup(4)
    _bad(t, (np.array([4, 2]), np.array([0.5, np.inf])), r"inf")


def test_features_reject_negative_mass():
    _, t, _ = _setup(4)
    _bad(t, (np.array([5, 2, 4]), np.array([0.5, -0.375, 1.0])), r"-0\.375")


def test_features_reject_all_zero_mass():
    _, t, _ = _setup(4)
    _bad(t, (np.array([4, 2]), np.array([0.0, 0.0])), r"zero|sum|total|positive")


@pytest.mark.parametrize("node", [30, 12345, -3])
def test_features_reject_unknown_node(node):
    _, t, _ = _setup(4)  # 30 nodes: ids 0..29
    _bad(t, (np.array([4, node]), np.array([0.5, 0.5])), re.escape(str(node)))


def test_features_reject_empty_measure():
    _, t, _ = _setup(4)
    _bad(t, (np.array([], dtype=np.int64), np.array([])), r"empty|no support|nothing")


def test_features_reject_mismatched_lengths():
    _, t, _ = _setup(4)
    with pytest.raises(ValueError):
        t.features_of([(np.array([1, 2, 3]), np.array([0.5, 0.5]))])
    with pytest.raises(ValueError):
        t.features(np.array([0, 3]), np.array([1, 2, 3]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError):  # indptr does not end at len(nodes)
        t.features(np.array([0, 2]), np.array([1, 2, 3]), np.array([0.5, 0.5, 1.0]))
    with pytest.raises(ValueError):  # decreasing indptr
        t.features(np.array([0, 2, 1, 3]), np.array([1, 2, 3]), np.array([0.5, 0.5, 1.0]))


# --------------------------------------------------------------------------- inverse map
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("tree", [False, True])
def test_inverse_map_roundtrip(seed, tree):
    spec, t, R = _setup(seed, n=15 + 10 * seed, kind="random", tree=tree, root=seed)
    rng = np.random.default_rng(seed + 100)
    # many measures with many supports: interior nodes without mass get alpha[v] equal
    # to the sum of their children's alpha, which is where rounding shows up
    ms = random_measures(rng, spec.n, 150, k=15)
    # include a measure sitting on the root only, and one with mass on the root
    ms.append((np.array([t.root]), np.array([2.0])))
    ms.append((np.array([t.root, spec.n - 1 if t.root != spec.n - 1 else 0]), np.array([1.0, 3.0])))
    F = t.features_of(ms)
    Rho = t.measures_from_features(F)
    assert sp.issparse(Rho) and Rho.shape == (len(ms), spec.n)
    expect = np.array([ref.dense_measure(*m, spec.n) for m in ms])
    np.testing.assert_allclose(Rho.toarray(), expect, rtol=0, atol=1e-12)
    # also equal to the reference inverse applied to the reference features
    np.testing.assert_allclose(
        np.array([ref.ref_inverse(R, ref.ref_features(R, *m)) for m in ms[:20]]),
        expect[:20],
        atol=1e-12,
    )
    # rho is a probability measure (Prop. 4.4): no negative masses, total 1
    Rho = Rho.tocsr()
    assert Rho.data.min() >= 0, f"negative node mass {Rho.data.min()!r} from the inverse map"
    np.testing.assert_allclose(np.asarray(Rho.sum(axis=1)).ravel(), 1.0, atol=1e-12)
    # alpha -> rho -> alpha (the output of the inverse map is valid input to features)
    F2 = t.features(Rho.indptr, Rho.indices, Rho.data)
    np.testing.assert_allclose(F2.toarray(), F.toarray(), rtol=0, atol=1e-12)


@settings(max_examples=examples(30))
@given(data=st.data())
def test_inverse_map_roundtrip_hypothesis(data):
    spec = data.draw(graph_specs(min_n=2, max_n=20))
    root = data.draw(st.integers(0, spec.n - 1))
    if ref.tie_nodes(spec.n, spec.edges, spec.lengths, root):
        return
    t = spec.lib().tree(root)
    ms = data.draw(st.lists(measures_on(spec.n), min_size=1, max_size=5))
    F = t.features_of(ms)
    Rho = t.measures_from_features(F).tocsr()
    expect = np.array([ref.dense_measure(*m, spec.n) for m in ms])
    np.testing.assert_allclose(Rho.toarray(), expect, atol=1e-12)
    assert Rho.data.size == 0 or Rho.data.min() >= 0
    F2 = t.features(Rho.indptr, Rho.indices, Rho.data)
    np.testing.assert_allclose(F2.toarray(), F.toarray(), atol=1e-12)
