"""Synthetic data the package makes by itself, for the quickstart and docs.

Each bag of points is drawn around a few anchors of its topic, so bags of the
same topic are close under any transport distance and the nearest-neighbour
accuracy shows whether a distance sees that.
"""
import time

import numpy as np

from .graph import Graph
from .kernels import pairwise_sobolev


def synthetic_point_clouds(n_topics=5, per_topic=60, dim=16, anchors_per_topic=8,
                           points_per_bag=(10, 40), spread=1.2, seed=0):
    """Return a dict with ``points`` (all supports), ``indptr`` (bags) and ``labels``."""
    rng = np.random.default_rng(seed)
    anchors = rng.normal(size=(n_topics, anchors_per_topic, dim))
    bags, labels = [], []
    for topic in range(n_topics):
        for _ in range(per_topic):
            size = int(rng.integers(points_per_bag[0], points_per_bag[1] + 1))
            which = rng.integers(0, anchors_per_topic, size)
            bags.append(anchors[topic, which] + spread * rng.normal(size=(size, dim)))
            labels.append(topic)
    indptr = np.zeros(len(bags) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in bags], out=indptr[1:])
    return {"points": np.concatenate(bags), "indptr": indptr,
            "labels": np.asarray(labels), "topics": n_topics, "dim": dim}


def _leave_one_out_accuracy(D, labels):
    D = D.copy()
    np.fill_diagonal(D, np.inf)
    return float(np.mean(labels[np.argmin(D, axis=1)] == labels))


def nearest_neighbour_report(data, n_nodes=300, n_roots=5, seed=0):
    """Build a graph over the data's points and score S_1 and sliced S_1."""
    points, indptr, labels = data["points"], data["indptr"], data["labels"]
    started = time.perf_counter()
    graph = Graph.from_points(points, n_nodes=n_nodes, edges="log", seed=seed)
    graph_seconds = time.perf_counter() - started
    roots, eta = graph.roots(n_roots, strategy="random", seed=seed)
    masses = np.ones(len(points))

    started = time.perf_counter()
    trees = graph.trees(roots)
    features = [t.features(indptr, graph.assignment, masses) for t in trees]
    feature_seconds = time.perf_counter() - started

    results = []
    for name, use in (("S_1, one root", 1), (f"sliced S_1, {n_roots} roots", n_roots)):
        started = time.perf_counter()
        D = pairwise_sobolev(features[:use], trees=trees[:use], p=1, eta=None)
        seconds = time.perf_counter() - started
        results.append({"distance": name, "accuracy": round(_leave_one_out_accuracy(D, labels), 4),
                        "pairs": len(labels) * (len(labels) - 1) // 2,
                        "seconds": round(seconds, 4)})
    return {
        "measures": len(labels), "topics": data["topics"], "dim": data["dim"],
        "support_points": len(points), "nodes": graph.n_nodes, "edges": graph.n_edges,
        "roots": roots.tolist(), "graph_seconds": round(graph_seconds, 4),
        "feature_seconds": round(feature_seconds, 4),
        "feature_nnz_per_measure": features[0].nnz / len(labels),
        "results": results,
    }
