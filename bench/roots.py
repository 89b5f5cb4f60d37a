"""Which roots, and how many: classification quality and cost of S_1 sliced
over R roots chosen by different rules.

    python bench/roots.py --threads 2

For R in ``--counts`` (default 1, 2, 3, 5, 10) and each rule:

- ``random``: R distinct random nodes, for seeds 0, 1 and 2 (today's
  recipe is random with seed 0 and R = 10);
- ``spread``: farthest-point sampling, the most central node, then each
  next root the node farthest along shortest paths from the roots chosen;
- ``disagree``: the most central node, then each next root the one of
  ``POOL`` random candidates whose tree shares the fewest edges with the
  trees chosen so far;
- ``medoids``: greedy k-medoids, the most central node, then each next
  root the one of ``POOL`` random candidates that most lowers the summed
  distance from every node to its nearest root;
- ``center`` (R = 1 only): the most central node, today's "fast" recipe.

Quality is measured exactly as ``bench/quality.py`` measures its rows (same
corpora, documents, graphs, tf-idf measures, splits and k-NN protocol;
SVM accuracy on Orbit diagrams, on the 1,000-node k-NN graph with
persistence weights and on the build defaults' graph of every point), and
compared, paired over the splits, with the baselines stored in
bench/results/quality.json (WMD; graph OT on Orbit) and with today's recipe
(10 random roots). The run refuses a quality.json made on other documents.

Cost (``--skip-cost`` leaves it out): on the synthetic topic corpus at
N = ``--cost-n`` with the recipe's graph, for each rule and R, an index is
built and searched: single-query median latency (k = 10), batched
latency, bytes on disk per document, and the nonzero features per
document per root; results are checked against one another (every index
of the same roots gives the same distances as brute force over its own
features).

Writes bench/results/roots.json; the figures go into docs/quality.md by
hand, with the run's date.
"""
import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import quality  # noqa: E402
from _common import add_threads_option, limit_threads  # noqa: E402
from reproduce_paper import word_measures_on  # noqa: E402

POOL = 64
SEEDS = (0, 1, 2)


# -------------------------------------------------------------------- rules
def _tree(graph, node, seed):
    return graph.tree(node, on_violation="perturb", seed=seed)


def _central(graph, seed):
    first, _ = graph.roots(1, strategy="center", seed=seed, on_violation="perturb")
    return int(first[0])


def _greedy_roots(graph, n, seed, start, cost, add):
    """The central node, then each next root the one of ``POOL`` random
    candidates of least ``cost(state, tree)`` (the first on ties), where
    ``state = start(tree)`` of the first root and ``add(state, tree)`` adds
    a root's tree to it."""
    chosen = [_central(graph, seed)]
    state = start(_tree(graph, chosen[0], seed))
    rng = np.random.default_rng(seed)
    pool = [int(x) for x in rng.permutation(graph.n_nodes)[:POOL + n] if int(x) not in chosen]
    while len(chosen) < n:
        best = min((node for node in pool if node not in chosen),
                   key=lambda node: cost(state, _tree(graph, node, seed)))
        chosen.append(best)
        state = add(state, _tree(graph, best, seed))
    return np.asarray(chosen, dtype=np.int64)


def disagreeing_roots(graph, n, seed=0):
    """Greedily the candidate whose tree shares the fewest (undirected)
    edges with the union of the chosen trees."""
    def edges(tree):
        v = np.flatnonzero(tree.parent >= 0)
        u = tree.parent[v]
        return np.minimum(u, v) * graph.n_nodes + np.maximum(u, v)

    return _greedy_roots(graph, n, seed, edges,
                         lambda union, tree: int(np.isin(edges(tree), union).sum()),
                         lambda union, tree: np.union1d(union, edges(tree)))


def medoid_roots(graph, n, seed=0):
    """Greedy k-medoids over the graph's nodes: the candidate that most
    lowers the sum over nodes of the shortest-path distance to the nearest
    root (roots in dense parts of the graph, not at its outskirts as
    farthest-point sampling puts them)."""
    return _greedy_roots(graph, n, seed, lambda tree: tree.distance.copy(),
                         lambda nearest, tree: float(np.minimum(nearest, tree.distance).sum()),
                         lambda nearest, tree: np.minimum(nearest, tree.distance))


def spread_roots(graph, n, seed=0):
    """Farthest-point sampling along shortest paths: the central node, then
    each next root the node farthest from the roots chosen so far (the
    lowest id among equals)."""
    chosen = [_central(graph, seed)]
    nearest = _tree(graph, chosen[0], seed).distance.copy()
    while len(chosen) < n:
        nearest[chosen] = -np.inf
        chosen.append(int(np.argmax(nearest)))
        np.minimum(nearest, _tree(graph, chosen[-1], seed).distance, out=nearest)
    return np.asarray(chosen, dtype=np.int64)


def roots_of(graph, rule, n, seed=0):
    if rule == "disagree":
        return disagreeing_roots(graph, n, seed)
    if rule == "medoids":
        return medoid_roots(graph, n, seed)
    if rule == "spread":
        return spread_roots(graph, n, seed)
    strategy = {"random": "random", "center": "center"}[rule]
    chosen, _ = graph.roots(n, strategy=strategy, seed=seed, on_violation="perturb")
    return chosen


RULES = ("random", "spread", "disagree", "medoids")


def configurations(counts, rules=RULES):
    """[(row name, rule, R, seed)]."""
    out = [("center, R=1", "center", 1, 0)] if 1 in counts else []
    for n in counts:
        if "random" in rules:
            for seed in SEEDS:
                out.append((f"random (seed {seed}), R={n}", "random", n, seed))
        if n > 1:
            out.extend((f"{rule}, R={n}", rule, n, 0) for rule in rules if rule != "random")
    return out


def sliced_matrix(graph, measures, chosen, threads, seed=0):
    from sobolev_index.distances import sliced_pairwise
    from sobolev_index.graph import normalise_eta

    trees = graph.trees(chosen, on_violation="perturb", seed=seed)
    on_graph = word_measures_on(graph, measures)
    F = [tree.features_of(on_graph, n_threads=threads) for tree in trees]
    return sliced_pairwise(F, None, trees, 1, normalise_eta(None, len(trees)), n_threads=threads)


# ------------------------------------------------------------------ quality
def paired(errors, base):
    diff = np.asarray(errors) - np.asarray(base)
    return float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(len(diff)))


def text_study(name, stored, counts, rules, threads, processes, n_splits):
    from paper.protocol import splits

    corpus = quality.load_corpus(name)
    if corpus is None:
        return None
    table = stored["corpora"][name]["table"]
    if stored["corpora"][name]["n_documents"] != len(corpus["documents"]):
        raise SystemExit(f"{name}: quality.json has {stored['corpora'][name]['n_documents']} "
                         f"documents, this run {len(corpus['documents'])}: rerun bench/quality.py")
    graph = quality.graph_of(corpus["vectors"][True], "knn", len(corpus["vectors"][True]))
    measures = corpus["measures"][(True, "tfidf")]
    rows = {}
    for row, rule, n, seed in configurations(counts, rules):
        started = time.perf_counter()
        chosen = roots_of(graph, rule, n, seed)
        D = sliced_matrix(graph, measures, chosen, threads, seed)
        rows[row] = ("roots", D, time.perf_counter() - started)
        print(f"  [{name}] {row}: roots {chosen.tolist()}", file=sys.stderr, flush=True)
    split_list = splits(corpus["labels"], n_splits=n_splits, seed=0)
    jobs = [(row, D, corpus["labels"], split_list) for row, (_, D, _) in rows.items()]
    with multiprocessing.get_context("fork").Pool(max(1, processes)) as pool:
        results = pool.map(quality._evaluate, jobs)
    wmd = table["WMD"]["errors"]
    today = table["recipe: knn 5, every word, tf-idf, 10 roots"]["errors"]
    out = {}
    for row, accuracies in results:
        errors = 100.0 * (1.0 - np.asarray(accuracies))
        out[row] = {"error_mean": float(errors.mean()), "error_std": float(errors.std()),
                    "vs_wmd": paired(errors, wmd), "vs_today": paired(errors, today),
                    "errors": errors.tolist()}
        print(f"  [{name}] {row}: {errors.mean():.2f} (vs WMD {out[row]['vs_wmd'][0]:+.2f} ± "
              f"{out[row]['vs_wmd'][1]:.2f}; vs today {out[row]['vs_today'][0]:+.2f} ± "
              f"{out[row]['vs_today'][1]:.2f})", file=sys.stderr, flush=True)
    return {"documents": len(corpus["documents"]), "rows": out,
            "wmd": table["WMD"]["error_mean"], "today": table[
                "recipe: knn 5, every word, tf-idf, 10 roots"]["error_mean"]}


def orbit_study(stored, counts, rules, threads, processes, n_splits, per_class):
    from paper import orbit
    from paper.protocol import splits

    from sobolev_index import Graph
    from sobolev_index.ingest.recipes import MAX_NODES

    data = orbit.orbit_diagrams(n_per_class=per_class, n_points=1000, seed=0,
                                cache_dir=os.path.join(tempfile.gettempdir(), "sobolev-index-orbit"),
                                n_jobs=threads)
    diagrams, labels = data["diagrams"], np.asarray(data["labels"])
    points = np.vstack(diagrams)
    weights = points[:, 1] - points[:, 0]
    measures = [(ids, weights[ids]) for ids in
                np.split(np.arange(len(points)), np.cumsum([len(d) for d in diagrams])[:-1])]
    split_list = splits(labels, n_splits=n_splits, seed=0)
    base = stored["orbit"]["table"]["graph OT: knn 5, 1,000 nodes, persistence"]["svm"]
    out = {}
    for nodes in (1000, min(len(points), MAX_NODES)):
        graph = Graph.from_points(points, n_nodes=nodes, edges="knn", k=5, seed=0)
        rows = {}
        for row, rule, n, seed in configurations(counts, rules):
            rows[f"{nodes} nodes, {row}"] = sliced_matrix(graph, measures,
                                                          roots_of(graph, rule, n, seed), threads,
                                                          seed)
        jobs = [(row, D, labels, split_list, False) for row, D in rows.items()]
        with multiprocessing.get_context("fork").Pool(max(1, processes)) as pool:
            results = pool.map(quality._evaluate_orbit, jobs)
        for row, svm, _knn in results:
            svm = 100.0 * np.asarray(svm)
            out[row] = {"svm_mean": float(svm.mean()), "svm_std": float(svm.std()),
                        "vs_graph_ot": paired(svm, base), "svm": svm.tolist()}
            print(f"  [Orbit] {row}: SVM {svm.mean():.1f} (vs graph OT "
                  f"{out[row]['vs_graph_ot'][0]:+.1f} ± {out[row]['vs_graph_ot'][1]:.1f})",
                  file=sys.stderr, flush=True)
    return {"rows": out, "graph_ot": stored["orbit"]["table"][
        "graph OT: knn 5, 1,000 nodes, persistence"]["svm_mean"], "n_diagrams": len(labels)}


# --------------------------------------------------------------------- cost
def cost_study(counts, rules, threads, n, n_queries=50):
    """Per rule and R: single and batched query latency, bytes per document
    and nonzero features per document per root, on the topic corpus."""
    from sobolev_index import SobolevIndex
    from sobolev_index.distances import sliced_pairwise
    from sobolev_index.graph import normalise_eta

    graph, measures = quality.topic_measures(n + n_queries, threads)
    queries = measures[n:]
    out = {}
    rows = [("center, R=1", "center", 1, 0)] + [
        (f"{rule}, R={r}", rule, r, 0) for r in counts if r > 1
        for rule in rules]
    with tempfile.TemporaryDirectory() as tmp:
        for row, rule, r, seed in rows:
            chosen = roots_of(graph, rule, r, seed)
            path = os.path.join(tmp, row.replace(" ", "").replace(",", "_").replace("=", ""))
            started = time.perf_counter()
            index = SobolevIndex.create(path, graph, roots=[int(x) for x in chosen],
                                        on_violation="perturb")
            with index:
                index.add(measures[:n])
            build = time.perf_counter() - started
            with SobolevIndex.open(path) as reader:
                reader.search(queries[:5], k=10, n_threads=threads)
                single = []
                for q in queries:
                    t = time.perf_counter()
                    reader.search([q], k=10, n_threads=threads)
                    single.append(time.perf_counter() - t)
                t = time.perf_counter()
                result = reader.search(queries, k=10, n_threads=threads)
                batched = (time.perf_counter() - t) / len(queries)
                nnz = sum(s.nnz for s in reader._segments) / (len(reader) * r)
                # How well the bounds prune: the share of rows whose stored
                # values were read, and of rows scored exactly.
                stats = reader.search(queries, k=10, n_threads=threads, stats=True).stats
                read = stats["rows_read"] / stats["rows"]
                exact = stats["exact"] / stats["rows"]
            size = sum(os.path.getsize(os.path.join(d, f))
                       for d, _, files in os.walk(path) for f in files)
            # Exactness: the index's k-th distances against brute force over
            # the same roots' trees.
            trees = graph.trees(chosen, on_violation="perturb")
            probe = queries[:5]
            sample = measures[:n]
            F = [t.features_of(sample, n_threads=threads) for t in trees]
            Q = [t.features_of(probe, n_threads=threads) for t in trees]
            D = sliced_pairwise(Q, F, trees, 1, normalise_eta(None, r), n_threads=threads)
            brute = np.sort(D, axis=1)[:, :10]
            got = np.asarray(result.distances[:5])
            worst = float(np.max(np.abs(got - brute) / np.maximum(brute, 1e-300)))
            if worst > 1e-9:
                raise SystemExit(f"{row}: index and brute force differ by {worst:.3g} relative")
            out[row] = {"single_ms": 1000 * float(np.median(single)),
                        "batched_ms": 1000 * batched, "bytes_per_document": size / n,
                        "nnz_per_document_per_root": float(nnz), "build_seconds": build,
                        "roots": [int(x) for x in chosen], "max_relative_error": worst,
                        "rows_read": read, "rows_exact": exact}
            print(f"  [cost] {row}: single {out[row]['single_ms']:.2f} ms, batched "
                  f"{out[row]['batched_ms']:.2f} ms/query, {out[row]['bytes_per_document']:,.0f} "
                  f"B/doc, {nnz:.0f} nnz/doc/root, build {build:.1f} s, rows read {100 * read:.2f}%, "
                  f"exact {100 * exact:.3f}%", file=sys.stderr,
                  flush=True)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,2,3,5,10")
    parser.add_argument("--corpus", default="TWITTER,stdlib,Orbit")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--orbits-per-class", type=int, default=60)
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--cost-n", type=int, default=100_000)
    parser.add_argument("--quality-json", default=os.path.join(HERE, "results", "quality.json"))
    parser.add_argument("--json", default=os.path.join(HERE, "results", "roots.json"))
    add_threads_option(parser)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    rules = [r for r in args.rules.split(",") if r]
    if not set(rules) <= set(RULES):
        parser.error(f"--rules {args.rules}: expected names from {','.join(RULES)}")
    with open(args.quality_json, encoding="utf-8") as handle:
        stored = json.load(handle)
    if stored["args"]["splits"] != args.splits:
        raise SystemExit(f"quality.json has {stored['args']['splits']} splits; pass --splits "
                         f"{stored['args']['splits']}")
    import sobolev_index  # noqa: F401

    report = {"args": vars(args), "machine": quality.machine_facts(), "corpora": {}}
    processes = args.processes or args.threads
    started = time.perf_counter()
    with limit_threads(args.threads):
        for name in args.corpus.split(","):
            if name == "Orbit":
                report["orbit"] = orbit_study(stored, counts, rules, args.threads, processes,
                                              args.splits, args.orbits_per_class)
            elif name:
                report["corpora"][name] = text_study(name, stored, counts, rules, args.threads,
                                                     processes, args.splits)
        if not args.skip_cost:
            report["cost"] = cost_study(counts, rules, args.threads, args.cost_n)
    report["seconds"] = time.perf_counter() - started
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as out:
        json.dump(report, out, indent=1)
    print(f"wrote {args.json} in {report['seconds']:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
