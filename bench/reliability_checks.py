"""Reliability trials of the checks made when an index is opened or read
whole: one kind for ``bench/reliability.py``, ``kind_checked_open``.

A byte of a copy of a small index is flipped, in ``graph.h5``, in a segment
file, or inside a document key stored in ``catalog.sqlite``, and the copy is
then opened and searched (and, for a segment, opened with ``check=True``,
exported and compacted). Each trial's outcome is compared with what the
undamaged index answers: a damaged index that answers differently without
an error is the failure this kind looks for.

The trials run in a child process of this module (``--child``), so that a
damaged file that crashed the interpreter would cost one trial, counted as
a "crash", and not the run.
"""
import json
import os
import selectors
import shutil
import sqlite3
import subprocess
import sys
import time

# Keys long and distinct enough to be found in the raw catalog file.
KEY = "key-{b}-{i:03d}"
BATCHES = (12, 9, 7, 80)
N_NODES = 60
# A child that answers nothing for this long is counted as a hang.
TRIAL_TIMEOUT = 60.0
# The rows a segment flip is counted in: a plain open and search, an open
# with check=True, an export and a compact of the same damaged copy.
SEGMENT_ROWS = ("checked-open-segment-search", "checked-open-segment-check",
                "checked-open-segment-export", "checked-open-segment-compact")


# ============================================================== the index
def build_index(path, seed):
    """60 nodes, 2 roots, four segments (12 + 9 + 7 + 80 documents), labels,
    fields and one deleted document; the catalog checkpointed (no log)."""
    import numpy as np

    from sobolev_index import Graph, SobolevIndex

    rng = np.random.default_rng([seed, N_NODES])
    graph = Graph.from_points(rng.normal(size=(N_NODES * 6, 3)), n_nodes=N_NODES, edges="log",
                              seed=seed)
    with SobolevIndex.create(path, graph, roots=2, seed=seed) as index:
        for b, size in enumerate(BATCHES):
            index.add([_measure(rng) for _ in range(size)],
                      keys=[KEY.format(b=b, i=i) for i in range(size)],
                      labels=[f"label-{b}"] * size, fields=[{"i": i} for i in range(size)])
        index.delete([KEY.format(b=0, i=3)])
    db = sqlite3.connect(os.path.join(path, "catalog.sqlite"))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def _measure(rng, max_support=12):
    k = int(rng.integers(1, max_support + 1))
    return rng.integers(N_NODES, size=k), rng.uniform(0.05, 1.0, size=k)


def _queries():
    import numpy as np

    rng = np.random.default_rng(17)
    return [_measure(rng) for _ in range(6)]


def observe(index):
    """What a user reads from an index: every key (listed), each query's
    full ranking (keys, labels, distances at p = 1, 2 and inf), and each
    listed document's stored measure, label and fields."""
    import numpy as np

    keys = list(index)
    seen = {"keys": keys}
    for p in (1, 2, "inf"):
        found = index.search(_queries(), k=len(index), p=p)
        seen[f"p={p}"] = ([list(k) for k in found.keys], [list(lab) for lab in found.labels],
                          np.asarray(found.distances).tolist())
    seen["documents"] = []
    for key in keys:
        doc = index.get(key)
        seen["documents"].append((key, doc["nodes"].tolist(), doc["masses"].tolist(),
                                  doc["label"], doc["fields"]))
    return seen


def _has_replacement(seen):
    return "\ufffd" in json.dumps(seen, ensure_ascii=False)


# ============================================================== trials (child)
def _copy(template, workdir):
    path = os.path.join(workdir, "ix")
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(template, path)
    return path


def _flip(file, offset, xor):
    with open(file, "r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([value ^ xor]))


def _describe(exc):
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _read_outcome(path, reference, check=False):
    """(outcome, detail) of a reader opening ``path`` and reading it all."""
    from sobolev_index import CorruptIndexError, KeyNotFoundError, SobolevIndex

    try:
        index = SobolevIndex.open(path, check=check)
    except CorruptIndexError as exc:
        return "detected at open", _describe(exc)
    except Exception as exc:  # noqa: BLE001 - counted as a failure
        return f"wrong error at open: {type(exc).__name__}", _describe(exc)
    with index:
        try:
            seen = observe(index)
        except CorruptIndexError as exc:
            return "detected while reading", _describe(exc)
        except KeyNotFoundError as exc:
            # A listed key that get() cannot find: a wrong answer, not an error.
            seen = {"error": _describe(exc)}
        except Exception as exc:  # noqa: BLE001 - counted as a failure
            return f"wrong error while reading: {type(exc).__name__}", _describe(exc)
        if seen == reference:
            return "harmless (same results)", ""
        if _has_replacement(seen):
            return "U+FFFD in a result", ""
        report = index.verify()
    if report["ok"]:
        return "silently wrong results (verify ok)", ""
    return "wrong results, found by verify", "; ".join(report["problems"])[:200]


def _writer_outcome(path, operation):
    """(outcome, detail) of ``operation`` ("compact" or "export") on ``path``."""
    from sobolev_index import CorruptIndexError, SobolevIndex
    from sobolev_index.ingest.export import export_index

    out = os.path.join(os.path.dirname(path), "export.jsonl")
    if os.path.exists(out):
        os.remove(out)
    try:
        index = SobolevIndex.open(path, "a" if operation == "compact" else "r")
    except CorruptIndexError as exc:
        return "detected at open", _describe(exc)
    except Exception as exc:  # noqa: BLE001
        return f"wrong error at open: {type(exc).__name__}", _describe(exc)
    with index:
        try:
            if operation == "compact":
                index.compact()
            else:
                export_index(index, out)
        except CorruptIndexError as exc:
            return f"detected by {operation}", _describe(exc)
        except Exception as exc:  # noqa: BLE001
            return f"wrong error from {operation}: {type(exc).__name__}", _describe(exc)
    return f"{operation} went through the damage", ""


def trial(spec, template, workdir, cache):
    """The outcomes of one damaged copy: [(row id, outcome, detail)]."""
    from sobolev_index import SobolevIndex

    if "reference" not in cache:
        with SobolevIndex.open(template) as index:
            cache["reference"] = observe(index)
    reference = cache["reference"]
    path = _copy(template, workdir)
    _flip(os.path.join(path, spec["target"]), spec["offset"], spec["xor"])
    where = f"{spec['target']} byte {spec['offset']} ^ {spec['xor']:#04x}"
    out = []
    if spec["kind"] == "segment":
        # Readers first: the writer's compact comes last, as it may change the copy.
        for row, run_it in (
                (SEGMENT_ROWS[0], lambda: _read_outcome(path, reference)),
                (SEGMENT_ROWS[1], lambda: _read_outcome(path, reference, check=True)),
                (SEGMENT_ROWS[2], lambda: _writer_outcome(path, "export")),
                (SEGMENT_ROWS[3], lambda: _writer_outcome(path, "compact"))):
            outcome, detail = run_it()
            out.append((row, outcome, f"{where}: {detail}"))
    else:
        outcome, detail = _read_outcome(path, reference)
        out.append((spec["row"], outcome, f"{where}: {detail}"))
    return out


def child_main(template, workdir):
    """Trials read from stdin (one JSON spec a line); one JSON line of
    results each on stdout."""
    import warnings

    warnings.simplefilter("ignore")  # a damaged copy may warn; outcomes say what matters
    cache = {}
    for line in sys.stdin:
        spec = json.loads(line)
        try:
            results = trial(spec, template, workdir, cache)
        except Exception as exc:  # noqa: BLE001 - a failure of the trial itself
            results = [(spec.get("row", SEGMENT_ROWS[0]), "trial failed", _describe(exc))]
        sys.stdout.write(json.dumps(results) + "\n")
        sys.stdout.flush()


# ============================================================== the parent
class _Child:
    """This module run with ``--child``: specs in, results out, one at a time."""

    def __init__(self, template, workdir, env):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", template, workdir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            cwd=workdir)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)

    def ask(self, spec):
        """The trial's results, or None if the child died or hung."""
        try:
            self.proc.stdin.write((json.dumps(spec) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        if not self.selector.select(TRIAL_TIMEOUT):
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.selector.close()
        self.proc.stdout.close()


def _key_offsets(catalog_file):
    """Offsets of the bytes of stored keys in the raw catalog file (the
    table's copy, the key index's and any stale copy)."""
    with open(catalog_file, "rb") as handle:
        raw = handle.read()
    offsets, at = [], raw.find(b"key-")
    length = len(KEY.format(b=0, i=0))
    while at >= 0:
        offsets += range(at, at + length)
        at = raw.find(b"key-", at + 1)
    return offsets


def kind_checked_open(run):
    """Damage that opening, merging and exporting must catch."""
    never = "no other exception than CorruptIndexError, no crash"
    rows = {
        "graph-open": run.row(
            "checked-open-graph", "checked-open", "One byte flipped in graph.h5, then opened",
            "a random byte of graph.h5 XORed with a random value 1-255; open, search every "
            "document at p = 1, 2 and inf, list and get every key",
            "detected at open (graph.h5 is hashed at every open: any changed byte fails its "
            "checksum); " + never, ["detected at open"]),
        "segment-search": run.row(
            "checked-open-segment-search", "checked-open",
            "One byte flipped in a segment, then searched",
            "a random byte of a random segment XORed with 1-255; plain open, search, list and "
            "get as above",
            "detected at open or while reading, harmless (same answers), or wrong answers that "
            "verify() reports: a plain open does not hash segments (that would read the whole "
            "index), and searches check the shape of what they read, not every value; never "
            "wrong answers that verify passes; " + never,
            ["detected at open", "detected while reading", "harmless (same results)",
             "wrong results, found by verify"]),
        "segment-check-open": run.row(
            "checked-open-segment-check", "checked-open",
            "One byte flipped in a segment, opened with check=True",
            "the same damaged copy opened with `SobolevIndex.open(path, check=True)`",
            "detected at open (every segment hashed); " + never, ["detected at open"]),
        "segment-export": run.row(
            "checked-open-segment-export", "checked-open",
            "One byte flipped in a segment, then exported",
            "the same damaged copy exported with `export_index`",
            "detected at open or by the export (it hashes each segment it reads); never an "
            "export of the damage; " + never, ["detected at open", "detected by export"]),
        "segment-compact": run.row(
            "checked-open-segment-compact", "checked-open",
            "One byte flipped in a segment, then compacted",
            "the same damaged copy opened by a writer and compacted (every segment merged)",
            "detected at open or by the merge (it hashes each segment it merges); never a "
            "merged segment with a fresh checksum over the damage; " + never,
            ["detected at open", "detected by compact"]),
        "key-not-utf8": run.row(
            "checked-open-key-not-utf8", "checked-open",
            "A stored key's byte made not UTF-8 in catalog.sqlite",
            "the high bit of one byte of a stored key flipped in the raw catalog file (the "
            "table's copy, the key index's or a stale copy); open, search, list and get",
            "an error naming the document when a listing or result meets the key, or harmless "
            "(a stale copy); a flip in the key index's copy makes a look-up by that key miss, "
            "which verify() reports (SQLite's integrity check); never a key with U+FFFD; " + never,
            ["detected at open", "detected while reading", "harmless (same results)",
             "wrong results, found by verify"]),
        "key-random": run.row(
            "checked-open-key-random", "checked-open",
            "A stored key's byte flipped in catalog.sqlite",
            "one byte of a stored key XORed with a random value 1-255 in the raw catalog file",
            "as above; a flip that leaves valid UTF-8 gives a different key without an error "
            "(catalog rows carry no checksum), which verify() reports: the key index no longer "
            "matches the table; never a key with U+FFFD; " + never,
            ["detected at open", "detected while reading", "harmless (same results)",
             "wrong results, found by verify"]),
    }
    by_id = {row.id: row for row in rows.values()}
    started = time.monotonic()
    base = run.dir("checked-open")
    template = os.path.join(base, "template")
    if not os.path.isdir(template):
        build_index(template, run.seed)
    segments = sorted(n for n in os.listdir(os.path.join(template, "segments"))
                      if n.endswith(".h5"))
    sizes = {name: os.path.getsize(os.path.join(template, name))
             for name in ["graph.h5", "catalog.sqlite"] + [f"segments/{s}" for s in segments]}
    keys = _key_offsets(os.path.join(template, "catalog.sqlite"))
    n = max(1, run.trials)
    specs = []
    for _ in range(2 * n):
        specs.append({"kind": "file", "row": "checked-open-graph", "target": "graph.h5",
                      "offset": run.rng.randrange(sizes["graph.h5"]),
                      "xor": run.rng.randrange(1, 256)})
    for _ in range(2 * n):
        target = f"segments/{run.rng.choice(segments)}"
        specs.append({"kind": "segment", "target": target,
                      "offset": run.rng.randrange(sizes[target]), "xor": run.rng.randrange(1, 256)})
    for _ in range(n):
        specs.append({"kind": "file", "row": "checked-open-key-not-utf8",
                      "target": "catalog.sqlite", "offset": run.rng.choice(keys), "xor": 0x80})
    for _ in range(n):
        specs.append({"kind": "file", "row": "checked-open-key-random",
                      "target": "catalog.sqlite", "offset": run.rng.choice(keys),
                      "xor": run.rng.randrange(1, 256)})
    rows["key-not-utf8"].notes.append(f"{len(keys)} key byte positions in the raw catalog file")
    work = run.dir("checked-open/work")
    child = None
    for i, spec in enumerate(specs):
        if child is None:
            child = _Child(template, work, run.env())
        results = child.ask(spec)
        if results is None:
            # The child died or stopped answering: the trial costs a fresh one.
            child.proc.kill()
            child.close()
            child = None
            by_id[spec.get("row", SEGMENT_ROWS[0])].add(
                "crash or hang", f"{spec['target']} byte {spec['offset']} ^ {spec['xor']:#04x}")
            continue
        for row_id, outcome, detail in results:
            by_id[row_id].add(outcome, detail)
        if (i + 1) % 25 == 0:
            run.log(f"    checked-open: {i + 1}/{len(specs)} damaged copies")
    if child is not None:
        child.close()
    run.finish(list(rows.values()), started)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--child":
    child_main(sys.argv[2], sys.argv[3])
