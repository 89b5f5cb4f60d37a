"""The checks made when an index is opened or read whole (the kind
``checked-open``).

A byte of a copy of a small index is flipped, in ``graph.h5``, in a segment
file, or inside a document key stored in ``catalog.sqlite``, and the copy is
then opened and searched (and, for a segment, opened with ``check=True``,
exported and compacted, each on a fresh damaged copy). Each trial's outcome
is compared with what the undamaged index answers: a damaged index that
answers differently without an error is the failure this kind looks for.
"""
import json
import os
import sqlite3
import time

import numpy as np

from ..faults import find_all, flip_byte
from ..harness import describe, run_task
from ..indexes import copy_index, make_graph, random_measure
from .damage import random_flips

# Keys long and distinct enough to be found in the raw catalog file.
KEY = "key-{b}-{i:03d}"
BATCHES = (12, 9, 7, 80)
N_NODES = 60
# A child that answers nothing for this long is counted as a hang.
TRIAL_TIMEOUT = 60.0
# What is done with a copy whose segment has a flipped byte, by row: a plain
# open and search, an open with check=True, an export and a compact.
SEGMENT_ROWS = {"checked-open-segment-search": "read", "checked-open-segment-check": "check",
                "checked-open-segment-export": "export",
                "checked-open-segment-compact": "compact"}


# ============================================================== the index
def build_index(path, seed):
    """60 nodes, 2 roots, four segments (12 + 9 + 7 + 80 documents), labels,
    fields and one deleted document; the catalog checkpointed (no log)."""
    from sobolev_index import SobolevIndex

    rng = np.random.default_rng([seed, N_NODES, 1])
    with SobolevIndex.create(path, make_graph(N_NODES, seed), roots=2, seed=seed) as index:
        for b, size in enumerate(BATCHES):
            index.add([random_measure(rng, N_NODES) for _ in range(size)],
                      keys=[KEY.format(b=b, i=i) for i in range(size)],
                      labels=[f"label-{b}"] * size, fields=[{"i": i} for i in range(size)])
        index.delete([KEY.format(b=0, i=3)])
    db = sqlite3.connect(os.path.join(path, "catalog.sqlite"))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def _queries():
    rng = np.random.default_rng(17)
    return [random_measure(rng, N_NODES) for _ in range(6)]


def observe(index):
    """What a user reads from an index: every key (listed), each query's
    full ranking (keys, labels, distances at p = 1, 2 and inf), and each
    listed document's stored measure, label and fields."""
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


# ============================================================== trials (in a child)
def _read_outcome(path, reference, check=False):
    """(outcome, detail) of a reader opening ``path`` and reading it all."""
    from sobolev_index import CorruptIndexError, KeyNotFoundError, SobolevIndex

    try:
        index = SobolevIndex.open(path, check=check)
    except CorruptIndexError as exc:
        return "detected at open", describe(exc)
    except Exception as exc:  # noqa: BLE001 - counted as a failure
        return f"wrong error at open: {type(exc).__name__}", describe(exc)
    with index:
        try:
            seen = observe(index)
        except CorruptIndexError as exc:
            return "detected while reading", describe(exc)
        except KeyNotFoundError as exc:
            # A listed key that get() cannot find: a wrong answer, not an error.
            seen = {"error": describe(exc)}
        except Exception as exc:  # noqa: BLE001 - counted as a failure
            return f"wrong error while reading: {type(exc).__name__}", describe(exc)
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
        return "detected at open", describe(exc)
    except Exception as exc:  # noqa: BLE001
        return f"wrong error at open: {type(exc).__name__}", describe(exc)
    with index:
        try:
            if operation == "compact":
                index.compact()
            else:
                export_index(index, out)
        except CorruptIndexError as exc:
            return f"detected by {operation}", describe(exc)
        except Exception as exc:  # noqa: BLE001
            return f"wrong error from {operation}: {type(exc).__name__}", describe(exc)
    return f"{operation} went through the damage", ""


def trial_checked_open(spec, ctx):
    """One damaged copy and one operation on it (task "checked-open")."""
    from sobolev_index import SobolevIndex

    cache = ctx["cache"]
    if "reference" not in cache:
        with SobolevIndex.open(ctx["template"]) as index:
            cache["reference"] = observe(index)
    path = copy_index(ctx["template"], os.path.join(ctx["workdir"], "ix"))
    flip_byte(os.path.join(path, spec["target"]), spec["offset"], spec["xor"])
    op = spec["op"]
    if op in ("read", "check"):
        outcome, detail = _read_outcome(path, cache["reference"], check=op == "check")
    else:
        outcome, detail = _writer_outcome(path, op)
    return outcome, f"{spec['target']} byte {spec['offset']} ^ {spec['xor']:#04x}: {detail}"


# ============================================================== the kind
def _key_offsets(catalog_file):
    """Offsets of the bytes of stored keys in the raw catalog file (the
    table's copy, the key index's and any stale copy)."""
    with open(catalog_file, "rb") as handle:
        raw = handle.read()
    length = len(KEY.format(b=0, i=0))
    return [at + i for at in find_all(raw, b"key-") for i in range(length)]


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
    started = time.monotonic()
    template = os.path.join(run.dir("checked-open"), "template")
    if not os.path.isdir(template):
        build_index(template, run.seed)
    segments = sorted(f"segments/{n}" for n in os.listdir(os.path.join(template, "segments"))
                      if n.endswith(".h5"))
    sizes = {name: os.path.getsize(os.path.join(template, name))
             for name in ["graph.h5", "catalog.sqlite"] + segments}
    keys = _key_offsets(os.path.join(template, "catalog.sqlite"))
    n = max(1, run.trials)
    specs = random_flips(run, 2 * n, sizes, ["graph.h5"], row="checked-open-graph", op="read")
    # Each damaged segment copy is tried by every segment row.
    specs += [{**flip, "row": row, "op": op}
              for flip in random_flips(run, 2 * n, sizes, segments)
              for row, op in SEGMENT_ROWS.items()]
    for row, xor in (("checked-open-key-not-utf8", lambda: 0x80),
                     ("checked-open-key-random", lambda: run.rng.randrange(1, 256))):
        specs += [{"row": row, "op": "read", "target": "catalog.sqlite",
                   "offset": run.rng.choice(keys), "xor": xor()} for _ in range(n)]
    rows["key-not-utf8"].notes.append(f"{len(keys)} key byte positions in the raw catalog file")
    run_task(run, "checked-open", specs, list(rows.values()), {"template": template},
             timeout=TRIAL_TIMEOUT)
    run.finish(list(rows.values()), started)
