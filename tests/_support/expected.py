"""Expected search results, computed with tests/reference.py (never read back
from the index), and the tie-tolerant checks of a top-k result against them."""
import math

import numpy as np
import reference as ref

RTOL = 1e-10  # relative agreement of distances required of the index
ATOL = 1e-12  # absolute slack, only matters for distances that are ~0


class RefModel:
    """Reference distances for a set of measures, computed with tests/reference.py."""

    def __init__(self, spec, roots):
        self.spec = spec
        self.roots = [int(r) for r in roots]
        self.trees = [spec.ref_tree(r) for r in self.roots]

    def alphas(self, measure):
        nodes, masses = measure
        if masses is None:
            masses = np.ones(len(nodes))
        return [ref.ref_features(t, nodes, masses) for t in self.trees]

    def dist(self, qa, xa, p, eta, positions=None):
        """Sliced S_p between precomputed alpha lists."""
        positions = range(len(self.trees)) if positions is None else positions
        eta = np.asarray([eta[i] for i in positions], float)
        eta = eta / eta.sum()
        return math.fsum(
            e * ref.ref_dist_from_alpha(self.trees[i], qa[i], xa[i], p)
            for e, i in zip(eta, positions)
        )


def expected_dists(model, query_alpha, doc_alphas, p, eta, positions=None):
    """dict key -> reference distance."""
    return {k: model.dist(query_alpha, a, p, eta, positions) for k, a in doc_alphas.items()}


def _close(a, b, rtol=RTOL, atol=ATOL):
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


def check_topk(got_keys, got_dists, exp, k, rtol=RTOL, atol=ATOL, order=None, what=""):
    """Tie-tolerant check of one query's top-k against expected distances.

    exp: dict key -> exact distance of every candidate.  The result must have
    min(k, len(exp)) distinct keys, ascending distances equal to the k smallest
    expected distances, each key's distance equal to its own expected distance,
    and every key strictly closer than the boundary distance must be present.
    ``order``: optional dict key -> insertion rank; then keys of (numerically)
    equal distance must come in ascending insertion order.
    """
    got_keys = list(got_keys)
    got_dists = np.asarray(got_dists, dtype=float).ravel()
    n = min(k, len(exp))
    assert len(got_keys) == n, f"{what}: {len(got_keys)} keys returned, expected {n}"
    # A row has min(k, live documents) entries: at least n, at most k.
    assert n <= len(got_dists) <= k, (
        f"{what}: distances row has {len(got_dists)} entries, expected {n} to k={k}")
    assert len(set(got_keys)) == n, f"{what}: duplicate keys in result {got_keys}"
    assert np.all(np.isinf(got_dists[n:])), f"{what}: padding distances are not inf: {got_dists[n:]}"
    head = got_dists[:n]
    assert np.all(np.isfinite(head)), f"{what}: non-finite distances {head}"
    assert np.all(np.diff(head) >= 0), f"{what}: distances not ascending: {head}"
    for key, d in zip(got_keys, head):
        assert key in exp, f"{what}: key {key!r} is not a valid candidate"
        assert _close(float(d), exp[key], rtol, atol), (
            f"{what}: distance of {key!r} is {d!r}, reference {exp[key]!r}"
        )
    want = sorted(exp.values())[:n]
    for i, (d, e) in enumerate(zip(head, want)):
        assert _close(float(d), e, rtol, atol), f"{what}: rank {i} distance {d!r}, reference {e!r}"
    if n:
        boundary = want[-1]
        tol = atol + rtol * abs(boundary)
        must = {key for key, d in exp.items() if d < boundary - tol}
        missing = must - set(got_keys)
        assert not missing, f"{what}: keys {sorted(missing)} closer than the boundary are missing"
    if order is not None:
        for i in range(n - 1):
            a, b = got_keys[i], got_keys[i + 1]
            if _close(exp[a], exp[b], 0.0, 0.0) and head[i] == head[i + 1]:
                assert order[a] < order[b], f"{what}: tie between {a!r} and {b!r} not in insertion order"


def assert_same_key_sets(keys_a, keys_b, exp, rtol=RTOL, atol=ATOL, what=""):
    """Two top-k key lists are equal as sets except at the boundary distance."""
    a, b = set(keys_a), set(keys_b)
    assert len(keys_a) == len(keys_b), f"{what}: lengths {len(keys_a)} != {len(keys_b)}"
    if a == b:
        return
    boundary = max(exp[x] for x in list(a | b))
    tol = atol + rtol * abs(boundary)
    for x in a ^ b:
        assert exp[x] >= boundary - tol, (
            f"{what}: key {x!r} at distance {exp[x]!r} differs between results although "
            f"the boundary distance is {boundary!r}"
        )
