"""The indexes the trials damage and what they compare: the templates a run
builds once, copies of them, and snapshots of an index directory before and
after a trial (the test-suite's, from ``_support.index``, made to report an
unreadable catalog instead of raising)."""
import hashlib
import os
import shutil
import sqlite3

import numpy as np
from _support import index as test_index
from _support.measures import random_measure as _random_measure


# ============================================================== files
def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_hashes(path, with_wal=True):
    """{relative path: sha256} of every file under ``path``, and its folders.

    SQLite's -shm is left out (readers write their marks there), and so is
    an empty -wal (any connection leaves one); ``with_wal=False`` leaves out
    the -wal too, whose committed content the catalog dump compares.
    """
    return test_index.file_hashes(path, skip_suffixes=("-shm",) if with_wal else ("-shm", "-wal"))


def catalog_dump(path):
    """The catalog's content as an SQL dump, read from a copy of the catalog
    and its log (so that reading cannot fold the log in or touch the index)."""
    try:
        dump = test_index.catalog_dump(path)
    except sqlite3.DatabaseError as exc:
        return f"<unreadable: {exc}>"
    return "<no catalog>" if dump is None else dump


def snapshot(path, strict=True):
    """Every file's sha256 and the catalog dump. ``strict=False`` compares
    the SQLite log through the dump only (a failed commit may leave
    uncommitted frames in it, which SQLite ignores)."""
    return {"files": file_hashes(path, with_wal=strict), "catalog": catalog_dump(path)}


def differences(before, after):
    """What changed between two snapshots, as short text ([] if nothing)."""
    out = []
    if before["catalog"] != after["catalog"]:
        out.append("catalog content")
    fb, fa = before["files"], after["files"]
    out += sorted(k for k in set(fb) | set(fa) if fb.get(k) != fa.get(k))
    return out


def files_changed(before, path):
    """The files under ``path`` that differ from ``before`` (a file_hashes of it)."""
    return differences({"files": before, "catalog": ""}, {"files": file_hashes(path), "catalog": ""})


def copy_index(src, dst, without=()):
    """Copy an index directory, leaving out files whose names end with ``without``."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n.endswith(tuple(without))]
                    if without else [])
    return dst


def segment_files(path):
    return sorted(n for n in os.listdir(os.path.join(path, "segments")) if n.endswith(".h5"))


def committed_files(path):
    """Segment file names the catalog lists, read with plain sqlite3."""
    con = sqlite3.connect(f"file:{os.path.join(path, 'catalog.sqlite')}?mode=ro", uri=True)
    try:
        return sorted(row[0] for row in con.execute("SELECT file FROM segments"))
    finally:
        con.close()


def all_hashes(path):
    """sha256 of every file under ``path`` (any folder), as a set."""
    return {sha256_of(os.path.join(root, name))
            for root, _, files in os.walk(path) for name in files}


# ============================================================== data
def random_measure(rng, n_nodes, max_support=12):
    """(nodes, masses) on 1 to ``max_support`` random nodes (repeats allowed)."""
    return _random_measure(rng, n_nodes, k=int(rng.integers(1, max_support + 1)))


def make_graph(n_nodes, seed):
    from sobolev_index import Graph

    rng = np.random.default_rng([seed, n_nodes])
    return Graph.from_points(rng.normal(size=(n_nodes * 6, 3)), n_nodes=n_nodes, edges="log",
                             seed=seed)


def build_small(path, seed):
    """60 nodes, 2 roots, four segments (12 + 9 + 7 + 80 documents; the
    last big enough to have a dense block and group norms), labels, fields
    and one tombstone: the index most trials damage a copy of."""
    from sobolev_index import SobolevIndex

    graph = make_graph(60, seed)
    rng = np.random.default_rng([seed, 1])
    with SobolevIndex.create(path, graph, roots=2, seed=seed) as index:
        index.add([random_measure(rng, 60) for _ in range(12)], keys=[f"a{i}" for i in range(12)],
                  labels=["x"] * 12, fields=[{"i": i} for i in range(12)])
        index.add([random_measure(rng, 60) for _ in range(9)], keys=[f"b{i}" for i in range(9)],
                  labels=["y"] * 9)
        index.add([random_measure(rng, 60) for _ in range(7)], keys=[f"c{i}" for i in range(7)])
        index.add([random_measure(rng, 60) for _ in range(80)], keys=[f"d{i}" for i in range(80)])
        index.delete(["a3"])


def build_sql(path, seed):
    """3,000 documents on 200 nodes, 2 roots, with labels and fields: big
    enough that SQL over it, and the S_p functions over every document, run
    for tens of seconds."""
    from sobolev_index import SobolevIndex

    graph = make_graph(200, seed)
    rng = np.random.default_rng([seed, 2])
    with SobolevIndex.create(path, graph, roots=2, seed=seed) as index:
        for part in range(3):
            index.add([random_measure(rng, 200, 20) for _ in range(1000)],
                      keys=[f"s{part}-{i}" for i in range(1000)],
                      labels=[f"l{i % 3}" for i in range(1000)],
                      fields=[{"text": f"document {part}-{i}"} for i in range(1000)])


TEMPLATES = {"small": build_small, "sql": build_sql}
