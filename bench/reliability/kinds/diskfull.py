"""A full disk: injected at each file call of a segment write and each
writing statement of the catalog's commit, reported by the free-space check,
and real (a small tmpfs filled to each amount of free space)."""
import contextlib
import json
import os
import shutil
import time

import numpy as np

from ..faults import (
    FaultPlan,
    can_mount_tmpfs,
    file_faults,
    fill_to,
    free_space_faults,
    sql_faults,
    tmpfs,
)
from ..harness import TrialRunner, describe, run_task, where_raised
from ..indexes import copy_index, differences, random_measure, segment_files, snapshot


def _disk_operation(index, op, seed):
    rng = np.random.default_rng([seed, 77])
    n = index.graph.n_nodes
    batch = [random_measure(rng, n) for _ in range(int(rng.integers(4, 12)))]
    if op == "add":
        return index.add(batch, keys=[f"df{i}" for i in range(len(batch))])
    if op == "upsert":
        return index.upsert(batch[:3], keys=["a0", "new-u1", "b4"])
    if op == "delete":
        return index.delete(["b1", "c2"])
    if op == "compact":
        return index.compact()
    raise ValueError(op)


def _add_after_the_fault(index):
    return index.add([random_measure(np.random.default_rng(5), index.graph.n_nodes)],
                     keys=["after-the-fault"])


def trial_diskfull(spec, ctx):
    """A fault injected at one position of one operation (task "diskfull")."""
    from sobolev_index import SobolevIndex
    from sobolev_index.errors import DiskFullError

    path = copy_index(ctx["template"], os.path.join(ctx["workdir"], "ix"))
    plan = FaultPlan(spec.get("position"))
    index = SobolevIndex.open(path, "a")
    op = spec["op"]
    try:
        before = snapshot(path)
        layer = spec["layer"]
        injector = (file_faults(plan) if layer == "file" else sql_faults(index, plan)
                    if layer == "sql" else free_space_faults(1000))
        error = None
        with injector:
            try:
                _disk_operation(index, op, spec["seed"])
            except Exception as exc:
                error = exc
        if spec.get("position") is None and layer != "precheck":
            return "counted", json.dumps(plan.calls)
        if layer != "precheck" and plan.fault is None:
            return "fault not reached", f"{op}: {plan.calls}"
        where = f"{op} at {plan.fault}"
        if error is None:
            # Only a fault after the operation's commit point may pass
            # silently (clean-up that a later writer redoes); then the
            # operation must be durable.
            index.close()
            problem = _operation_durable(path, op)
            if problem:
                return "no error, but the operation is not durable", f"{where}: {problem}"
            return "fault after the commit: tolerated, durable", where
        changed = differences(before, snapshot(path))
        if not isinstance(error, DiskFullError):
            return (f"{type(error).__name__} instead of DiskFullError",
                    f"{where}: {describe(error)} at {where_raised(error)}; files changed: {changed}")
        if changed:
            return "index changed", f"{where}: {changed}"
        try:
            keys = _add_after_the_fault(index)
            assert keys == ["after-the-fault"] and "after-the-fault" in index
        except Exception as exc:
            return "the handle is unusable afterwards", f"{where}: {describe(exc)}"
    finally:
        index.close()
    with SobolevIndex.open(path) as reader:
        report = reader.verify()
        if not report["ok"] or "after-the-fault" not in reader:
            return "verify not ok afterwards", f"{where}: {report['problems']}"
    return "DiskFullError, unchanged", ""


def _operation_durable(path, op):
    """None if ``op`` of _disk_operation took effect and the index verifies; else what is wrong."""
    from sobolev_index import SobolevIndex

    with SobolevIndex.open(path) as reader:
        report = reader.verify()
        if not report["ok"]:
            return f"verify: {report['problems'][:2]}"
        if op == "add" and "df0" not in reader:
            return "the added documents are missing"
        if op == "upsert" and "new-u1" not in reader:
            return "the upserted documents are missing"
        if op == "delete" and "b1" in reader:
            return "the deleted document is still there"
        if op == "compact" and (len(reader.segments) != 1 or reader.info()["deleted"]):
            return f"not compacted: {reader.segments}"
    return None


def trial_real_disk(spec, ctx):
    """An operation on a real tmpfs left with ``free`` bytes (task "realdisk").

    ``fill_at``: "start" fills the disk before the operation; "after-check"
    fills it right after the package's free-space check (another process
    taking the space meanwhile), so that the segment write itself runs out;
    "commit" fills it after the segment is written, so that SQLite runs out
    while committing.
    """
    from sobolev_index import SobolevIndex
    from sobolev_index.errors import DiskFullError
    from sobolev_index.index import storage

    mount = ctx["mount"]
    path = copy_index(ctx["template"], os.path.join(mount, "ix"))
    filler = os.path.join(mount, "filler")
    index = SobolevIndex.open(path, "a")
    fill_at, free = spec["fill_at"], [None]

    def fill():
        free[0] = fill_to(mount, spec["free"], filler)

    restore = []
    if fill_at == "after-check":
        real_check = storage.check_free_space

        def check_then_fill(directory, needed):
            real_check(directory, needed)
            fill()

        storage.check_free_space = check_then_fill
        restore.append(lambda: setattr(storage, "check_free_space", real_check))
    elif fill_at == "commit":
        catalog = index._catalog
        method = "commit_segment" if spec["op"] == "add" else "replace_segments"
        real_commit = getattr(catalog, method)

        def fill_then_commit(*args, **kwargs):
            fill()
            return real_commit(*args, **kwargs)

        setattr(catalog, method, fill_then_commit)
        restore.append(lambda: delattr(catalog, method))
    try:
        before = snapshot(path, strict=False)
        if fill_at == "start":
            fill()
        error = None
        try:
            done = _disk_operation(index, spec["op"], spec["seed"])
        except Exception as exc:
            error = exc
        for undo in restore:
            undo()
        with contextlib.suppress(FileNotFoundError):
            os.remove(filler)
        where = (f"{spec['op']}, disk filled at {fill_at} to "
                 f"{'?' if free[0] is None else free[0] // 1024} KiB free")
        if fill_at != "start" and free[0] is None and error is None:
            return "the fill point was not reached", where
        if error is None:
            outcome = "succeeded, durable"
        elif isinstance(error, DiskFullError):
            message = str(error)
            phase = ("refused before writing" if "was not made" in message else
                     "at the segment write" if "while writing" in message else
                     "at the commit" if "while committing" in message else "elsewhere")
            outcome = f"DiskFullError {phase}, unchanged"
            changed = differences(before, snapshot(path, strict=False))
            if changed:
                return "index changed", f"{where}: {changed}; {describe(error)}"
        else:
            return (f"{type(error).__name__} instead of DiskFullError",
                    f"{where}: {describe(error)} at {where_raised(error)}")
        try:
            _add_after_the_fault(index)
        except Exception as exc:
            return "the handle is unusable afterwards", f"{where}: {describe(exc)}"
    finally:
        for undo in restore:
            with contextlib.suppress(AttributeError):
                undo()
        with contextlib.suppress(FileNotFoundError):
            os.remove(filler)
        index.close()
    with SobolevIndex.open(path) as reader:
        report = reader.verify()
        if not report["ok"]:
            return "verify not ok afterwards", f"{where}: {report['problems']}"
        if error is None and spec["op"] == "add" and not all(key in reader for key in done):
            return "acknowledged documents lost", where
    return outcome, where


def kind_diskfull(run):
    """Disk full injected at every file call of a segment write and every catalog statement."""
    expected = ("one DiskFullError; index unchanged (sha256 of every file, SQL dump of the "
                "catalog); no temporary file left; the same handle then adds; verify ok (a "
                "fault after the commit point may pass if the operation is durable)")
    ok = ["DiskFullError, unchanged", "fault after the commit: tolerated, durable"]
    rows = {
        ("file", "add"): run.row("diskfull-segment-add", "diskfull", "Disk full while add() writes "
                                 "its segment", "ENOSPC from the storage module's file calls, at "
                                 "each position in turn: {positions}", expected, ok),
        ("file", "compact"): run.row("diskfull-segment-compact", "diskfull",
                                     "Disk full while compact() writes the merged segment",
                                     "as above, for compact(): {positions}", expected, ok),
        ("sql", "all"): run.row("diskfull-catalog", "diskfull", "Disk full at the catalog commit",
                                "SQLITE_FULL from each writing statement of the transaction of "
                                "add, upsert, delete and compact, in turn: {positions}", expected, ok),
        ("precheck", "all"): run.row("diskfull-precheck", "diskfull",
                                     "Too little free space before a write",
                                     "the file system reports 1,000 bytes free; add and compact",
                                     expected.replace("one DiskFullError", "one DiskFullError "
                                                      "before anything is written"), ok),
    }
    started = time.monotonic()
    template = run.template("small")
    ctx = {"template": template}
    # Find the positions first: one run of each operation, counting calls.
    count_specs = [{"row": "count", "layer": layer, "op": op, "seed": run.seed, "position": None}
                   for layer, ops in (("file", ("add", "compact")),
                                      ("sql", ("add", "upsert", "delete", "compact")))
                   for op in ops]
    specs = []
    positions = {}
    results = TrialRunner(run)("diskfull", count_specs, ctx)
    for spec, result in zip(count_specs, results):
        key = (spec["layer"], spec["op"] if spec["layer"] == "file" else "all")
        if result["outcome"] != "counted":
            rows[key].add("could not count the calls", f"{result['outcome']}: {result['detail']}")
            continue
        calls = json.loads(result["detail"])
        listed = ", ".join(_runs(calls))
        positions.setdefault(key, []).append(f"{spec['op']}: {listed}" if spec["layer"] == "sql"
                                             else listed)
        if not calls:
            rows[key].add("no call to inject into", spec["op"])
        chosen = run.subset(range(len(calls)), 3)
        specs += [{"row": rows[key].id, "layer": spec["layer"], "op": spec["op"],
                   "seed": run.seed, "position": i} for i in chosen]
    specs += [{"row": "diskfull-precheck", "layer": "precheck", "op": op, "seed": run.seed}
              for op in ("add", "compact")]
    for key, row in rows.items():
        row.injection = row.injection.format(positions="; ".join(positions.get(key, [])) or "-")
    run_task(run, "diskfull", specs, list(rows.values()), ctx)
    run.finish(rows.values(), started)


def _runs(labels):
    """['write a', 'write a', 'fsync'] -> ['write a x2', 'fsync']."""
    out = []
    for label in labels:
        if out and out[-1][0] == label:
            out[-1][1] += 1
        else:
            out.append([label, 1])
    return [f"{label} x{n}" if n > 1 else label for label, n in out]


def kind_diskfull_real(run):
    """A real full disk: a small tmpfs filled to each amount of free space."""
    from sobolev_index import SobolevIndex

    row = run.row("diskfull-real", "diskfull-real", "Real full disk (tmpfs)",
                  "a 32 MB tmpfs; a file made with fallocate() leaves N bytes free (N in 4 KiB "
                  "steps) before add or compact ('start'), right after the package's free-space "
                  "check ('after-check': another process takes the space), or just before the "
                  "catalog commit ('commit'): {levels}",
                  "one DiskFullError and the index unchanged (files and catalog content), or "
                  "success and durable; the handle then adds; verify ok",
                  ["DiskFullError refused before writing, unchanged",
                   "DiskFullError at the segment write, unchanged",
                   "DiskFullError at the commit, unchanged", "succeeded, durable"])
    started = time.monotonic()
    mount = run.dir("tmpfs")
    with contextlib.ExitStack() as stack:
        # Why the row cannot run here, if it cannot: not root, or no tmpfs.
        row.skipped = can_mount_tmpfs() or stack.enter_context(tmpfs(mount, "32M"))
        if row.skipped:
            row.injection = row.injection.format(levels="0 to ~300 KiB")
            run.finish([row], started)
            return
        template = run.template("small")
        # How much each operation writes: measured on the tmpfs itself.
        segment_need, log_need = {}, {}
        for op in ("add", "compact"):
            path = copy_index(template, os.path.join(mount, "probe"))
            old = set(segment_files(path))
            with SobolevIndex.open(path, "a") as index:
                _disk_operation(index, op, run.seed)
                segment_need[op] = sum(os.path.getsize(os.path.join(path, "segments", name))
                                       for name in set(segment_files(path)) - old)
                log_need[op] = os.path.getsize(os.path.join(path, "catalog.sqlite-wal"))
            shutil.rmtree(path)
        specs, ranges = [], []
        for op in ("add", "compact"):
            for fill_at, top in (("start", 2 * segment_need[op] + log_need[op] + (64 << 10)),
                                 ("after-check", segment_need[op] + (16 << 10)),
                                 ("commit", log_need[op] + (32 << 10))):
                levels = list(range(0, top + 1, 4096))
                ranges.append(f"{op} filled at {fill_at}: 0-{top // 1024} KiB")
                for free in run.subset(levels, 2):
                    specs.append({"row": row.id, "op": op, "fill_at": fill_at, "free": free,
                                  "seed": run.seed})
        row.injection = row.injection.format(levels="; ".join(ranges))
        row.notes.append("bytes the operation writes: " + ", ".join(
            f"{op}: segment {segment_need[op] // 1024} KiB, catalog log {log_need[op] // 1024} KiB"
            for op in segment_need))
        run_task(run, "realdisk", specs, [row], {"template": template, "mount": mount})
    run.finish([row], started)
