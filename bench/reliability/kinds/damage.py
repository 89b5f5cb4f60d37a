"""Damaged files: a byte flipped in a segment, graph.h5 or catalog.sqlite, a
file cut short or missing, a segment's arrays overwritten with the checksum
resealed, and the catalog's rows edited with SQL. Damage must be reported
(at open or by verify), and a writer's repair must never delete committed
data."""
import os
import time

import numpy as np

from ..faults import edit_catalog, find_all, flip_byte, overwrite_array, truncate, write_bytes
from ..harness import describe, run_task, where_raised
from ..indexes import (
    all_hashes,
    catalog_dump,
    committed_files,
    copy_index,
    differences,
    random_measure,
    sha256_of,
    snapshot,
)


def random_flips(run, count, sizes, targets, **spec):
    """``count`` trial specs, each one byte of a random file of ``targets``
    (paths in the index, sizes in ``sizes``) XORed with 1-255; ``spec`` is
    added to each."""
    out = []
    for _ in range(count):
        target = targets[0] if len(targets) == 1 else run.rng.choice(targets)
        out.append({**spec, "target": target, "offset": run.rng.randrange(sizes[target]),
                    "xor": run.rng.randrange(1, 256)})
    return out


# ============================================================== the judgement
def damaged_index_outcome(path, originals, harmless_dump=None):
    """Open, search and verify a damaged index, then let a writer open it and
    verify(repair=True). Returns (outcome, detail).

    ``originals``: {segment file name: sha256} of the committed segments
    before the damage; every one of them must still be somewhere in the
    index directory afterwards (a repair that deletes committed data is a
    failure). ``harmless_dump``: the catalog dump before the damage, when a
    damage can be harmless (the catalog: a flip in free space).
    """
    from sobolev_index import CorruptIndexError, SobolevIndex

    detected = None
    try:
        reader = SobolevIndex.open(path, "r")
    except CorruptIndexError as exc:
        detected, detail = "detected at open", describe(exc)
        reader = None
    except Exception as exc:
        return f"wrong error at open: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
    if reader is not None:
        with reader:
            try:
                query = [(np.array([1, 5, 9]), np.array([0.2, 0.3, 0.5]))]
                reader.search(query, k=5, p=1)
                reader.search(query, k=5, p="inf")
                for key in list(reader)[:5]:
                    reader.get(key)
            except CorruptIndexError:
                pass  # found while reading: fine
            except Exception as exc:
                return (f"wrong error while reading: {type(exc).__name__}",
                        f"{describe(exc)} at {where_raised(exc)}")
            try:
                report = reader.verify()
            except Exception as exc:
                return f"verify raised {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
            if not report["ok"]:
                detected, detail = "detected by verify", "; ".join(report["problems"])[:300]
    # A writer: opening removes leftovers and repair may move or remove files;
    # neither may touch committed data.
    try:
        with SobolevIndex.open(path, "a") as writer:
            writer.verify(repair=True)
    except CorruptIndexError:
        pass
    except Exception as exc:
        return f"wrong error from a writer: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
    present = all_hashes(path)
    lost = [name for name, digest in originals.items()
            if digest not in present and not _exists_anywhere(path, name)]
    if lost:
        return "a writer deleted committed data", f"segment file(s) {lost} are gone"
    if detected:
        return detected, detail
    if harmless_dump is not None:
        now = catalog_dump(path)
        if now == harmless_dump:
            return "harmless (catalog content unchanged)", ""
        return "missed (verify ok, content changed)", _dump_difference(harmless_dump, now)
    return "missed (verify ok)", ""


def _exists_anywhere(path, name):
    return any(name in files for _, _, files in os.walk(path))


def _dump_difference(before, after):
    a, b = before.splitlines(), after.splitlines()
    changed = [line for line in b if line not in set(a)]
    return ("changed rows: " + " | ".join(changed[:3]))[:400] if changed else "dump differs"


def _committed_hashes(template):
    return {name: sha256_of(os.path.join(template, "segments", name))
            for name in committed_files(template)}


# ============================================================== flipped, cut, missing
def trial_damage(spec, ctx):
    """Byte flips, truncations and missing files (task "damage")."""
    template = ctx["template"]
    cache = ctx["cache"]
    if "originals" not in cache:
        cache["originals"] = _committed_hashes(template)
        cache["dump"] = catalog_dump(template)
    path = copy_index(template, os.path.join(ctx["workdir"], "ix"))
    target = os.path.join(path, spec["target"])
    kind = spec["kind"]
    if kind == "flip":
        flip_byte(target, spec["offset"], spec["xor"])
    elif kind == "truncate":
        truncate(target, spec["length"])
    elif kind == "remove":
        os.remove(target)
    elif kind == "replace":
        write_bytes(target, spec["offset"], spec["byte"].encode("latin-1"))
    if kind == "remove":
        # Opening must refuse with a clear error and change nothing.
        from sobolev_index import CorruptIndexError, SobolevIndex

        before = snapshot(path)
        for mode in ("r", "a"):
            try:
                SobolevIndex.open(path, mode).close()
            except CorruptIndexError as exc:
                message = str(exc)
            except Exception as exc:
                return f"wrong error at open: {type(exc).__name__}", describe(exc)
            else:
                return "opened without the file", f"mode {mode!r}"
            stem = os.path.basename(spec["target"]).split(".")[0]
            if stem not in message:
                return "error does not name the file", message[:200]
        changed = differences(before, snapshot(path))
        if changed:
            return "index changed", f"{changed}"
        return "refused at open, unchanged", ""
    harmless = cache["dump"] if spec["target"] == "catalog.sqlite" else None
    outcome, detail = damaged_index_outcome(path, cache["originals"], harmless)
    return outcome, f"{spec['target']} {kind} at {spec.get('offset', spec.get('length'))}: {detail}"


def kind_damage(run):
    """Byte flips (segment, graph, catalog, a stored file name), truncated and missing files."""
    template = run.template("small")
    segments = [f"segments/{s}" for s in committed_files(template)]
    sizes = {rel: os.path.getsize(os.path.join(template, rel))
             for rel in segments + ["graph.h5", "catalog.sqlite"]}
    detected = ["detected at open", "detected by verify"]
    never = ("never verify ok while damaged, no other exception than CorruptIndexError, and a "
             "writer's open and verify(repair=True) never delete a committed segment")
    rows = {
        "flip-segment": run.row("flip-segment", "byteflip", "One byte flipped in a segment file",
                                "a random byte of a random segment XORed with a random value 1-255; "
                                "open, search p=1 and p=inf, get, verify, then a writer's "
                                "verify(repair=True)", "reported at open or by verify (checksum); " +
                                never, detected),
        "flip-graph": run.row("flip-graph", "byteflip", "One byte flipped in graph.h5",
                              "as above, in graph.h5", "reported at open or by verify (checksum); " +
                              never, detected),
        "flip-catalog": run.row("flip-catalog", "byteflip", "One byte flipped in catalog.sqlite",
                                "as above, in catalog.sqlite (checkpointed, no log)",
                                "reported at open or by verify, or provably harmless (the SQL dump "
                                "of the catalog is unchanged); " + never,
                                detected + ["harmless (catalog content unchanged)"]),
        "flip-catalog-name": run.row("flip-catalog-name", "byteflip",
                                     "A segment's file name changed by one byte in catalog.sqlite",
                                     "one digit of a stored segment file name replaced by another "
                                     "digit, in the raw catalog file", "reported at open or by "
                                     "verify, or harmless (a stale copy of the name); " + never,
                                     detected + ["harmless (catalog content unchanged)"]),
        "truncate": run.row("truncate", "truncate", "Truncated file",
                            "a segment, graph.h5 or catalog.sqlite cut to a random length",
                            "reported at open or by verify, or harmless for the catalog; " + never,
                            detected + ["harmless (catalog content unchanged)"]),
        "missing-file": run.row("missing-file", "missing", "Missing file",
                                "a segment, graph.h5 or catalog.sqlite deleted; opened as reader "
                                "and as writer", "CorruptIndexError (NotAnIndexError for the "
                                "catalog) naming the file, for reader and writer; nothing changed",
                                ["refused at open, unchanged"]),
    }
    started = time.monotonic()
    n = run.trials
    specs = (random_flips(run, 8 * n, sizes, segments, row="flip-segment", kind="flip")
             + random_flips(run, 4 * n, sizes, ["graph.h5"], row="flip-graph", kind="flip")
             + random_flips(run, 15 * n, sizes, ["catalog.sqlite"], row="flip-catalog", kind="flip"))
    with open(os.path.join(template, "catalog.sqlite"), "rb") as handle:
        raw = handle.read()
    name_digits = [at + i for s in segments
                   for at in find_all(raw, os.path.basename(s).encode()) for i in range(6)]
    for _ in range(2 * n):
        at = run.rng.choice(name_digits)
        digit = chr(raw[at])
        specs.append({"row": "flip-catalog-name", "kind": "replace", "target": "catalog.sqlite",
                      "offset": at, "byte": run.rng.choice([d for d in "0123456789" if d != digit])})
    for _ in range(2 * n):
        target = run.rng.choice(list(sizes))
        specs.append({"row": "truncate", "kind": "truncate", "target": target,
                      "length": run.rng.randrange(sizes[target])})
    for target in run.subset(list(sizes), 2):
        specs.append({"row": "missing-file", "kind": "remove", "target": target})
    rows["flip-catalog-name"].notes.append(
        f"{len(name_digits)} digit positions of segment names in the raw file (live and stale copies)")
    run_task(run, "damage", specs, list(rows.values()), {"template": template})
    run.finish(rows.values(), started)


# ============================================================== arrays, resealed
ARRAY_DAMAGE = {
    "measure node 10**6": ("measures/nodes", 3, 10**6),
    "measure node -5": ("measures/nodes", 3, -5),
    "measure mass NaN": ("measures/masses", 3, float("nan")),
    "measure row pointer past the end": ("measures/indptr", -1, 10**6),
    "normalising factor 0": ("measures/row_scale", 3, 0.0),
    "a document id repeated": ("doc_ids", 3, None),
    "posting value 7.5 (outside [0, 1])": ("inverted/post_values", 3, 7.5),
    "posting value NaN": ("inverted/post_values", 3, float("nan")),
    "posting row offset 65535": ("inverted/post_rows", 3, 65535),
    "posting list pointer past the end": ("inverted/ptr", 3, 10**6),
    "dense row of 7.5 (outside [0, 1])": ("inverted/dense", 3, 7.5),
    "row norms NaN": ("inverted/norm_low", 0, float("nan")),
    "group norms NaN": ("inverted/norm_group", 3, float("nan")),
}
ARRAY_OPERATIONS = {
    "search p=1": lambda ix: ix.search([([1, 2, 7], None)], k=3, p=1),
    "search p=inf": lambda ix: ix.search([([1, 2, 7], None)], k=3, p="inf"),
    "search p=2 by key": lambda ix: ix.search("b1", k=3, p=2),
    "gram": lambda ix: ix.gram(keys=["a0", "a4", "b2", "c1"], p=1),
    "compact": lambda ix: ix.compact(),
    "verify": lambda ix: ix.verify(),
}


def trial_arrays(spec, ctx):
    import h5py

    from sobolev_index import SobolevIndex

    cache = ctx["cache"]
    op = spec["op"]
    if op != "verify" and ("reference", op) not in cache:
        # The same operation on the undamaged index: a damage that does not
        # change the result of an operation is harmless to it.
        with SobolevIndex.open(ctx["template"]) as index:
            cache[("reference", op)] = (_whole_index_results(index) if op == "compact" else
                                        _comparable(ARRAY_OPERATIONS[op](index)))
    path = copy_index(ctx["template"], os.path.join(ctx["workdir"], "ix"))
    dataset, at, value = ARRAY_DAMAGE[spec["damage"]]
    # The first segment that has the array (small ones have no dense block).
    for name in committed_files(path):
        with h5py.File(os.path.join(path, "segments", name), "r") as f:
            if f[dataset].size:
                break
    overwrite_array(path, name, dataset, at, value)
    outcome, detail = _array_operation(path, op, cache.get(("reference", op)))
    return outcome, f"{spec['damage']}, {op}: {detail}"


def _comparable(result):
    """A search result or gram matrix as arrays, to compare with another."""
    if isinstance(result, tuple):  # gram: (matrix, keys, labels)
        return [np.asarray(result[0], dtype=np.float64), list(result[1])]
    return [np.asarray(result.distances, dtype=np.float64), result.keys]


def _array_operation(path, op, reference):
    from sobolev_index import CorruptIndexError, SobolevIndex

    try:
        with SobolevIndex.open(path, "a" if op == "compact" else "r") as index:
            result = ARRAY_OPERATIONS[op](index)
    except CorruptIndexError as exc:
        return "CorruptIndexError", describe(exc)
    except Exception as exc:
        return f"wrong error: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
    if op == "verify":
        return ("reported by verify", "") if not result["ok"] else ("missed (verify ok)", "")
    if op == "compact":
        # The merged segment got a fresh checksum: the damage must not pass silently into it.
        with SobolevIndex.open(path) as index:
            report = index.verify()
            if report["ok"]:
                # Fine only if the damage is gone: derived arrays (the inverted
                # file) are rebuilt from intact ones by a merge.
                now = _whole_index_results(index)
        if report["ok"]:
            if _same_results(now, reference):
                return "compacted; the damage is gone (rebuilt from intact arrays)", ""
            return "damage merged into a new segment that verifies ok", ""
        return "compacted; verify reports the damage", "; ".join(report["problems"])[:200]
    values, names = _comparable(result)
    if _same_results([[values, names]], [reference]):
        return "unaffected (same result as undamaged)", ""
    return "wrong result, no error", f"got {values.ravel()[:4].tolist()} for {str(names)[:80]}, " \
        f"undamaged {reference[0].ravel()[:4].tolist()}"


def _whole_index_results(index):
    """Results that read every array of every segment: the distance matrix of
    all live documents, and searches that use the inverted files."""
    rng = np.random.default_rng(3)
    queries = [random_measure(rng, index.graph.n_nodes) for _ in range(8)]
    return [_comparable(index.gram(keys=list(index), p=1)),
            _comparable(index.search(queries, k=len(index), p=1)),
            _comparable(index.search(queries, k=len(index), p=2))]


def _same_results(a, b):
    return len(a) == len(b) and all(
        x[1] == y[1] and x[0].shape == y[0].shape and np.allclose(x[0], y[0], rtol=1e-12, atol=1e-15)
        for x, y in zip(a, b))


def kind_arrays(run):
    """Malformed arrays inside a segment whose checksum was resealed."""
    row = run.row("corrupt-arrays", "corrupt-arrays",
                  "Malformed arrays in a segment, checksum resealed",
                  "one value of a segment's arrays overwritten with h5py and the catalog's "
                  "checksum updated to match (so only the content can tell): {damages}; then "
                  "{ops}", "CorruptIndexError, or the same result as on the undamaged index "
                  "(verify: a problem reported); no crash, no silently wrong result; compact never "
                  "launders the damage into a segment that verifies ok",
                  ["CorruptIndexError", "reported by verify", "compacted; verify reports the damage",
                   "unaffected (same result as undamaged)",
                   "compacted; the damage is gone (rebuilt from intact arrays)"])
    started = time.monotonic()
    damages = run.subset(ARRAY_DAMAGE, 3)
    ops = run.subset(ARRAY_OPERATIONS, 3)
    row.injection = row.injection.format(damages="; ".join(damages), ops=", ".join(ops))
    specs = [{"row": row.id, "damage": d, "op": o} for d in damages for o in ops]
    run_task(run, "arrays", specs, [row], {"template": run.template("small")})
    run.finish([row], started)


# ============================================================== the catalog edited with SQL
# Damage that SQLite's own checks cannot see.
CATALOG_EDITS = {
    "a key's bytes not UTF-8":
        "UPDATE documents SET key = CAST(X'62ff7461' AS TEXT) WHERE key = 'b1'",
    "a document row deleted": "DELETE FROM documents WHERE key = 'b2'",
    "a document in an unlisted segment": "UPDATE documents SET segment = 99 WHERE key = 'c1'",
    "a segment's row count + 1": "UPDATE segments SET rows = rows + 1 WHERE id = 1",
    "next_doc_id behind the ids in use": "UPDATE meta SET value = '2' WHERE name = 'next_doc_id'",
    "a segment checksum changed": "UPDATE segments SET checksum = 'ab' || substr(checksum, 3) WHERE id = 2",
    "the graph checksum changed": "UPDATE meta SET value = '\"00\"' WHERE name = 'graph_checksum'",
    "a root's node changed": "UPDATE roots SET node = node + 1 WHERE position = 0",
    "meta p 1 -> 0 (one bit)": "UPDATE meta SET value = '0' WHERE name = 'p'",
    "meta p not a number": "UPDATE meta SET value = '\"abc\"' WHERE name = 'p'",
    "meta p null": "UPDATE meta SET value = 'null' WHERE name = 'p'",
    "meta p not JSON": "UPDATE meta SET value = '{' WHERE name = 'p'",
    "meta created_at not JSON": "UPDATE meta SET value = '\"2026' WHERE name = 'created_at'",
    "meta next_doc_id not a number": "UPDATE meta SET value = '\"x\"' WHERE name = 'next_doc_id'",
    "a root's eta not a number": "UPDATE roots SET eta = 'abc' WHERE position = 0",
    "a root's eta negative": "UPDATE roots SET eta = -1 WHERE position = 0",
    "a deleted flag 7": "UPDATE documents SET deleted = 7 WHERE key = 'a0'",
    "a document's fields not JSON": "UPDATE documents SET fields = '{' WHERE key = 'a1'",
    "two live documents with one key":
        "DROP INDEX documents_live_key; UPDATE documents SET key = 'a1' WHERE key = 'a2'",
    "a segment renamed to an unused name": "UPDATE segments SET file = '000099.h5' WHERE id = 2",
    "a segment renamed to another segment's name":
        "UPDATE segments SET file = '000001.h5' WHERE id = 2",
}


def trial_catalog_edit(spec, ctx):
    template = ctx["template"]
    originals = _committed_hashes(template)
    path = copy_index(template, os.path.join(ctx["workdir"], "ix"))
    edit_catalog(path, CATALOG_EDITS[spec["edit"]])
    outcome, detail = damaged_index_outcome(path, originals)
    return outcome, f"{spec['edit']}: {detail}" if detail else spec["edit"]


def kind_catalog_edits(run):
    """Catalog content damaged with SQL (valid SQLite, wrong content)."""
    row = run.row("catalog-edits", "catalog-edits", "Catalog content damaged (SQL edits)",
                  "one edit of the catalog with sqlite3 (valid SQLite, wrong content): {edits}",
                  "reported at open (CorruptIndexError) or by verify; no other exception; a "
                  "writer never deletes a committed segment",
                  ["detected at open", "detected by verify"])
    started = time.monotonic()
    edits = run.subset(CATALOG_EDITS, 5)
    row.injection = row.injection.format(edits="; ".join(edits))
    specs = [{"row": row.id, "edit": e} for e in edits]
    run_task(run, "catalog-edit", specs, [row], {"template": run.template("small")})
    run.finish([row], started)
