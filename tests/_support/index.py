"""Index-level helpers: deterministic batches (a child process rebuilds the
same content from a batch number), snapshots of an index directory (sha256 of
every file and an SQL dump of the catalog), and edits of the catalog."""
import hashlib
import os
import shutil
import sqlite3
import tempfile

import numpy as np

from _support.measures import random_measure

# --------------------------------------------------------------------------- batches
BATCH_SEED = 20240611
# The largest batch; a parent test sets it for its children through the
# environment (1: every add is one document, so merges come every few adds).
BATCH_MAX_ENV = "SOBOLEV_TEST_BATCH_MAX"


def _max_size(max_size):
    return max_size if max_size is not None else int(os.environ.get(BATCH_MAX_ENV, "24"))


def batch_size(b, max_size=None):
    rng = np.random.default_rng([BATCH_SEED, int(b), 1])
    return int(rng.integers(1, _max_size(max_size) + 1))


def batch_keys(b, max_size=None):
    return [f"b{b:06d}-{i:03d}" for i in range(batch_size(b, max_size))]


def batch_measures(b, n_nodes, max_size=None, max_support=12):
    """Deterministic content of batch number b."""
    rng = np.random.default_rng([BATCH_SEED, int(b), 2])
    out = []
    for _ in range(batch_size(b, max_size)):
        k = int(rng.integers(1, max_support + 1))
        out.append(random_measure(rng, n_nodes, k=k))
    return out


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


# ------------------------------------------------------------- a small text index
def small_text_index(directory):
    """A text index of the test corpus (``_support.corpus.make_files``: 10
    nodes, 3 roots) at ``directory/ix``, with the document ``music-0``
    deleted; returns its path. Shared by tests that only read it."""
    from _support import corpus
    from sobolev_index.ingest.documents import build_index, read_corpus

    corpus_path, vectors_path = corpus.make_files(str(directory))
    index, _ = build_index(os.path.join(str(directory), "ix"), read_corpus(corpus_path),
                           vectors_path, nodes=10, roots=3, seed=2)
    index.delete(["music-0"])
    index.close()
    return os.path.join(str(directory), "ix")
