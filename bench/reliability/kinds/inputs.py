"""Trials of input paths that are pipes, and of the key and NUL rules.

``kind_pipes(run)``: each command's input paths given as a FIFO must give
what the same command gives with the regular file, and an ``add`` waiting
on a FIFO nobody writes must not keep other writers out.
``kind_input_rules(run)``: keys that are neither strings nor integers, and
NUL characters in texts, keys and labels, must be one clear error that
leaves the index as it was; integer keys are stored as their decimal text.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

from ..harness import cli_error_lines
from ..indexes import file_hashes

WORDS = ["river", "water", "boat", "fish", "stone", "bridge", "music", "song", "drum", "piano",
         "voice", "choir", "code", "file", "line", "read", "write", "parse"]


def _write_inputs(folder, seed):
    """A corpus (JSONL), word vectors (word2vec text), stop words, keys and
    a diagram (.npy) in ``folder``; returns their paths by name."""
    rng = np.random.default_rng(seed)
    paths = {name: os.path.join(folder, name) for name in
             ("docs.jsonl", "more.jsonl", "vectors.vec", "stop.txt", "keys.txt", "queries.txt")}
    with open(paths["docs.jsonl"], "w", encoding="utf-8") as handle:
        for i in range(40):
            words = rng.choice(WORDS, size=int(rng.integers(3, 9)))
            handle.write(json.dumps({"key": f"d{i}", "text": " ".join(words),
                                     "label": "even" if i % 2 == 0 else "odd"}) + "\n")
    with open(paths["more.jsonl"], "w", encoding="utf-8") as handle:
        for i in range(1500):  # past the 64 KiB a sniffer might read ahead
            words = rng.choice(WORDS, size=int(rng.integers(3, 9)))
            handle.write(json.dumps({"key": f"m{i}", "text": " ".join(words)}) + "\n")
    vectors = rng.normal(size=(len(WORDS), 6))
    with open(paths["vectors.vec"], "w", encoding="utf-8") as handle:
        handle.write(f"{len(WORDS)} 6\n")
        for word, row in zip(WORDS, vectors):
            handle.write(word + " " + " ".join(f"{v:.6f}" for v in row) + "\n")
    with open(paths["stop.txt"], "w", encoding="utf-8") as handle:
        handle.write("water\nsong\n")
    with open(paths["keys.txt"], "w", encoding="utf-8") as handle:
        handle.write("d1\nd2\nd3\n")
    with open(paths["queries.txt"], "w", encoding="utf-8") as handle:
        handle.write("river boat fish\npiano voice\nparse file line\n")
    paths["diagram.npy"] = os.path.join(folder, "diagram.npy")
    np.save(paths["diagram.npy"], np.array([[0.0, 1.0], [0.2, 0.9], [0.1, 0.5], [0.3, 0.4]]))
    return paths


def _fifo_feeding(path, data):
    """Make a FIFO at ``path`` and a thread that writes ``data`` into it once
    a reader opens it (it gives up after 60 s)."""
    os.mkfifo(path)

    def feed():
        fd = None
        deadline = time.monotonic() + 60
        while fd is None and time.monotonic() < deadline:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.02)  # no reader yet
        if fd is None:
            return
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as handle:
            try:
                handle.write(data)
            except BrokenPipeError:
                pass

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


def _comparable(stdout):
    """A command's JSON output without the timings."""
    try:
        value = json.loads(stdout)
    except ValueError:
        return stdout
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in ("seconds", "index")}
    return value


# What each case runs: (name, argv with {IN} for the input, the input's
# file name, whether the command writes an index).
PIPE_CASES = [
    ("add FILE", ["add", "{INDEX}", "{IN}", "--json", "--silent"], "more.jsonl", True),
    ("search --file", ["search", "{INDEX}", "--file", "{IN}", "-k", "3", "--json"],
     "queries.txt", False),
    ("search --vectors", ["search", "{INDEX}", "--text", "river boat", "--vectors", "{IN}",
                          "-k", "3", "--json"], "vectors.vec", False),
    ("build --vectors", ["build", "{NEW}", "--corpus", "{DOCS}", "--vectors", "{IN}", "--nodes",
                         "8", "--roots", "2", "--json", "--silent"], "vectors.vec", True),
    ("build --stopwords", ["build", "{NEW}", "--corpus", "{DOCS}", "--vectors", "{VEC}",
                           "--stopwords", "{IN}", "--nodes", "8", "--roots", "2", "--json",
                           "--silent"], "stop.txt", True),
    ("gram --keys-file", ["gram", "{INDEX}", "{OUT}", "--keys-file", "{IN}", "--json"],
     "keys.txt", False),
    ("build --from-export", ["build", "{NEW}", "--from-export", "{IN}", "--graph-from",
                             "{INDEX}", "--json", "--silent"], "export.jsonl", True),
    ("build --points --diagrams (.npy)", ["build", "{NEW}", "--points", "{IN}", "--diagrams",
                                          "--json", "--silent"], "diagram.npy", True),
]


def _build_text_index(run, path, inputs):
    status, _, err, _ = run.cli(["build", path, "--corpus", inputs["docs.jsonl"], "--vectors",
                                 inputs["vectors.vec"], "--nodes", "8", "--roots", "2",
                                 "--silent"])
    if status != 0:
        raise RuntimeError(f"could not build the text index: {err[-400:]}")


def _run_case(run, folder, template, inputs, case, through_pipe, seq):
    name, argv, source, writes = case
    work = os.path.join(folder, f"{seq}-{'pipe' if through_pipe else 'file'}")
    os.makedirs(work)
    index = os.path.join(work, "index")
    shutil.copytree(template, index)
    given = inputs[source]
    if through_pipe:
        # Named as the file (a diagram's key is its file's stem).
        given = os.path.join(work, source)
        with open(inputs[source], "rb") as handle:
            _fifo_feeding(given, handle.read())
    out_file = os.path.join(work, "gram.npy")
    args = [a.replace("{INDEX}", index).replace("{IN}", given).replace(
        "{NEW}", os.path.join(work, "new")).replace("{DOCS}", inputs["docs.jsonl"]).replace(
        "{VEC}", inputs["vectors.vec"]).replace("{OUT}", out_file) for a in argv]
    status, out, err, seconds = run.cli(args, timeout=120)
    # Paths differ between the two runs; nothing else may.
    out = out.replace(given, "$IN").replace(work, "$RUN")
    result = {"status": status, "out": _comparable(out),
              "error": err.strip().splitlines()[-1:] if status else []}
    if os.path.exists(out_file):
        result["gram"] = np.load(out_file).round(12).tolist()
    if writes and status == 0:
        target = index if "{INDEX}" in argv else os.path.join(work, "new")
        from sobolev_index import SobolevIndex

        with SobolevIndex.open(target) as opened:
            result["documents"] = sorted(opened.ids_and_keys()[1])
    return result


def _lock_trial(run, folder, template, seq):
    """An add waiting on a FIFO nobody writes, and another writer: the
    writer must get the lock. Returns (outcome, detail)."""
    from sobolev_index import IndexLockedError, SobolevIndex

    work = os.path.join(folder, f"{seq}-lock")
    os.makedirs(work)
    index = os.path.join(work, "index")
    shutil.copytree(template, index)
    fifo = os.path.join(work, "never-written")
    os.mkfifo(fifo)
    child = subprocess.Popen([sys.executable, "-m", "sobolev_index", "add", index, fifo],
                             env=run.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(2.0)
        if child.poll() is not None:
            return "add ended at once", child.stderr.read().decode()[-300:]
        try:
            with SobolevIndex.open(index, "a", timeout=5) as writer:
                writer.delete(["d0"])
        except IndexLockedError as exc:
            return "lock held while waiting on the pipe", str(exc)[:200]
        return "other writers not kept out", "a second writer took the lock and deleted"
    finally:
        child.kill()
        child.wait()


def kind_pipes(run):
    """Input paths given as FIFOs: the same result as the regular file."""
    started = time.monotonic()
    same = run.row("pipe-input", "pipes", "An input path that is a pipe or FIFO",
                   "each command's input path given as a named pipe that a thread fills: "
                   + "; ".join(case[0] for case in PIPE_CASES)
                   + "; the result compared with the same command on the regular file",
                   "the same exit status, output and index content as with the regular file "
                   "(input read once, whole)", ["same as the file"])
    lock = run.row("pipe-lock", "pipes", "add waiting on a FIFO nobody writes",
                   "`add INDEX FIFO` with no writer on the FIFO; 2 s later another process "
                   "opens INDEX for writing (waiting up to 5 s) and deletes a document",
                   "the other writer gets the lock: add reads its input before it takes "
                   "the write lock", ["other writers not kept out"])
    if not hasattr(os, "mkfifo"):
        same.skipped = lock.skipped = "no named pipes on this platform"
        run.finish([same, lock], started)
        return
    folder = run.dir("pipes")
    inputs = _write_inputs(folder, run.seed)
    template = os.path.join(folder, "template")
    _build_text_index(run, template, inputs)
    inputs["export.jsonl"] = os.path.join(folder, "export.jsonl")
    status, _, err, _ = run.cli(["export", template, inputs["export.jsonl"], "--silent"])
    if status != 0:
        raise RuntimeError(f"could not export the text index: {err[-400:]}")
    cases = run.subset(PIPE_CASES, 3)
    rounds = max(1, min(3, run.trials // 10))
    seq = 0
    for _ in range(rounds):
        for case in cases:
            seq += 1
            plain = _run_case(run, folder, template, inputs, case, False, seq)
            piped = _run_case(run, folder, template, inputs, case, True, seq)
            if plain["status"] != 0:
                same.add("the regular file failed", f"{case[0]}: {plain['error']}")
            elif piped == plain:
                same.add("same as the file", case[0])
            else:
                same.add("differs from the file",
                         f"{case[0]}: pipe {str(piped)[:200]} / file {str(plain)[:200]}")
    for _ in range(rounds):
        seq += 1
        outcome, detail = _lock_trial(run, folder, template, seq)
        lock.add(outcome, detail)
    run.finish([same, lock], started)


# Records whose key or text breaks the rules, with what the error must name.
BAD_RECORDS = [
    ('{"key": 1.5, "text": "river boat"}', "the key ('key') is 1.5"),
    ('{"key": NaN, "text": "river boat"}', "the key ('key') is NaN"),
    ('{"key": 1e3, "text": "river boat"}', "the key ('key') is 1000.0"),
    ('{"key": true, "text": "river boat"}', "the key ('key') is true"),
    ('{"key": "a\\u0000b", "text": "river boat"}', "holds a NUL character"),
    ('{"key": "k", "text": "river\\u0000boat"}', "'text' holds a NUL character"),
    ('{"key": "k", "text": "river boat", "label": "x\\u0000"}', "'label'"),
]
BAD_POINTS = [
    ('{"key": 2.5, "points": [[0, 1], [1, 0]]}', "the key ('key') is 2.5"),
    ('{"key": "p\\u0000", "points": [[0, 1], [1, 0]]}', "holds a NUL character"),
]


def kind_input_rules(run):
    """Keys that are neither strings nor integers, and NUL characters."""
    from sobolev_index import SobolevIndex

    started = time.monotonic()
    bad = run.row("input-rules-refused", "input-rules",
                  "A key that is not a string or an integer, or a NUL character",
                  "`add INDEX FILE` (text index) of one JSONL record: "
                  + "; ".join(record for record, _ in BAD_RECORDS)
                  + "; and `build --points` of a point cloud: "
                  + "; ".join(record for record, _ in BAD_POINTS),
                  "exit 1, one 'Error:' line naming the file, the line and the value; the "
                  "index byte for byte as it was (nothing written for the build)",
                  ["one clear error, nothing written"])
    integer = run.row("input-rules-integer-key", "input-rules", "An integer key",
                      "`add` of records keyed 42, -7 and a 30-digit integer; `build --points` "
                      "of a cloud keyed 12",
                      "stored under its decimal text ('42', '-7', the 30 digits, '12')",
                      ["stored as its decimal text"])
    folder = run.dir("input-rules")
    inputs = _write_inputs(folder, run.seed)
    template = os.path.join(folder, "template")
    _build_text_index(run, template, inputs)
    for i, (record, named) in enumerate(run.subset(BAD_RECORDS, 3)):
        index = os.path.join(folder, f"bad-{i}")
        shutil.copytree(template, index)
        before = file_hashes(index)
        path = os.path.join(folder, f"bad-{i}.jsonl")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(record + "\n")
        status, out, err, _ = run.cli(["add", index, path, "--silent"])
        lines = cli_error_lines(err)
        if status == 1 and len(lines) == 1 and named in lines[0] and "line 1" in lines[0] \
                and file_hashes(index) == before and "Traceback" not in err:
            bad.add("one clear error, nothing written", record)
        elif status == 0:
            bad.add("accepted", f"{record}: {out[-200:]}")
        else:
            bad.add("not one clear error, or the index changed", f"{record}: {err[-300:]}")
    for i, (record, named) in enumerate(BAD_POINTS):
        path = os.path.join(folder, f"bad-points-{i}.jsonl")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(record + "\n")
        new = os.path.join(folder, f"bad-points-{i}")
        status, out, err, _ = run.cli(["build", new, "--points", path, "--silent"])
        lines = cli_error_lines(err)
        if status == 1 and len(lines) == 1 and named in lines[0] and not os.path.exists(new):
            bad.add("one clear error, nothing written", record)
        else:
            bad.add("accepted" if status == 0 else "not one clear error, or something written",
                    f"{record}: {err[-300:]}")
    big = "123456789012345678901234567890"
    index = os.path.join(folder, "integers")
    shutil.copytree(template, index)
    path = os.path.join(folder, "integers.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        for key in ("42", "-7", big):
            handle.write(f'{{"key": {key}, "text": "river boat fish"}}\n')
    status, _, err, _ = run.cli(["add", index, path, "--silent"])
    with SobolevIndex.open(index) as opened:
        for key in ("42", "-7", big):
            if status == 0 and key in opened:
                integer.add("stored as its decimal text", key)
            else:
                integer.add("not stored as its decimal text", f"{key}: {err[-200:]}")
    path = os.path.join(folder, "clouds.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        rng = random.Random(run.seed)
        for key in ("12", '"c1"', '"c2"'):
            points = [[rng.random(), rng.random()] for _ in range(4)]
            handle.write(f'{{"key": {key}, "points": {json.dumps(points)}}}\n')
    new = os.path.join(folder, "clouds")
    status, _, err, _ = run.cli(["build", new, "--points", path, "--silent"])
    if status == 0:
        with SobolevIndex.open(new) as opened:
            stored = "12" in opened
    integer.add("stored as its decimal text" if status == 0 and stored
                else "not stored as its decimal text", err[-200:])
    run.finish([bad, integer], started)
