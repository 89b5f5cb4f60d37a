"""Word-vector benchmark: 10,000 words out of a ~1 GB word2vec binary file.

Generates (in chunks, so generation stays small) a word2vec binary file of
870,000 words x 300 dims, about 1.06 GB like a third of GoogleNews, cached in
``--workdir``. Each reader runs in its own subprocess, so the peak RSS
reported is that reader's alone, and picks 10,000 words spread over the whole
file (the last ones included) plus 10 absent words, which forces a full pass:

1. ``load_vectors(path, words)``;
2. a naive streaming reader: one ``read(1)`` per byte of each word, then a
   seek past each vector;
3. a naive full load: the whole file read into memory and every vector
   decoded into one matrix, then the wanted rows picked (what loading without
   a word list does);
4. gensim ``KeyedVectors.load_word2vec_format`` (loads everything), if
   gensim is installed.

All readers are timed by ``alternating_medians``: alternating blocks, each
side's block preceded by one untimed run (which also warms the page cache),
medians of the times each subprocess measures around its reader call. One
more run of ours starts with the file's pages dropped from the page cache
(``posix_fadvise(DONTNEED)``, which touches this file only): the cold-cache row.

``--threads N`` (default: all cores) caps BLAS and OpenMP in every reader's
subprocess (``OMP_NUM_THREADS`` and friends, and ``threadpoolctl``); the
readers themselves are single-threaded.

Correctness: every run's words and vectors are checked against the generator
(bit for bit); a wrong one makes the run exit with status 1 after the table.
Prints a table and writes bench/results/bench_embeddings.json. ``--quick``
uses a ~25 MB file. The generated file is deleted at the end unless ``--keep``.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import (  # noqa: E402
    Checks,
    SelfTimed,
    add_threads_option,
    alternating_medians,
    limit_threads,
    print_table,
    threadpools,
    write_json,
)

# Measure this checkout's code, whatever else is installed.
sys.path.insert(0, str(HERE.parent))

PREFIXES = ["w", "word_", "a_longer_phrase_like_token_", "ümlaut_"]
GENERATE_ROWS = 8192
N_ABSENT = 10
# Thread counts a library reads when it loads (set for each reader's subprocess).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def make_words(start, stop):
    """Words of rows start..stop-1: distinct, of varied lengths, some non-ASCII."""
    return [f"{PREFIXES[i % len(PREFIXES)]}{i}" for i in range(start, stop)]


def make_vectors(rows, dim):
    """Vectors of the given rows, a closed form so any row can be checked
    without keeping or regenerating the file's contents."""
    rows = np.asarray(rows, dtype=np.float64)
    phases = np.add.outer(rows * 0.7548776662466927, np.arange(1, dim + 1) * 0.5698402909980532)
    return np.sin(phases).astype(np.float32)


def expected_size(count, dim):
    header = len(f"{count} {dim}\n")
    word_bytes = sum(len(w.encode("utf-8")) for w in make_words(0, count))
    return header + word_bytes + count * (4 * dim + 2)


def generate(path, count, dim):
    """Write the file in chunks of rows (a newline after each vector, as
    word2vec writes), so memory stays at one chunk."""
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as handle:
        handle.write(f"{count} {dim}\n".encode("ascii"))
        for start in range(0, count, GENERATE_ROWS):
            stop = min(count, start + GENERATE_ROWS)
            vectors = make_vectors(np.arange(start, stop), dim)
            handle.write(b"".join(word.encode("utf-8") + b" " + vector.tobytes() + b"\n"
                                  for word, vector in zip(make_words(start, stop), vectors)))
    tmp.rename(path)


def wanted_rows(count, n_words):
    """n_words rows spread evenly over the file, the last 10 included."""
    tail = np.arange(max(0, count - 10), count)
    spread = np.linspace(0, count - 1, max(0, n_words - len(tail))).round().astype(np.int64)
    return np.union1d(spread, tail)


def drop_page_cache(path):
    """Evict this file's pages from the page cache (this file only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ readers
# Each takes (path, wanted set) and returns (words, vectors) of the words found.


def read_ours(path, wanted):
    from sobolev_index.ingest.embeddings import load_vectors

    wv = load_vectors(path, wanted)
    return wv.words, wv.vectors


def read_bytewise(path, wanted):
    """Streaming, but one read(1) call per byte of every word."""
    words, vectors = [], []
    with open(path, "rb") as handle:
        count, dim = map(int, handle.readline().split())
        nbytes = 4 * dim
        for _ in range(count):
            chars = []
            while True:
                c = handle.read(1)
                if c == b" ":
                    break
                if c != b"\n":
                    chars.append(c)
            word = b"".join(chars).decode("utf-8")
            if word in wanted:
                words.append(word)
                vectors.append(np.frombuffer(handle.read(nbytes), "<f4"))
            else:
                handle.seek(nbytes, os.SEEK_CUR)
    return words, np.array(vectors).reshape(len(words), -1)


def read_everything(path, wanted):
    """The whole file into memory, every vector into one matrix, then the
    wanted rows: memory grows with the file."""
    with open(path, "rb") as handle:
        data = handle.read()
    newline = data.index(b"\n")
    count, dim = map(int, data[:newline].split())
    nbytes = 4 * dim
    matrix = np.empty((count, dim), np.float32)
    index = {}
    pos = newline + 1
    for i in range(count):
        space = data.index(b" ", pos)
        index.setdefault(data[pos:space].lstrip().decode("utf-8"), i)
        matrix[i] = np.frombuffer(data, "<f4", dim, space + 1)
        pos = space + 1 + nbytes
    words = [w for w in index if w in wanted]
    return words, matrix[[index[w] for w in words]]


def read_gensim(path, wanted):
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(str(path), binary=True)
    words = [w for w in kv.index_to_key if w in wanted]
    return words, np.asarray(kv[words]) if words else np.empty((0, kv.vector_size), np.float32)


READERS = {"ours": read_ours, "bytewise": read_bytewise, "everything": read_everything,
           "gensim": read_gensim}


def child(reader, path, wanted_path, dim, threads):
    """Runs in the subprocess: time one reader, note its peak RSS, then check
    its vectors (after the RSS reading, so the check is not counted)."""
    if reader == "ours":
        import sobolev_index.ingest.embeddings  # noqa: F401  (imports are not the reader's cost)
    elif reader == "gensim":
        import gensim  # noqa: F401
    rows = np.array([int(x) for x in Path(wanted_path).read_text().split()], dtype=np.int64)
    wanted = {w for r in rows for w in make_words(r, r + 1)}
    wanted.update(f"absent_{i}" for i in range(N_ABSENT))
    with limit_threads(threads) as pools:
        baseline_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        words, vectors = READERS[reader](path, wanted)
        seconds = time.perf_counter() - started
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    expected_words = [w for r in rows for w in make_words(r, r + 1)]
    words_match = words == expected_words
    vectors_match = words_match and np.array_equal(vectors, make_vectors(rows, dim))
    print(json.dumps({"reader": reader, "seconds": seconds, "found": len(words),
                      "words_match": words_match, "vectors_match": bool(vectors_match),
                      "correct": bool(vectors_match), "baseline_rss_mb": baseline_kb / 1024,
                      "peak_rss_mb": peak_kb / 1024, "threadpools": pools}))


def run_child(reader, path, wanted_path, dim, threads, cold=False):
    """One reader run in a fresh subprocess; its own report, as a dict."""
    if cold:
        drop_page_cache(path)
    # Libraries the child loads after its thread cap is set read these instead.
    env = dict(os.environ, **{name: str(threads) for name in THREAD_VARIABLES})
    out = subprocess.run(
        [sys.executable, __file__, "--child", reader, "--file", str(path),
         "--wanted-file", str(wanted_path), "--dim", str(dim), "--threads", str(threads)],
        check=True, capture_output=True, text=True, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["cold_cache"] = cold
    return result


def available(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def summarise(reader, seconds, runs, cold):
    """One table row: the median of the timed runs' seconds; found, correctness
    and peak RSS over every run of the reader (its warm-up runs included)."""
    return {"reader": reader, "cold_cache": cold, "timed_runs": len(seconds), "runs": len(runs),
            "seconds": statistics.median(seconds), "seconds_all": list(seconds),
            "found": runs[0]["found"], "correct": all(r["correct"] for r in runs),
            "baseline_rss_mb": min(r["baseline_rss_mb"] for r in runs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~25 MB file, for a smoke run")
    parser.add_argument("--workdir", default=None,
                        help="where the generated file is cached (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated file")
    parser.add_argument("--words", type=int, default=10_000, help="words to pick (default 10,000)")
    parser.add_argument("--count", type=int, default=None, help="words in the file")
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--blocks", type=int, default=3,
                        help="alternating blocks; each reader runs once per block after a warm-up run")
    parser.add_argument("--skip-naive", action="store_true",
                        help="skip the byte-by-byte and read-everything readers")
    add_threads_option(parser)
    parser.add_argument("--json", default=None,
                        help="output path (default bench/results/bench_embeddings.json)")
    parser.add_argument("--child", choices=sorted(READERS), help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--wanted-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    threads = args.threads

    if args.child:
        child(args.child, Path(args.file), args.wanted_file, args.dim, threads)
        return

    count = args.count or (20_000 if args.quick else 870_000)
    dim = args.dim
    made_workdir = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="bench-embeddings-") if made_workdir else args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"w2v-{count}x{dim}.bin"
    size = expected_size(count, dim)
    generate_seconds = None
    if path.is_file() and path.stat().st_size == size:
        print(f"using the cached {path} ({size / 1e9:.2f} GB)")
    else:
        print(f"generating {path}: {count:,} words x {dim} dims ({size / 1e9:.2f} GB) ...")
        started = time.perf_counter()
        generate(path, count, dim)
        generate_seconds = time.perf_counter() - started
        assert path.stat().st_size == size
    rows = wanted_rows(count, min(args.words, count))
    wanted_path = workdir / "wanted-rows.txt"
    wanted_path.write_text("\n".join(map(str, rows)))

    readers = ["ours"]
    if not args.skip_naive:
        readers += ["bytewise", "everything"]
    if available("gensim"):
        readers.append("gensim")
    else:
        print("gensim is not installed: skipping it")
    checks = Checks()
    every_run = []

    def runner(reader, cold=False):
        def run(i=None):
            result = run_child(reader, path, wanted_path, dim, threads, cold=cold)
            every_run.append(result)
            return SelfTimed(result["seconds"], result)
        return run

    try:
        print(f"reading {len(rows):,} words (+{N_ABSENT} absent) with {', '.join(readers)}, "
              f"each run in its own subprocess, {args.blocks} alternating blocks ...")
        timing = alternating_medians({r: runner(r) for r in readers}, args.blocks, 1)
        results = [summarise(r, timing[r].times, [run for run in every_run if run["reader"] == r], False)
                   for r in readers]
        cold = runner("ours", cold=True)().value
        results.insert(1, summarise("ours", [cold["seconds"]], [cold], True))
    finally:
        wanted_path.unlink(missing_ok=True)
        if not args.keep:
            path.unlink(missing_ok=True)
            if made_workdir:
                shutil.rmtree(workdir, ignore_errors=True)
    for run in every_run:
        detail = (f"found {run['found']} words, expected {len(rows)} in file order"
                  if not run["words_match"] else "the words match, the vectors differ")
        checks.require(f"{run['reader']}{' (cold cache)' if run['cold_cache'] else ''}: "
                       "words and vectors equal the generator's, bit for bit", run["correct"], detail)

    ours = results[0]
    labels = {"ours": "load_vectors(path, words)", "bytewise": "naive stream: read(1) per byte",
              "everything": "naive: read all, decode all, pick",
              "gensim": "gensim load_word2vec_format, pick"}
    table = []
    for r in results:
        r["mb_per_s"] = size / 1e6 / r["seconds"]
        r["rss_over_baseline_mb"] = r["peak_rss_mb"] - r["baseline_rss_mb"]
        r["seconds_vs_ours"] = r["seconds"] / ours["seconds"]
        table.append([labels[r["reader"]] + (" (cold cache, 1 run)" if r["cold_cache"] else ""),
                      f"{r['seconds']:.2f} s", f"{r['mb_per_s']:,.0f}",
                      f"{r['peak_rss_mb']:,.0f}", f"{r['rss_over_baseline_mb']:,.0f}",
                      f"{r['seconds_vs_ours']:.1f}x", f"{r['found']:,}",
                      "yes" if r["correct"] else "NO"])
    print_table(
        f"{len(rows):,} words out of a {size / 1e9:.2f} GB word2vec binary file ({count:,} x "
        f"{dim}); one subprocess per run; medians of {args.blocks} alternating blocks; "
        "peak RSS (max over runs) includes the interpreter and imports",
        ["reader", "time", "MB/s", "peak RSS MB", "over baseline MB", "time vs ours", "found",
         "correct"], table, threads)
    target = 200
    print(f"\nload_vectors peak RSS {ours['peak_rss_mb']:.0f} MB (target < {target} MB): "
          f"{'met' if ours['peak_rss_mb'] < target else 'NOT met'}")
    write_json("bench_embeddings", {
        "file": {"words": count, "dim": dim, "bytes": size, "generate_seconds": generate_seconds},
        "wanted_words": int(len(rows)), "absent_words": N_ABSENT, "blocks": args.blocks,
        "results": results, "target_peak_rss_mb": target, "target_met": ours["peak_rss_mb"] < target,
    }, args.json, threads, checks, every_run[0]["threadpools"] if every_run else threadpools())
    checks.exit_if_failed()


if __name__ == "__main__":
    main()
