"""Shared helpers for the SobolevIndex tests.

* deterministic graphs and batch contents (child processes rebuild the same data
  from a batch number),
* a tie-tolerant top-k comparator,
* snapshots of an index directory (sha256 of every file + a dump of the catalog),
* brute-force expected distances from tests/reference.py.

Expected values are always computed here, never read back from the index.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import numpy as np

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPERS_DIR = os.path.join(TESTS_DIR, "index_helpers")
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

import reference as ref  # noqa: E402

RTOL = 1e-10  # relative agreement of distances required by the issue
ATOL = 1e-12  # absolute slack, only matters for distances that are ~0


# ----------------------------------------------------------------- child processes
def say(line):
    """One protocol line to the parent test, flushed at once: a SIGKILL may follow."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- graphs
def random_graph(seed, n, extra=None, kind="euclidean", tree=False):
    from conftest import random_graph as _rg

    return _rg(seed, n, extra=extra, kind=kind, tree=tree)


def pick_roots(spec, k, seed=0):
    from conftest import pick_roots as _pr

    return _pr(spec, k, seed)


def random_measure(rng, n, k=None, dup=True):
    """(nodes int64, masses float64); masses in [0.05, 1), duplicate nodes allowed."""
    if k is None:
        k = int(rng.integers(1, min(n, 8) + 1))
    nodes = rng.integers(n, size=k) if dup else rng.choice(n, size=min(k, n), replace=False)
    masses = rng.uniform(0.05, 1.0, size=len(nodes))
    return nodes.astype(np.int64), masses.astype(np.float64)


def random_measures(rng, n, count, **kw):
    return [random_measure(rng, n, **kw) for _ in range(count)]


# --------------------------------------------------------------------------- batches
BATCH_SEED = 20240611


def batch_size(b, max_size=24):
    rng = np.random.default_rng([BATCH_SEED, int(b), 1])
    return int(rng.integers(1, max_size + 1))


def batch_keys(b, max_size=24):
    return [f"b{b:06d}-{i:03d}" for i in range(batch_size(b, max_size))]


def batch_measures(b, n_nodes, max_size=24, max_support=12):
    """Deterministic content of batch number b."""
    rng = np.random.default_rng([BATCH_SEED, int(b), 2])
    out = []
    for _ in range(batch_size(b, max_size)):
        k = int(rng.integers(1, max_support + 1))
        out.append(random_measure(rng, n_nodes, k=k))
    return out


def batch_of_key(key):
    return int(key[1:7])


# --------------------------------------------------------------------------- measures
def dense(nodes, masses, n_nodes):
    """Normalised dense vector of a measure (duplicates summed)."""
    nodes = np.asarray(nodes, dtype=np.int64).ravel()
    masses = np.ones(len(nodes)) if masses is None else np.asarray(masses, float).ravel()
    v = np.zeros(n_nodes)
    np.add.at(v, nodes, masses)
    return v / v.sum()


def assert_same_measure(doc_nodes, doc_masses, nodes, masses, n_nodes, what=""):
    got = dense(doc_nodes, doc_masses, n_nodes)
    exp = dense(nodes, masses, n_nodes)
    np.testing.assert_allclose(got, exp, rtol=1e-12, atol=1e-15, err_msg=what)
    # get() returns normalised masses
    np.testing.assert_allclose(float(np.sum(doc_masses)), 1.0, rtol=1e-12, err_msg=what)


def csr_identical(A, B):
    import scipy.sparse as sp

    A = sp.csr_matrix(A)
    B = sp.csr_matrix(B)
    return (
        A.shape == B.shape
        and np.array_equal(A.indptr, B.indptr)
        and np.array_equal(A.indices, B.indices)
        and np.array_equal(A.data, B.data)
    )


def assert_csr_identical(A, B, what=""):
    import scipy.sparse as sp

    A = sp.csr_matrix(A)
    B = sp.csr_matrix(B)
    assert A.shape == B.shape, f"{what}: shape {A.shape} != {B.shape}"
    assert np.array_equal(A.indptr, B.indptr), f"{what}: indptr differs"
    assert np.array_equal(A.indices, B.indices), f"{what}: indices differ"
    assert np.array_equal(A.data, B.data), (
        f"{what}: data differs (max abs diff "
        f"{np.max(np.abs(A.data - B.data)) if A.data.shape == B.data.shape else 'n/a'})"
    )


# --------------------------------------------------------------------------- brute force
class RefModel:
    """Reference distances for a set of measures, computed with tests/reference.py."""

    def __init__(self, spec, roots):
        self.spec = spec
        self.roots = [int(r) for r in roots]
        self.trees = [spec.ref_tree(r) for r in self.roots]
        self._alpha = {}

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
    assert len(got_dists) == k, f"{what}: distances row has {len(got_dists)} entries, expected k={k}"
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


# --------------------------------------------------------------------------- snapshots
def file_hashes(path, skip_suffixes=("-shm",)):
    """{relative path: sha256} of every file under path (sqlite -shm excluded:
    readers legitimately write their read marks there)."""
    out = {}
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            if any(name.endswith(s) for s in skip_suffixes):
                continue
            full = os.path.join(root, name)
            if name.endswith("-wal") and os.path.getsize(full) == 0:
                continue  # an empty WAL is what any sqlite reader leaves; no content
            rel = os.path.relpath(full, path)
            h = hashlib.sha256()
            with open(full, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            out[rel] = h.hexdigest()
    dirs_out = sorted(
        os.path.relpath(os.path.join(r, d), path) for r, ds, _ in os.walk(path) for d in ds
    )
    out["<dirs>"] = "|".join(dirs_out)
    return out


def catalog_dump(path):
    """SQL dump of catalog.sqlite, read from a copy (so that the dump itself can
    not checkpoint the WAL or otherwise touch the index)."""
    src = os.path.join(path, "catalog.sqlite")
    if not os.path.exists(src):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal"):
            if os.path.exists(src + suffix):
                shutil.copy2(src + suffix, os.path.join(tmp, "catalog.sqlite" + suffix))
        con = sqlite3.connect(os.path.join(tmp, "catalog.sqlite"))
        try:
            return "\n".join(con.iterdump())
        finally:
            con.close()


def snapshot(path):
    return {"files": file_hashes(path), "catalog": catalog_dump(path)}


def assert_unchanged(before, path, what=""):
    after = snapshot(path)
    if before["catalog"] != after["catalog"]:
        import difflib

        diff = "\n".join(
            list(difflib.unified_diff(
                (before["catalog"] or "").splitlines(),
                (after["catalog"] or "").splitlines(), lineterm="", n=0))[:40]
        )
        raise AssertionError(f"{what}: catalog content changed:\n{diff}")
    fb, fa = before["files"], after["files"]
    changed = sorted(k for k in set(fb) | set(fa) if fb.get(k) != fa.get(k))
    assert not changed, f"{what}: files changed/added/removed: {changed}"


# --------------------------------------------------------------------------- catalog edits
def set_format_version(path, value):
    """Set the format version in the catalog's meta table to ``value``.

    Works for a key/value meta table (a row whose key mentions 'format' or
    'version') and for a one-row meta table with a column named like
    'format_version'.  Returns a description of what was changed.
    """
    con = sqlite3.connect(os.path.join(path, "catalog.sqlite"))
    try:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        meta = [t for t in tables if t.lower() in ("meta", "metadata", "_meta", "index_meta")]
        assert meta, f"no meta table in catalog; tables: {tables}"
        table = meta[0]
        cols = [r[1] for r in con.execute(f'pragma table_info("{table}")')]
        lower = [c.lower() for c in cols]
        if "key" in lower or "name" in lower:
            kcol = cols[lower.index("key") if "key" in lower else lower.index("name")]
            vcol = [c for c in cols if c != kcol and c.lower() in ("value", "val", "v")]
            assert vcol, f"meta table {table} has columns {cols}; cannot find a value column"
            vcol = vcol[0]
            rows = [r[0] for r in con.execute(f'select "{kcol}" from "{table}"')]
            low = [str(r).lower() for r in rows]
            cand = ([r for r, x in zip(rows, low) if "format" in x and "version" in x]
                    or [r for r, x in zip(rows, low) if "version" in x])
            assert cand, f"meta table has keys {rows}; none names a format version"
            old = con.execute(f'select "{vcol}" from "{table}" where "{kcol}" = ?', (cand[0],)).fetchone()[0]
            new = json_like(old, value)
            con.execute(f'update "{table}" set "{vcol}" = ? where "{kcol}" = ?', (new, cand[0]))
            con.commit()
            return f"{table}.{vcol}[{kcol}={cand[0]!r}]: {old!r} -> {new!r}"
        fcols = ([c for c in cols if "format" in c.lower() and "version" in c.lower()]
                 or [c for c in cols if "version" in c.lower()])
        assert fcols, f"meta table {table} has columns {cols}; none names a format version"
        old = con.execute(f'select "{fcols[0]}" from "{table}"').fetchone()[0]
        new = json_like(old, value)
        con.execute(f'update "{table}" set "{fcols[0]}" = ?', (new,))
        con.commit()
        return f"{table}.{fcols[0]}: {old!r} -> {new!r}"
    finally:
        con.close()


def json_like(old, value):
    """Encode ``value`` like ``old`` was encoded (int, str or JSON string)."""
    if isinstance(old, (int, float)):
        return value
    if isinstance(old, str):
        return str(value)
    if isinstance(old, bytes):
        return str(value).encode()
    return value


# --------------------------------------------------------------------------- processes
def helper_script(name):
    return os.path.join(HELPERS_DIR, name)


def child_env(**extra):
    env = dict(os.environ)
    # No empty entry: it would mean the current directory, and from a source
    # checkout that imports the uncompiled package instead of the installed one.
    env["PYTHONPATH"] = os.pathsep.join(
        [TESTS_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(code_or_script, args=(), env=None, timeout=120, script=False):
    cmd = [sys.executable]
    cmd += [code_or_script] if script else ["-c", code_or_script]
    cmd += [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env or child_env(),
                          timeout=timeout)
