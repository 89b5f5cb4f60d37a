"""S_p for large finite p (close to S_inf) against an independent
computation: never 0 where S_inf > 0, never far from the reference."""
import math
import time

import numpy as np

from ..harness import describe, run_task
from ..indexes import random_measure


def _subtree_masses(tree, nodes, masses):
    """Edge masses of a measure on a tree, computed here from the parent
    pointers (a reference independent of the package's feature code)."""
    n = len(tree.parent)
    acc = np.zeros(n)
    masses = np.ones(len(nodes)) if masses is None else np.asarray(masses, dtype=np.float64)
    np.add.at(acc, np.asarray(nodes, dtype=np.int64), masses / masses.sum())
    for v in np.argsort(-tree.depth, kind="stable"):
        if tree.parent[v] >= 0:
            acc[tree.parent[v]] += acc[v]
    acc[tree.parent < 0] = 0.0
    return acc


def _reference_sp(alpha, beta, weights, p):
    diff = np.abs(alpha - beta)
    top = diff.max()
    if top == 0:
        return 0.0
    if math.isinf(p):
        return float(top)
    # Relative to the largest difference, so that no power underflows to 0.
    return float(top * np.sum(weights * (diff / top) ** p) ** (1.0 / p))


def trial_large_p(spec, ctx):
    from sobolev_index import SobolevIndex

    cache = ctx["cache"]
    if "reader" not in cache:
        index = SobolevIndex.open(ctx["template"])
        eta = np.asarray(index.eta) / np.sum(index.eta)
        stored = {}
        for key in index:
            doc = index.get(key)
            stored[key] = [_subtree_masses(t, doc["nodes"], doc["masses"]) for t in index.trees]
        cache.update(reader=index, eta=eta, stored=stored)
    index, eta, stored = cache["reader"], cache["eta"], cache["stored"]
    p = math.inf if spec["p"] == "inf" else float(spec["p"])
    rng = np.random.default_rng(spec["seed"])
    query = random_measure(rng, index.graph.n_nodes)
    q = [_subtree_masses(t, *query) for t in index.trees]
    reference = {key: sum(e * _reference_sp(q[r], alpha[r], t.length, p)
                          for r, (e, t) in enumerate(zip(eta, index.trees)))
                 for key, alpha in stored.items()}
    s_inf = {key: sum(e * _reference_sp(q[r], alpha[r], t.length, math.inf)
                      for r, (e, t) in enumerate(zip(eta, index.trees)))
             for key, alpha in stored.items()}
    k = 5
    try:
        found = index.search([query], k=k, p=p)
        direct = index.distance(query, found.keys[0][0], p=p)
    except Exception as exc:
        return f"error: {type(exc).__name__}", describe(exc)
    got = np.asarray(found.distances[0], dtype=np.float64)
    want = np.array([reference[key] for key in found.keys[0]])
    tol = 1e-9 * np.maximum(np.abs(want), 1e-300) + 1e-15
    if np.any((got == 0) & (np.array([s_inf[key] for key in found.keys[0]]) > 0)):
        return "0 where S_inf > 0 (underflow)", f"p={p}: {got.tolist()}"
    if np.any(np.abs(got - want) > tol) or abs(direct - want[0]) > tol[0]:
        return "differs from the reference", f"p={p}: got {got.tolist()}, reference {want.tolist()}"
    kth = np.sort(list(reference.values()))[k - 1]
    if got[-1] > kth * (1 + 1e-9) + 1e-15:
        return "not the k nearest", f"p={p}: k-th found {got[-1]}, reference k-th {kth}"
    return "matches the reference", ""


def kind_large_p(run):
    """Search and distance for large finite p against an independent S_p."""
    row = run.row("large-p", "large-p", "Large finite p (S_p near S_inf)",
                  "search and distance with p = {ps} for random queries, against S_p computed "
                  "here from the parent pointers, relative to the largest difference",
                  "every distance within 1e-9 (relative) of the reference, never 0 where "
                  "S_inf > 0, and the k nearest; p = 1e308 gives S_inf",
                  ["matches the reference"])
    started = time.monotonic()
    ps = [17, 1e308, "inf"] if run.quick else [1, 2, 16.5, 17, 100, 500, 1e6, 1e100, 1e308, "inf"]
    queries = max(1, run.trials // 4)
    specs = [{"row": row.id, "p": p, "seed": run.rng.randrange(2**31)}
             for p in ps for _ in range(queries)]
    row.injection = row.injection.format(ps=", ".join(map(str, ps)))
    run_task(run, "large-p", specs, [row], {"template": run.template("small")})
    run.finish([row], started)

