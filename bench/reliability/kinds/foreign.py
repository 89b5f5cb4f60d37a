"""Paths that are not an index (or an index of another format), and a
catalog whose segment file name points outside its index: refused, and no
file anywhere created, changed or removed."""
import os
import shutil
import sqlite3
import time

import numpy as np

from ..faults import edit_catalog
from ..harness import cli_error_lines, describe, run_cli, run_task, where_raised
from ..indexes import copy_index, file_hashes, files_changed

FOREIGN_KINDS = ["a regular file", "an empty directory", "a directory of other files",
                 "another SQLite database", "random bytes as catalog", "an HDF5 file",
                 "a path that does not exist", "format version 999", "another format name"]


def _make_foreign(kind, p, template):
    """Make ``p`` the thing ``kind`` names."""
    if kind == "a regular file":
        with open(p, "w") as handle:
            handle.write("hello")
    elif kind == "an empty directory":
        os.mkdir(p)
    elif kind == "a directory of other files":
        os.mkdir(p)
        with open(os.path.join(p, "notes.txt"), "w") as handle:
            handle.write("x")
        with open(os.path.join(p, "graph.h5"), "wb") as handle:
            handle.write(b"\x89HDF\r\n\x1a\n" + bytes(100))
    elif kind == "another SQLite database":
        os.mkdir(p)
        con = sqlite3.connect(os.path.join(p, "catalog.sqlite"))
        con.execute("CREATE TABLE people (name TEXT)")
        con.commit()
        con.close()
    elif kind == "random bytes as catalog":
        os.mkdir(p)
        with open(os.path.join(p, "catalog.sqlite"), "wb") as handle:
            handle.write(np.random.default_rng(0).bytes(4096))
    elif kind == "an HDF5 file":
        import h5py

        with h5py.File(p, "w") as f:
            f["x"] = np.arange(5)
    elif kind in ("format version 999", "another format name"):
        copy_index(template, p)
        value, name = ("999", "format_version") if kind == "format version 999" else \
            ('"other-index"', "format")
        edit_catalog(p, "UPDATE meta SET value = ? WHERE name = ?", (value, name))


def trial_foreign(spec, ctx):
    from sobolev_index import CorruptIndexError, SobolevIndex, UnsupportedFormatError

    base = os.path.join(ctx["workdir"], "foreign")
    if os.path.exists(base):
        shutil.rmtree(base)
    os.makedirs(base)
    p = os.path.join(base, "thing")
    kind = spec["kind"]
    _make_foreign(kind, p, ctx["template"])
    expected = UnsupportedFormatError if kind == "format version 999" else CorruptIndexError
    before = file_hashes(base)
    try:
        SobolevIndex.open(p, spec["mode"]).close()
    except expected as exc:
        if not str(exc):
            return "error without a message", type(exc).__name__
    except Exception as exc:
        return f"wrong error: {type(exc).__name__}", f"{describe(exc)} at {where_raised(exc)}"
    else:
        return "opened", kind
    changed = files_changed(before, base)
    if changed:
        return "files changed or created", f"{changed}"
    return "refused, nothing touched", ""


def kind_foreign(run):
    """Paths that are not an index, and unknown format versions."""
    row = run.row("not-an-index", "foreign", "Not an index, or another format",
                  "open (reader and writer) of: {kinds}",
                  "NotAnIndexError / CorruptIndexError (UnsupportedFormatError for version 999) "
                  "with a message; no file created or changed",
                  ["refused, nothing touched"])
    started = time.monotonic()
    kinds = run.subset(FOREIGN_KINDS, 3)
    row.injection = row.injection.format(kinds="; ".join(kinds))
    specs = [{"row": row.id, "kind": k, "mode": m} for k in kinds for m in ("r", "a")]
    run_task(run, "foreign", specs, [row], {"template": run.template("small")})
    run.finish([row], started)


MALICIOUS_NAMES = ["../../B.idx/segments/000001.h5", "{ABS_B}", "{ABS_CANARY}", "../000001.h5",
                   "000001.h5/..", "notes.txt", "segments/000001.h5", "000001.h5\n", "", ".."]


def _malicious_layout(base, template):
    """Indexes A and B side by side, a canary folder, and decoys: a copy of
    segment 1 in the canary folder and at A's top, a notes.txt in A's
    segments/."""
    shutil.rmtree(base)
    os.makedirs(os.path.join(base, "canary"))
    copy_index(template, os.path.join(base, "B.idx"))
    copy_index(template, os.path.join(base, "A.idx"))
    segment = os.path.join(template, "segments", "000001.h5")
    shutil.copy(segment, os.path.join(base, "canary", "000001.h5"))
    shutil.copy(segment, os.path.join(base, "A.idx", "000001.h5"))
    with open(os.path.join(base, "A.idx", "segments", "notes.txt"), "w") as handle:
        handle.write("mine")


def _malicious_operation(a, base, op):
    """(outcome, detail) of ``op`` on index ``a`` whose catalog names a file outside it."""
    from sobolev_index import CorruptIndexError, SobolevIndex

    if op.startswith("open"):
        try:
            SobolevIndex.open(a, op[6]).close()
            return "opened", op
        except CorruptIndexError as exc:
            return "CorruptIndexError", describe(exc)
        except Exception as exc:
            return f"wrong error: {type(exc).__name__}", describe(exc)
    argv = {"CLI compact": ["compact", a], "CLI verify --repair": ["verify", a, "--repair"],
            "CLI delete": ["delete", a, "a0"]}[op]
    status, out, err, _ = run_cli(argv, cwd=base)
    lines = cli_error_lines(err)
    if status == 1 and len(lines) == 1 and "Traceback" not in err:
        return "CorruptIndexError", lines[0][:150]
    if (argv[0] == "verify" and status == 1 and "Traceback" not in err
            and "problem:" in out and "not a segment file name" in out):
        # verify reads the catalog without opening the index, and reports
        # the bad name as a problem (exit 1) rather than failing with an error.
        return "CorruptIndexError", out.splitlines()[1][:150]
    return "CLI: not one clear error", f"status {status}: {err[-300:]}"


def kind_malicious_names(run):
    """A catalog whose segment file name points outside the index."""
    row = run.row("catalog-segment-name", "malicious-name",
                  "A catalog naming a file outside the index",
                  "segment 1's file name in A's catalog set to: {names}; then {ops}",
                  "CorruptIndexError (CLI: one 'Error:' line; verify: the name reported as a "
                  "problem, exit 1); no file anywhere changed or removed, in A, in the "
                  "neighbouring index B or in a canary folder",
                  ["CorruptIndexError, nothing touched"])
    started = time.monotonic()
    base = run.dir("malicious")
    template = run.template("small")
    names = run.subset(MALICIOUS_NAMES, 1)
    ops = ["open('r')", "open('a')", "CLI compact", "CLI verify --repair", "CLI delete"]
    row.injection = row.injection.format(names=", ".join(repr(n) for n in names), ops=", ".join(ops))
    a = os.path.join(base, "A.idx")
    fresh = False
    for name in names:
        if not fresh:
            _malicious_layout(base, template)
        actual = (name.replace("{ABS_B}", os.path.join(base, "B.idx", "segments", "000001.h5"))
                  .replace("{ABS_CANARY}", os.path.join(base, "canary", "000001.h5")))
        edit_catalog(a, "UPDATE segments SET file = ? WHERE id = 1", (actual,))
        before = file_hashes(base)
        fresh = True
        for op in ops:
            outcome, detail = _malicious_operation(a, base, op)
            changed = files_changed(before, base)
            if changed:
                outcome, fresh = "files touched", False
                detail = f"{changed}"
                before = file_hashes(base)
            if outcome == "CorruptIndexError":
                outcome = "CorruptIndexError, nothing touched"
            row.add(outcome, f"name {name!r}, {op}: {detail}")
    run.finish([row], started)
