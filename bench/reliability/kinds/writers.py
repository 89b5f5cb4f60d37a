"""Writers in trouble: killed (SIGKILL) during add, compact or between calls,
merging while readers read, kept out by another writer's lock, and their
catalog log lost after commits.

The writer children are the test-suite's scripts (``crash_writer.py``,
``concurrent_writer.py``, ``concurrent_reader.py``, ``hold_writer.py``);
the one for a lost log is this bench's role "wal-writer".
"""
import json
import os
import statistics
import time
import warnings
from collections import Counter

import numpy as np
from _support.index import BATCH_MAX_ENV, batch_keys, batch_measures, batch_size
from _support.processes import child_script, say

from ..faults import copy_without_wal, lose_wal
from ..harness import cli_error_lines, describe, role_argv, run_cli, where_raised
from ..indexes import (
    all_hashes,
    committed_files,
    copy_index,
    differences,
    make_graph,
    random_measure,
    segment_files,
    sha256_of,
    snapshot,
)

# A compact_every of concurrent_writer.py that is never reached.
NEVER = 10**9


# ============================================================== SIGKILL
def kind_sigkill(run):
    """SIGKILL of a writer child during add(), during compact() and between calls."""
    from sobolev_index import SobolevIndex

    expected = ("every acknowledged batch present with bit-identical features and measures; "
                "no partial or unknown batch; opens without repair; verify ok after "
                "verify(repair=True)")
    how = ("a child adds deterministic batches (1-24 documents) and compacts every 3rd batch; "
           "SIGKILL {when}; then the parent checks the index")
    rows = {
        "add": run.row("sigkill-add", "sigkill", "Writer killed (SIGKILL) during add()",
                       how.format(when="a random time (0 to the observed add time) after an add "
                                       "begins"), expected, ["intact"]),
        "compact": run.row("sigkill-compact", "sigkill", "Writer killed (SIGKILL) during compact()",
                           how.format(when="a random time (0 to the observed compact time) after a "
                                           "compact begins"), expected, ["intact"]),
        "between": run.row("sigkill-between", "sigkill",
                           "Writer killed (SIGKILL) between calls",
                           how.format(when="at a random time (0-0.4 s); the kill landed outside "
                                           "add and compact"), expected, ["intact"]),
    }
    started = time.monotonic()
    want_add = max(2, 3 * run.trials)
    want_compact = max(1, 2 * run.trials)
    budget = 25 if run.quick else 240
    max_size, every = 24, 3
    path = os.path.join(run.dir("sigkill"), "ix")
    graph = make_graph(80, run.seed)
    SobolevIndex.create(path, graph, roots=2, seed=run.seed).close()
    query = random_measure(np.random.default_rng(99), 80)
    acked, started_batches = set(), set()
    durations = {"add": [], "compact": []}
    next_batch, kills = 0, 0
    stats = Counter()
    while ((rows["add"].trials < want_add or rows["compact"].trials < want_compact)
           and time.monotonic() - started < budget):
        child = run.child([child_script("crash_writer.py"), path, next_batch, every, max_size])
        ready = child.wait_for("READY", 60)
        if ready is None:
            rows["between"].add("writer did not start", child.kill()[-500:])
            break
        want = ("compact" if rows["compact"].trials < want_compact
                and (kills % 2 or rows["add"].trials >= want_add) else "add")
        if kills % 6 == 5:
            time.sleep(run.rng.uniform(0, 0.4))
        elif want == "add":
            child.wait_for("START ", 30, after=ready + 1 + run.rng.randrange(3))
            typical = statistics.median(durations["add"]) if durations["add"] else 0.01
            time.sleep(run.rng.uniform(0, typical))
        else:
            child.wait_for("COMPACT ", 30, after=ready)
            typical = statistics.median(durations["compact"]) if durations["compact"] else 0.03
            time.sleep(run.rng.uniform(0, typical))
        err = child.kill()
        kills += 1
        lines = child.lines
        for (t0, a), (t1, b) in zip(lines, lines[1:]):
            if a.startswith("START ") and b.startswith("ACK "):
                durations["add"].append(t1 - t0)
            elif a.startswith("COMPACT ") and b.startswith("COMPACTED "):
                durations["compact"].append(t1 - t0)
        texts = child.text()
        last = texts[-1] if texts else ""
        landed = ("add" if last.startswith("START ") else
                  "compact" if last.startswith("COMPACT ") else "between")
        for line in texts:
            word, _, number = line.partition(" ")
            if word == "START":
                started_batches.add(int(number))
            elif word == "ACK":
                acked.add(int(number))
        if "Traceback" in err:
            rows[landed].add("writer failed before the kill", err[-500:])
            next_batch = max(started_batches, default=-1) + 1
            continue
        outcome, detail, counts = _check_after_kill(path, acked, started_batches, max_size, query)
        stats.update(counts)
        rows[landed].add(outcome, f"kill {kills} (last line {last!r}): {detail}")
        next_batch = max(started_batches, default=-1) + 1
        if kills % 10 == 0:
            run.log(f"    sigkill: {kills} kills, {len(acked)} batches acknowledged")
    rows["add"].notes.append(
        f"{kills} kills in all ({', '.join(f'{r.trials} {k}' for k, r in rows.items())}); "
        f"{stats['acked_docs']:,} acknowledged documents checked after them, "
        f"{stats['lost_docs']} lost; {stats['repaired']} kills left files that verify reported "
        "before the repair")
    if rows["compact"].trials == 0:
        rows["compact"].add("no kill landed in compact()", "the trial lost its point")
    if rows["add"].trials == 0:
        rows["add"].add("no kill landed in add()", "the trial lost its point")
    if rows["between"].trials == 0:
        rows["between"].skipped = "no random-time kill happened to land between calls in this run"
    run.finish(rows.values(), started)


def _check_after_kill(path, acked, started, max_size, query):
    """The index after a kill: (outcome, detail, counts)."""
    from sobolev_index import SobolevIndex

    counts = Counter()
    try:
        reader = SobolevIndex.open(path, "r")  # no repair before this open
    except Exception as exc:
        return "open failed", describe(exc), counts
    with reader:
        keys = list(reader)
        batches = {}
        for key in keys:
            if not (key.startswith("b") and len(key) == 11):
                return "unknown document visible", key, counts
            batches.setdefault(int(key[1:7]), set()).add(key)
        top = max(started, default=-1)
        for b, present in batches.items():
            if b > top:
                return "unknown batch visible", f"batch {b}", counts
            if present != set(batch_keys(b, max_size)):
                return "partial batch visible", f"batch {b}: {len(present)} documents", counts
        lost = sorted(b for b in acked if b not in batches)
        counts["acked_docs"] += sum(batch_size(b, max_size) for b in acked)
        counts["lost_docs"] += sum(batch_size(b, max_size) for b in lost)
        if lost:
            return "acknowledged batch lost", f"batches {lost[:10]}", counts
        n_nodes = reader.graph.n_nodes
        all_keys, all_measures = [], []
        for b in sorted(batches):
            all_keys += batch_keys(b, max_size)
            all_measures += batch_measures(b, n_nodes, max_size)
        if all_keys:
            for r, tree in enumerate(reader.trees):
                stored, fresh = reader.features(all_keys, root=r), tree.features_of(all_measures)
                if not (np.array_equal(stored.indptr, fresh.indptr)
                        and np.array_equal(stored.indices, fresh.indices)
                        and np.array_equal(stored.data, fresh.data)):
                    return "stored features differ", f"root {r}", counts
            for i in range(0, len(all_keys), max(1, len(all_keys) // 20)):
                doc = reader.get(all_keys[i])
                nodes, masses = all_measures[i]
                if not (np.array_equal(doc["nodes"], nodes)
                        and np.allclose(doc["masses"], masses / masses.sum(), rtol=1e-12, atol=0)):
                    return "stored measure differs", all_keys[i], counts
            reader.search([query], k=min(5, len(all_keys)), p=1)
        report = reader.verify()
    if not report["ok"]:
        counts["repaired"] += 1
    try:
        with SobolevIndex.open(path, "a") as writer:
            writer.verify(repair=True)
            after = writer.verify()
            if not after["ok"]:
                return "verify not ok after repair", "; ".join(after["problems"])[:300], counts
            if set(writer) != set(keys):
                return "repair changed the documents", "", counts
    except Exception as exc:
        return "writer failed after the kill", describe(exc), counts
    return "intact", "", counts


# ============================================================== readers during merges
def kind_concurrency(run):
    """Readers opening and searching while a writer adds one document at a time and merges."""
    from sobolev_index import SobolevIndex

    row = run.row("readers-during-merges", "concurrency", "Readers during merges",
                  "one writer child adds one document per add() for {seconds} s (a tier merge every "
                  "few adds, deleting merged files) while 2 reader children loop: open or refresh, "
                  "list keys, search k > N, search by key, compare features bit for bit, and every "
                  "5th time verify()", "0 errors: no CorruptIndexError (a false 'corrupt'), no "
                  "other exception, only committed states seen, verify ok",
                  ["consistent"])
    started = time.monotonic()
    seconds = 4.0 if run.quick else 40.0
    row.injection = row.injection.format(seconds=f"{seconds:g}")
    path = os.path.join(run.dir("concurrency"), "ix")
    graph = make_graph(120, run.seed)
    # Batches of one document, for the children too: the writer's adds are
    # single documents, and every batch the readers see is all or nothing.
    single = {BATCH_MAX_ENV: 1}
    initial = 36
    with SobolevIndex.create(path, graph, roots=2, seed=run.seed) as index:
        index.add([batch_measures(b, 120, 1)[0] for b in range(initial)],
                  keys=[batch_keys(b, 1)[0] for b in range(initial)])
    writer = run.child([child_script("concurrent_writer.py"), path, initial, seconds + 1, NEVER],
                       **single)
    if writer.wait_for("READY", 60) is None:
        row.add("writer did not start", writer.kill()[-400:])
        run.finish([row], started)
        return
    readers = []
    for seed in (1, 2):
        out = os.path.join(run.dir("concurrency"), f"reader{seed}.json")
        readers.append((run.child([child_script("concurrent_reader.py"), path, seconds, out, seed, 5],
                                  **single), out))
    status = writer.finish(timeout=seconds + 120)
    committed, running, merges, last_segments = {initial}, initial, 0, None
    for line in writer.text():
        parts = line.split()
        if parts and parts[0] == "ACK":
            running = int(parts[2])
            committed.add(running)
            segments = int(parts[3])
            if last_segments is not None and segments < last_segments:
                merges += 1
            last_segments = segments
    if status != 0:
        row.add("writer failed", writer.stderr()[-500:])
    for reader, out in readers:
        if reader.finish(timeout=seconds + 120) != 0 or not os.path.exists(out):
            row.add("reader process failed", reader.stderr()[-500:])
            continue
        with open(out) as handle:
            data = json.load(handle)
        row.outcomes.update(data["outcomes"])
        row.examples += data["errors"][:3]
        for count in sorted(set(data["counts"]) - committed):
            row.add("saw a state that was never committed", f"{count} documents")
    row.notes.append(f"{running - initial} adds committed, {merges} merges during the run")
    if merges == 0:
        row.add("no merge happened (the trial lost its point)", "")
    with SobolevIndex.open(path) as index:
        report = index.verify()
        if not report["ok"] or len(index) != running:
            row.add("index not ok afterwards", f"{report['problems']}, {len(index)} vs {running}")
    run.finish([row], started)


# ============================================================== a second writer
def kind_second_writer(run):
    """A second writer while one holds the lock (another process, the same process, the CLI)."""
    from sobolev_index import IndexLockedError, SobolevIndex

    row = run.row("second-writer", "second-writer", "A second writer",
                  "while a child process holds the writer lock: open('a') at once, open('a', "
                  "timeout=0.5), a reader, `delete --wait 0.5` and `verify --repair` on the CLI; "
                  "and a second writer in the same process",
                  "IndexLockedError (CLI: one 'Error:' line) at once or after the timeout; readers "
                  "unaffected; index byte-identical",
                  ["IndexLockedError, unchanged", "reader unaffected"])
    started = time.monotonic()
    path = copy_index(run.template("small"), os.path.join(run.dir("second-writer"), "ix"))
    for _ in range(max(1, run.trials // 5)):
        # Holds the lock until its stdin closes.
        holder = run.child([child_script("hold_writer.py"), path, -1])
        if holder.wait_for("READY", 60) is None:
            row.add("holder did not start", holder.kill()[-400:])
            continue
        try:
            before = snapshot(path)

            def check(name, fn, min_wait=0.0, max_wait=2.0, before=before):
                t0 = time.monotonic()
                try:
                    fn()
                except IndexLockedError as exc:
                    waited = time.monotonic() - t0
                    if not (min_wait <= waited <= max_wait):
                        return row.add("wrong wait", f"{name}: {waited:.2f} s")
                    changed = differences(before, snapshot(path))
                    if changed:
                        return row.add("index changed", f"{name}: {changed}")
                    return row.add("IndexLockedError, unchanged", str(exc)[:100])
                except Exception as exc:
                    return row.add(f"wrong error: {type(exc).__name__}", f"{name}: {describe(exc)}")
                row.add("opened a second writer", name)

            check("open('a')", lambda: SobolevIndex.open(path, "a").close())
            check("open('a', timeout=0.5)", lambda: SobolevIndex.open(path, "a", timeout=0.5).close(),
                  0.45, 5.0)
            try:
                with SobolevIndex.open(path) as reader:
                    reader.search([(np.array([1, 2]), None)], k=3)
                row.add("reader unaffected")
            except Exception as exc:
                row.add(f"reader failed: {type(exc).__name__}", describe(exc))
            for argv in (["delete", path, "a0", "--wait", "0.5"], ["verify", path, "--repair"]):
                status, out, err, _ = run_cli(argv, cwd=run.workdir)
                lines = cli_error_lines(err)
                if status == 1 and len(lines) == 1 and "writing" in lines[0] and "Traceback" not in err:
                    changed = differences(before, snapshot(path))
                    row.add("IndexLockedError, unchanged" if not changed else "index changed",
                            f"{argv[0]}: {changed or lines[0][:100]}")
                else:
                    row.add("CLI: not one clear error", f"{argv[0]}: status {status}; {err[-300:]}")
        finally:
            holder.finish()
    with SobolevIndex.open(path, "a") as writer:
        before = snapshot(path)
        try:
            SobolevIndex.open(path, "a").close()
            row.add("opened a second writer", "same process")
        except IndexLockedError:
            changed = differences(before, snapshot(path))
            row.add("IndexLockedError, unchanged" if not changed else "index changed", "same process")
        writer.add([(np.array([1, 2]), None)], keys=["still-writable"])
    run.finish([row], started)


# ============================================================== a lost catalog log
def role_wal_writer(path, k):
    """Commit ``k`` batches, say DONE, and wait to be killed (the log is not
    checkpointed while this writer lives)."""
    from sobolev_index import SobolevIndex

    index = SobolevIndex.open(path, "a")
    n = index.graph.n_nodes
    for b in range(int(k)):
        index.add(batch_measures(2000 + b, n, 6), keys=batch_keys(2000 + b, 6))
    say("DONE")
    time.sleep(600)


def kind_lost_wal(run):
    """The catalog's SQLite log lost after commits (copied without it, or deleted)."""
    from sobolev_index import SobolevIndex

    expected = ("the segment files the lost commits wrote are never deleted; verify() is not ok, "
                "with a problem line and an 'unlisted' entry (file, documents) for each; "
                "verify(repair=True) moves them to INDEX/lost+found/ and lists them under "
                "'moved'; then verify ok; opening warns of them (UnlistedSegmentsWarning); "
                "recover() brings back every acknowledged document of the lost commits (key, "
                "measure) and verify stays ok")
    ok = ["kept, reported, moved to lost+found, recovered"]
    rows = {
        "copy": run.row("lost-wal-copy", "lost-wal", "Lost catalog log (copy without -wal)",
                        "a writer commits 1-5 batches (kept in catalog.sqlite-wal, not yet "
                        "checkpointed); the index directory is copied without the -wal and -shm; "
                        "checks on the copy", expected, ok),
        "kill": run.row("lost-wal-kill", "lost-wal", "Lost catalog log (writer killed, -wal deleted)",
                        "a writer child commits 1-5 batches and is SIGKILLed; catalog.sqlite-wal "
                        "and -shm are deleted", expected, ok),
        "add": run.row("lost-wal-add", "lost-wal", "Lost catalog log, then a writer adds",
                       "as the copy case, but a writer first opens the copy and adds a batch "
                       "(whose segment id the lost commits had used), then the checks",
                       "as above, and the new batch durable: no lost segment overwritten", ok),
    }
    started = time.monotonic()
    template = run.template("small")
    base = run.dir("lost-wal")
    for t in range(run.trials):
        for variant in ("copy", "kill", "add"):
            src = copy_index(template, os.path.join(base, "src"))
            k = 1 + (t + len(variant)) % 5
            if variant == "kill":
                child = run.child(role_argv("wal-writer", src, k))
                if child.wait_for("DONE", 60) is None:
                    rows[variant].add("writer child failed", child.kill()[-400:])
                    continue
                child.kill()
                lose_wal(src)
                dst = src
            else:
                writer = SobolevIndex.open(src, "a")
                try:
                    n = writer.graph.n_nodes
                    for b in range(k):
                        writer.add(batch_measures(1000 + b, n, 6), keys=batch_keys(1000 + b, 6))
                    dst = copy_without_wal(src, os.path.join(base, "dst"))
                finally:
                    writer.close()
            first = 2000 if variant == "kill" else 1000
            lost = {key: measure for b in range(k)
                    for key, measure in zip(batch_keys(first + b, 6),
                                            batch_measures(first + b, 60, 6))}
            outcome, detail = _lost_wal_checks(dst, variant == "add", lost)
            rows[variant].add(outcome, f"{k} batches lost from the log: {detail}")
    run.finish(rows.values(), started)


def _recovered(writer, lost):
    """Failures of ``writer.recover()`` to bring back the documents ``lost``
    ({key: (nodes, masses)}, as they were added)."""
    report = writer.recover()
    failures = []
    missing = sorted(key for key in lost if key not in writer)
    if missing:
        failures.append((1, f"recover() left {len(missing)} acknowledged document(s) out: "
                            f"{missing[:5]} (report: {len(report['restored'])} restored, "
                            f"{report['skipped'][:2]}, {report['unreadable'][:1]})"))
    for key, (nodes, masses) in lost.items():
        if key in writer:
            got = writer.get(key)
            want = np.zeros(writer.graph.n_nodes)
            np.add.at(want, np.asarray(nodes), np.asarray(masses, dtype=float))
            have = np.zeros(writer.graph.n_nodes)
            np.add.at(have, np.asarray(got["nodes"]), np.asarray(got["masses"], dtype=float))
            if not np.allclose(have / have.sum(), want / want.sum(), rtol=1e-12, atol=1e-15):
                failures.append((1, f"document {key!r} came back with another measure"))
                break
    return failures


def _lost_wal_checks(path, add_first, lost):
    """The checks of a lost log on ``path``; (outcome, detail), the most
    severe failure first."""
    import h5py

    from sobolev_index import SobolevIndex

    listed = set(committed_files(path))
    unlisted = {name: sha256_of(os.path.join(path, "segments", name))
                for name in segment_files(path) if name not in listed}
    if not unlisted:
        return "no unlisted segment (the trial lost its point)", "the commits were checkpointed"
    documents = {}
    for name in unlisted:
        with h5py.File(os.path.join(path, "segments", name), "r") as f:
            documents[name] = int(len(f["doc_ids"]))
    failures = []
    live = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reader = SobolevIndex.open(path)
        warned = [w for w in caught if w.category.__name__ == "UnlistedSegmentsWarning"]
        files = "1 segment file" if len(unlisted) == 1 else f"{len(unlisted)} segment files"
        if len(warned) != 1 or f"{files} in segments/" not in str(warned[0].message):
            failures.append((4, f"open did not warn of the unlisted files ({len(warned)} "
                                "warnings)"))
        with reader:
            live = len(reader)
            report = reader.verify()
        if report["ok"]:
            failures.append((4, "not reported (verify ok)"))
        if not all(any(name in p for p in report["problems"]) for name in unlisted):
            failures.append((5, "no problem line per file"))
        entries = {os.path.basename(str(e.get("file"))): e.get("documents")
                   for e in report.get("unlisted", []) if isinstance(e, dict)}
        if entries != documents:
            failures.append((5, f"'unlisted' is {report.get('unlisted')!r}, expected {documents}"))
    except Exception as exc:
        failures.append((2, f"a reader failed: {describe(exc)}"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reader above checked the warning
            writer = SobolevIndex.open(path, "a")
        with writer:
            if add_first:
                n = writer.graph.n_nodes
                keys = writer.add(batch_measures(5000, n, 6), keys=batch_keys(5000, 6))
            present = all_hashes(path)
            gone = [name for name, digest in unlisted.items() if digest not in present]
            if gone:
                failures.append((1, f"lost segment(s) {gone} deleted or overwritten by a writer "
                                    "(acknowledged data lost)"))
            report = writer.verify(repair=True)
            moved = report.get("moved")
            lost_found = os.path.join(path, "lost+found")
            kept = all_hashes(lost_found) if os.path.isdir(lost_found) else set()
            if not gone and not set(unlisted.values()) <= kept:
                failures.append((3, f"repair did not move them to lost+found (moved: {moved!r})"))
            if not moved or len(moved) != len(unlisted):
                failures.append((5, f"'moved' is {moved!r}"))
            after = writer.verify()
            if not after["ok"]:
                failures.append((3, f"verify not ok after repair: {after['problems'][:2]}"))
            expected_live = (live or 0) + (len(keys) if add_first else 0)
            if live is not None and len(writer) != expected_live:
                failures.append((2, f"{len(writer)} live documents, expected {expected_live}"))
            failures += _recovered(writer, lost)
            after = writer.verify()
            if not after["ok"]:
                failures.append((3, f"verify not ok after recover: {after['problems'][:2]}"))
        if add_first:
            with SobolevIndex.open(path) as reader:
                if not all(key in reader for key in keys):
                    failures.append((1, "the new batch is not durable"))
    except Exception as exc:
        failures.append((2, f"a writer failed: {describe(exc)} at {where_raised(exc)}"))
    if not failures:
        return ("kept, reported, moved to lost+found, recovered",
                f"{len(unlisted)} file(s), {len(lost)} document(s)")
    failures.sort()
    labels = {1: "acknowledged data deleted", 2: "error", 3: "not moved to lost+found",
              4: "not reported (verify ok)", 5: "report incomplete"}
    return labels[failures[0][0]], "; ".join(text for _, text in failures)
