"""The default recipe's roots against one root at a large N: build time,
disk, single and batched latency, and an exact check against brute force.

    python bench/recipe_scale.py --n 1000000 --threads 2

On the synthetic topic corpus of bench/ with the recipe's graph (10,000
nodes, 5 nearest-node edges; ``quality.topic_measures``), two indexes are
built, one root (the central node, ``--recipe fast``) and ``--roots``
random roots (the default recipe's 10), the measures added 10,000 at a time.
Both are then open at once and timed in ``--rounds`` alternating rounds
(``--single`` single queries, median; then all ``--queries`` queries in one
call; ``quality.time_rounds``): medians over the rounds, and the ratios
medians of each round's. The ten nearest of
``--check`` queries are compared with brute force over every document
(each root's features made chunk by chunk), and the run exits with status 1
when a distance differs by more than 1e-9 (relative).

Writes bench/results/recipe_scale.json (not committed); the figures go into
docs/benchmarks.md by hand, with the run's date.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import quality  # noqa: E402
from _common import add_threads_option, limit_threads  # noqa: E402

BATCH = 10_000
CHUNK = 50_000


def build(path, graph, measures, n, roots):
    from sobolev_index import SobolevIndex

    started = time.perf_counter()
    with SobolevIndex.create(path, graph, roots=None if roots == 1 else roots,
                             on_violation="perturb") as index:
        for start in range(0, n, BATCH):
            index.add(measures[start:min(n, start + BATCH)])
    seconds = time.perf_counter() - started
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)
    return {"build_seconds": seconds, "bytes_per_document": size / n}


def worst_error(reader, measures, n, probe, threads):
    """Largest relative difference between the index's ten nearest distances
    of ``probe`` and brute force over the n documents."""
    from sobolev_index.distances import sliced_pairwise

    trees, eta = reader.trees, reader.eta
    got = np.asarray(reader.search(probe, k=10, n_threads=threads).distances)
    best = np.full((len(probe), 10), np.inf)
    Q = [t.features_of(probe) for t in trees]
    for start in range(0, n, CHUNK):
        F = [t.features_of(measures[start:min(n, start + CHUNK)], n_threads=threads)
             for t in trees]
        D = sliced_pairwise(Q, F, trees, 1, eta, n_threads=threads)
        best = np.sort(np.concatenate([best, D], axis=1), axis=1)[:, :10]
    return float(np.max(np.abs(got - best) / np.maximum(best, 1e-300)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--roots", type=int, default=10)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--single", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--check", type=int, default=20)
    parser.add_argument("--dir", default=None, help="where to build (default: a temporary one)")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "recipe_scale.json"))
    add_threads_option(parser)
    args = parser.parse_args(argv)
    from sobolev_index import SobolevIndex

    graph, measures = quality.topic_measures(args.n + args.queries, args.threads)
    queries = measures[args.n:]
    report = {"args": vars(args), "machine": quality.machine_facts(), "indexes": {}}
    base = args.dir or tempfile.mkdtemp(prefix="recipe-scale-")
    readers = {}
    try:
        with limit_threads(args.threads):
            for roots in (1, args.roots):
                path = os.path.join(base, f"r{roots}")
                shutil.rmtree(path, ignore_errors=True)
                report["indexes"][roots] = build(path, graph, measures, args.n, roots)
                print(f"[build] {roots} root(s): {report['indexes'][roots]}", file=sys.stderr,
                      flush=True)
                readers[roots] = SobolevIndex.open(path)
            for roots, row in quality.time_rounds(readers, queries, args.threads, args.rounds,
                                                  args.single).items():
                report["indexes"][roots].update(row)
            for roots, reader in readers.items():
                report["indexes"][roots]["max_relative_error"] = worst_error(
                    reader, measures, args.n, queries[:args.check], args.threads)
    finally:
        for reader in readers.values():
            reader.close()
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as out:
        json.dump(report, out, indent=1)
    for roots, row in report["indexes"].items():
        print(f"{roots} root(s): build {row['build_seconds']:.0f} s, "
              f"{row['bytes_per_document']:,.0f} B/doc, single {row['single_ms']:.2f} ms "
              f"({row['ratio_single']:.2f}x), batched {row['batched_ms']:.2f} ms/query "
              f"({row['ratio_batched']:.2f}x), max relative error "
              f"{row['max_relative_error']:.1e}")
    if max(row["max_relative_error"] for row in report["indexes"].values()) > 1e-9:
        raise SystemExit("an index and brute force differ by more than 1e-9 (relative)")


if __name__ == "__main__":
    main()
