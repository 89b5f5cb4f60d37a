"""Baseline distances of the Sobolev transport paper (Section 5, Appendix).

- :func:`graph_ot_distances`: exact W_1 (optimal transport) with the graph's
  shortest-path metric as ground cost, d_OT in the paper.
- :func:`wmd_distances`: Word Mover's Distance, exact W_1 with the Euclidean
  distance between word vectors as ground cost (Kusner et al. 2015).
- :func:`spanning_tree_graph`: a spanning tree of a graph, random (as the
  authors sample it), uniform (Wilson) or minimum by edge length.
- :func:`tree_wasserstein_distances`: tree-Wasserstein (Le et al. 2019) on a
  tree graph, d_TW in the paper.

Every pairwise function returns ``dict(distances, seconds,
preprocessing_seconds, ...)``: ``distances`` is an (n, n) float64 matrix,
exactly symmetric with a zero diagonal; ``seconds`` is the wall time of the
whole call *including* ``preprocessing_seconds`` (the paper reports times that
include preprocessing); ``pair_seconds`` is the rest.

Transport problems are solved by POT's network simplex, the C function
``ot.lp.emd_wrap.emd_c`` that ``ot.emd2`` calls, with the same inputs
``ot.emd2(a, b, M)`` would pass it (b rescaled to a's sum; no zero masses),
so the values are bitwise those of ``ot.emd2``. ``ot.emd2`` itself spends
~150-450 us of Python per call in POT 0.9.7 (backend dispatch, marginal
assertions, dual centring), ten times the solve of a 15 x 15 problem;
``solver="emd2"`` uses it anyway. Every solve's result code is checked: a
problem that is not solved to optimality raises ``RuntimeError``.

Pairs are split into chunks of rows and run in ``n_jobs`` forked processes,
which inherit the data through a module global (nothing is pickled per
task); ``n_jobs=1`` runs in-process. Results do not depend on ``n_jobs``.
"""
import multiprocessing
import time
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.spatial.distance import cdist
from threadpoolctl import threadpool_limits

from sobolev_index import Graph, pairwise_sobolev
from sobolev_index.measures import as_measure_batch

__all__ = [
    "graph_ot_distances",
    "wmd_distances",
    "spanning_tree_graph",
    "tree_wasserstein_distances",
    "SPANNING_TREE_KINDS",
]

SPANNING_TREE_KINDS = ("random", "uniform", "mst")

# Network simplex iteration cap: high enough never to bind for the problem
# sizes here (a bound hit raises, it is not silently returned).
NUM_ITER_MAX = 10**9
# Above this many bytes the (S x S) matrix of shortest-path distances between
# all support nodes is not kept; each row's distances are computed on the fly.
MAX_MATRIX_BYTES = 2 * 1024**3
# WMD with ground="gram": entries with d^2 <= GRAM_REFINE * (|x|^2 + |y|^2)
# are recomputed directly (the Gram identity cancels there).
GRAM_REFINE = 1e-4
# Chunks per worker: enough for load balance and progress reports.
CHUNKS_PER_JOB = 24

_OPTIMAL = 1  # POT's result code for an optimal solution
_STATE = None  # the problem, set in the parent before forking the workers

try:  # the C solver behind ot.emd2
    from ot.lp.emd_wrap import check_result as _check_result
    from ot.lp.emd_wrap import emd_c as _emd_c
except ImportError:  # pragma: no cover - other POT layouts: use ot.emd2
    _emd_c = None
    _check_result = None


# ----------------------------------------------------------------- measures
def _sparse_measures(measures, n_nodes):
    """Validated measures as (sorted support, masses normalised to sum 1).

    Duplicate nodes add up, zero masses are dropped; masses are scaled by
    1 / total exactly as :meth:`ShortestPathTree.features_of` scales them.
    """
    batch = as_measure_batch(measures, n_nodes=n_nodes, normalize=True)
    supports, masses = [], []
    for i in range(len(batch)):
        lo, hi = batch.indptr[i], batch.indptr[i + 1]
        nodes = batch.nodes[lo:hi].astype(np.int64)
        w = batch.masses[lo:hi] * batch.row_scale[i]
        uniq, inverse = np.unique(nodes, return_inverse=True)
        w = np.bincount(inverse, weights=w, minlength=len(uniq))
        keep = w > 0
        supports.append(np.ascontiguousarray(uniq[keep]))
        masses.append(np.ascontiguousarray(w[keep], dtype=np.float64))
    return supports, masses


# ------------------------------------------------------------ pair machinery
class _Problem:
    """n measures: column index arrays and masses, plus a per-row cost block.

    ``row_block(i)`` is a (k_i, C) float64 array whose column ``cols[j][b]``
    holds the ground cost from support point a of measure i to support
    point b of measure j, for every j > i.
    """

    def __init__(self, cols, masses, row_block, solver, num_iter_max):
        self.cols = cols
        self.masses = masses
        self.sums = [float(m.sum()) for m in masses]
        self.row_block = row_block
        self.solver = solver
        self.num_iter_max = int(num_iter_max)
        self.n = len(masses)


def _solve_rows(start, stop):
    """Upper-triangle values of rows start..stop-1 (j > i), row after row."""
    st = _STATE
    n, cols, masses, sums = st.n, st.cols, st.masses, st.sums
    max_iter = st.num_iter_max
    out = np.empty(sum(n - 1 - i for i in range(start, stop)), dtype=np.float64)
    k = 0
    fast = st.solver == "emd_c"
    if not fast:
        import ot
    for i in range(start, stop):
        R = st.row_block(i)
        a, sa = masses[i], sums[i]
        for j in range(i + 1, n):
            M = R.take(cols[j], axis=1)  # C-contiguous float64
            b = masses[j]
            if fast:
                # ot.emd2's own rescaling, b * a.sum() / b.sum(), also when
                # the sums agree ((b * s) / s need not be b bitwise)
                result = _emd_c(a, b * sa / sums[j], M, max_iter, 1)
                cost, code = result[1], result[4]
                if code != _OPTIMAL:
                    raise RuntimeError(f"network simplex failed on pair ({i}, {j}) "
                                       f"(supports {len(a)} x {len(b)}): {_check_result(code)}")
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    cost, log = ot.emd2(a, b, M, numItermax=max_iter, log=True)
                if log["result_code"] != _OPTIMAL:
                    raise RuntimeError(f"ot.emd2 failed on pair ({i}, {j}): {log['warning']}")
            out[k] = cost
            k += 1
    return start, stop, out


def _chunks(n, n_jobs):
    """Row ranges with about equal numbers of pairs (row i has n - 1 - i)."""
    total = n * (n - 1) // 2
    if total == 0:
        return []
    target = max(1, total // (max(1, n_jobs) * CHUNKS_PER_JOB))
    chunks, start, pairs = [], 0, 0
    for i in range(n - 1):
        pairs += n - 1 - i
        if pairs >= target:
            chunks.append((start, i + 1))
            start, pairs = i + 1, 0
    if start < n - 1:
        chunks.append((start, n - 1))
    return chunks


def _run_chunk(chunk):
    return _solve_rows(*chunk)


def _pairwise(problem, n_jobs, progress):
    """Symmetric (n, n) matrix of problem's transport costs."""
    global _STATE
    n = problem.n
    D = np.zeros((n, n), dtype=np.float64)
    total = n * (n - 1) // 2
    n_jobs = max(1, int(n_jobs or 1))
    chunks = _chunks(n, n_jobs)

    def place(result):
        start, stop, values = result
        k = 0
        for i in range(start, stop):
            D[i, i + 1:] = values[k:k + n - 1 - i]
            k += n - 1 - i
        return k

    done = 0
    _STATE = problem
    try:
        if n_jobs == 1 or len(chunks) <= 1:
            results = map(_run_chunk, chunks)
            for result in results:
                done += place(result)
                if progress is not None:
                    progress(done, total)
        else:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(min(n_jobs, len(chunks))) as pool:
                for result in pool.imap_unordered(_run_chunk, chunks):
                    done += place(result)
                    if progress is not None:
                        progress(done, total)
    finally:
        _STATE = None
    D += D.T  # exact: the lower triangle was zero
    return D


def _check_solver(solver):
    if solver not in ("emd_c", "emd2"):
        raise ValueError(f"solver is {solver!r}; expected 'emd_c' or 'emd2'")
    if solver == "emd_c" and _emd_c is None:  # pragma: no cover
        solver = "emd2"
    return solver


def _result(D, started, prep_seconds, **extra):
    seconds = time.perf_counter() - started
    n = len(D)
    pairs = n * (n - 1) // 2
    out = dict(distances=D, seconds=seconds, preprocessing_seconds=prep_seconds,
               pair_seconds=seconds - prep_seconds, n_pairs=pairs)
    out.update(extra)
    return out


# ---------------------------------------------------------------- graph OT
def graph_ot_distances(graph, measures, n_jobs=2, progress=None, solver="emd_c",
                       num_iter_max=NUM_ITER_MAX, max_matrix_bytes=MAX_MATRIX_BYTES):
    """Exact W_1 between measures on ``graph``'s nodes, ground cost = shortest-path length.

    ``measures``: a sequence of (nodes, masses) pairs (masses None = equal);
    masses are normalised to sum 1. ``progress(pairs_done, pairs_total)`` is
    called after each chunk. Preprocessing (timed apart) is Dijkstra from
    every node in any support, keeping the (S x S) distances between the S
    support nodes; if that matrix would exceed ``max_matrix_bytes``, each
    row's distances are found by Dijkstra from its own support instead
    (counted in ``pair_seconds``; same values).

    Returns dict(distances, seconds, preprocessing_seconds, pair_seconds,
    n_pairs, n_support_nodes, mode).
    """
    solver = _check_solver(solver)
    started = time.perf_counter()
    supports, masses = _sparse_measures(measures, graph.n_nodes)
    adjacency = graph.adjacency()
    union = np.unique(np.concatenate(supports)) if supports else np.zeros(0, np.int64)
    S = len(union)
    if S * S * 8 <= max_matrix_bytes:
        mode = "matrix"
        Dss = np.empty((S, S), dtype=np.float64)
        block = max(1, min(S, (256 * 1024**2) // (8 * graph.n_nodes)))
        for lo in range(0, S, block):
            rows = csgraph.dijkstra(adjacency, directed=False, indices=union[lo:lo + block])
            Dss[lo:lo + block] = rows[:, union]
        cols = [np.searchsorted(union, s) for s in supports]

        def row_block(i):
            return Dss[cols[i]]
    else:
        mode = "per-row"
        cols = supports

        def row_block(i):
            return csgraph.dijkstra(adjacency, directed=False, indices=supports[i])
    prep = time.perf_counter() - started

    problem = _Problem(cols, masses, row_block, solver, num_iter_max)
    D = _pairwise(problem, n_jobs, progress)
    return _result(D, started, prep, n_support_nodes=S, mode=mode, solver=solver)


# --------------------------------------------------------------------- WMD
def wmd_distances(measures_words, vectors, n_jobs=2, progress=None, solver="emd_c",
                  ground="gram", num_iter_max=NUM_ITER_MAX):
    """Word Mover's Distance: exact W_1 with Euclidean ground cost between word vectors.

    ``measures_words``: a sequence of (word_indices, weights) pairs into the
    rows of ``vectors`` (V, d) (weights None = equal; duplicates add up);
    weights are normalised to sum 1.

    Ground costs are computed per row i against the words that occur in
    some document j > i (the union vocabulary ordered by last occurrence, so
    row i needs a prefix of it): never more distances than per-pair
    ``cdist`` would compute. ``ground``:
    - ``"cdist"``: ``scipy.spatial.distance.cdist`` values, bitwise;
    - ``"gram"`` (default, ~4x faster for 384-d vectors): float64 BLAS,
      d^2 = |x|^2 + |y|^2 - 2 x.y, and every entry with d^2 below
      GRAM_REFINE * (|x|^2 + |y|^2) (where cancellation could cost digits,
      e.g. a word against itself) recomputed directly; elsewhere the
      relative error is below ~1e-10 in the worst case, ~1e-15 typically.
    Preprocessing is building the ordering and the squared norms.

    Returns dict(distances, seconds, preprocessing_seconds, pair_seconds,
    n_pairs, n_words).
    """
    solver = _check_solver(solver)
    started = time.perf_counter()
    vectors = np.asarray(vectors)
    if vectors.ndim != 2:
        raise ValueError(f"vectors has shape {vectors.shape}; expected (V, d)")
    supports, masses = _sparse_measures(measures_words, len(vectors))
    n = len(supports)
    # last[w] = last document using word w; order words by it, descending.
    last = {}
    for i, s in enumerate(supports):
        for w in s.tolist():
            last[w] = i
    words = np.array(sorted(last, key=lambda w: (-last[w], w)), dtype=np.int64)
    last_doc = np.array([last[w] for w in words.tolist()], dtype=np.int64)
    position = np.empty(len(vectors), dtype=np.int64)
    position[words] = np.arange(len(words))
    cols = [position[s] for s in supports]
    X = np.ascontiguousarray(vectors[words], dtype=np.float64)
    # prefix[i] = number of words whose last document is > i
    prefix = np.searchsorted(-last_doc, -np.arange(n), side="left")
    own = [np.ascontiguousarray(vectors[s], dtype=np.float64) for s in supports]
    if ground == "cdist":
        def row_block(i):
            return cdist(own[i], X[:prefix[i]])
    elif ground == "gram":
        sq = np.einsum("ij,ij->i", X, X)
        own_sq = [np.einsum("ij,ij->i", A, A)[:, None] for A in own]

        def row_block(i):
            A, L, a_sq = own[i], prefix[i], own_sq[i]
            G = A @ X[:L].T
            G *= -2.0
            G += sq[:L]
            G += a_sq
            scale = a_sq + sq[:L]
            scale *= GRAM_REFINE
            rows, cols_ = np.nonzero(G <= scale)
            np.maximum(G, 0.0, out=G)
            np.sqrt(G, out=G)
            if len(rows):
                diff = A[rows] - X[cols_]
                G[rows, cols_] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
            return G
    else:
        raise ValueError(f"ground is {ground!r}; expected 'gram' or 'cdist'")

    prep = time.perf_counter() - started
    problem = _Problem(cols, masses, row_block, solver, num_iter_max)
    with threadpool_limits(limits=1, user_api="blas"):  # one thread per worker
        D = _pairwise(problem, n_jobs, progress)
    return _result(D, started, prep, n_words=len(words), solver=solver, ground=ground)


# ------------------------------------------------------------ spanning trees
def _tree_from_edge_ids(graph, ids, params):
    ids = np.sort(np.asarray(ids, dtype=np.int64))
    tree = Graph.from_edges(graph.n_nodes, graph.edges[ids], graph.lengths[ids],
                            coords=graph.coords)
    tree.params.update(params)
    return tree


def _mst_edge_ids(graph, rank):
    """Edge ids of the minimum spanning tree when edge e has priority rank[e].

    ``rank`` is a permutation of 0..E-1; the priorities rank + 1 are distinct
    positive integers, so the tree is unique and each tree entry's value
    names its edge.
    """
    n = graph.n_nodes
    u, v = graph.edges[:, 0], graph.edges[:, 1]
    W = sp.csr_matrix((rank.astype(np.float64) + 1.0, (u, v)), shape=(n, n))
    T = csgraph.minimum_spanning_tree(W).tocoo()
    edge_of_rank = np.empty(len(rank), dtype=np.int64)
    edge_of_rank[rank] = np.arange(len(rank))
    return edge_of_rank[np.rint(T.data).astype(np.int64) - 1]


def _wilson_edge_ids(graph, rng):
    """Wilson's algorithm: a spanning tree drawn uniformly at random."""
    n = graph.n_nodes
    E = len(graph.edges)
    u, v = graph.edges[:, 0], graph.edges[:, 1]
    eid = np.arange(E)
    A = sp.csr_matrix((np.concatenate([eid, eid]) + 1, (np.concatenate([u, v]), np.concatenate([v, u]))),
                      shape=(n, n))
    indptr = A.indptr.tolist()
    nbr = A.indices.tolist()
    edge_of = (np.rint(A.data).astype(np.int64) - 1).tolist()
    in_tree = [False] * n
    nxt = [-1] * n  # position in nbr of the step taken from each node
    in_tree[int(rng.integers(n))] = True
    buf, pos = rng.random(4096).tolist(), 0
    for s in rng.permutation(n).tolist():
        x = s
        while not in_tree[x]:  # loop-erased random walk: last exit wins
            if pos == len(buf):
                buf, pos = rng.random(4096).tolist(), 0
            lo, hi = indptr[x], indptr[x + 1]
            p = lo + int(buf[pos] * (hi - lo))
            pos += 1
            nxt[x] = p
            x = nbr[p]
        x = s
        while not in_tree[x]:
            in_tree[x] = True
            x = nbr[nxt[x]]
    return [edge_of[p] for p in nxt if p >= 0]


def spanning_tree_graph(graph, kind, seed=0):
    """A spanning tree of ``graph`` as a new :class:`Graph` with the original edge lengths.

    ``kind``:
    - ``"random"``: the paper authors' sampler (RandomlySamplingTree.m in
      github.com/lttam/SobolevTransport: grow a tree from a random edge,
      always adding the first edge of one random edge order that has exactly
      one end in the tree). That is Prim's algorithm on i.i.d. random edge
      priorities, i.e. the minimum spanning tree under random priorities,
      which is what is computed here. It is *not* uniform over spanning trees.
    - ``"uniform"``: a uniformly random spanning tree (Wilson's algorithm).
    - ``"mst"``: the minimum spanning tree by edge length (ties broken by
      edge order; ``seed`` unused).

    The tree keeps ``graph.coords``; ``tree.params`` records kind, seed and
    the seconds spent (add them to TW's preprocessing time).
    """
    if kind not in SPANNING_TREE_KINDS:
        raise ValueError(f"kind is {kind!r}; expected one of {SPANNING_TREE_KINDS}")
    started = time.perf_counter()
    E = len(graph.edges)
    rng = np.random.default_rng(seed)
    if kind == "random":
        ids = _mst_edge_ids(graph, rng.permutation(E))
    elif kind == "mst":
        rank = np.empty(E, dtype=np.int64)
        rank[np.argsort(graph.lengths, kind="stable")] = np.arange(E)
        ids = _mst_edge_ids(graph, rank)
    else:
        ids = _wilson_edge_ids(graph, rng)
    if len(ids) != graph.n_nodes - 1:
        raise ValueError(f"spanning tree has {len(ids)} edges; expected {graph.n_nodes - 1} "
                         "(is the graph connected?)")
    params = {"source": "spanning_tree", "kind": kind, "seed": seed}
    tree = _tree_from_edge_ids(graph, ids, params)
    tree.params["seconds"] = time.perf_counter() - started
    return tree


# --------------------------------------------------------- tree-Wasserstein
def tree_wasserstein_distances(tree_graph, measures, root=None, n_threads=None):
    """Tree-Wasserstein (Le et al. 2019) on a tree graph: sum_e w_e |mu(T_e) - nu(T_e)|.

    T_e is the subtree below edge e, seen from ``root`` (node 0 by default;
    the value does not depend on the root). On a tree this is Sobolev S_1
    with the tree as graph, and equals W_1 with the tree metric; it is
    computed with ``tree_graph.tree(root).features_of`` and
    ``pairwise_sobolev(p=1)``. Preprocessing (timed apart) is the tree's
    parent array and the features; sampling the tree is not included (see
    ``tree_graph.params["seconds"]`` from :func:`spanning_tree_graph`).

    Returns dict(distances, seconds, preprocessing_seconds, pair_seconds, n_pairs).
    """
    if tree_graph.n_edges != tree_graph.n_nodes - 1:
        raise ValueError(f"tree_graph has {tree_graph.n_nodes} nodes and {tree_graph.n_edges} "
                         "edges; a tree has n_nodes - 1 edges")
    started = time.perf_counter()
    tree = tree_graph.tree(0 if root is None else int(root))
    F = tree.features_of(measures)
    prep = time.perf_counter() - started
    D = pairwise_sobolev(F, trees=tree, p=1, n_threads=n_threads)
    D = np.ascontiguousarray(D, dtype=np.float64)
    return _result(D, started, prep)


def sliced_wasserstein_diagrams(diagrams, n_directions=50):
    """Sliced Wasserstein distances between persistence diagrams.

    The standard diagram distance behind the sliced Wasserstein kernel: for
    each of ``n_directions`` angles theta in [-pi/2, pi/2), diagram A is
    projected onto the line of theta together with the diagonal projections
    of B's points, and B together with A's (so both sides have the same
    number of points, and a point may be matched to the diagonal); the 1-D
    W_1 of the two projections is the sum of differences of their sorted
    values. The distance is the mean of W_1 over the angles. Here it checks
    that the Orbit diagrams themselves carry the classes, independently of
    any graph. Returns an (n, n) float64 matrix with a zero diagonal.
    """
    angles = np.linspace(-np.pi / 2, np.pi / 2, n_directions, endpoint=False)
    lines = np.stack([np.cos(angles), np.sin(angles)])
    projected = [np.asarray(d, dtype=np.float64) @ lines for d in diagrams]
    # The diagonal point nearest (b, d) is ((b + d) / 2, (b + d) / 2).
    on_diagonal = [np.outer(np.asarray(d, dtype=np.float64).sum(axis=1) / 2, lines.sum(axis=0))
                   for d in diagrams]
    n = len(diagrams)
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            a = np.sort(np.vstack([projected[i], on_diagonal[j]]), axis=0)
            b = np.sort(np.vstack([projected[j], on_diagonal[i]]), axis=0)
            D[i, j] = D[j, i] = np.abs(a - b).sum(axis=0).mean()
    return D
