"""Farthest-point (Gonzalez) clustering, exact, with triangle-inequality pruning.

Private: ``graph.py`` validates the points (finite, C-contiguous) first.

Gonzalez's rule: the next centre is the point farthest from its nearest
centre. Done naively that costs n * M distance evaluations. Each cluster
instead keeps its members (a contiguous run), its radius and its farthest point.
When centre c is added, a point i of cluster b (centre z_b) can only move if
d(i, c) < d(i, z_b), which needs d(i, z_b) > d(z_b, c) / 2. A whole cluster is
skipped when its radius is at most d(z_b, c) / 2. Only provably unchanged
points are skipped, so the result is the naive algorithm's up to how ties
between equally far points are broken.
"""
from cython.parallel cimport prange
from libc.math cimport sqrt, INFINITY

import numpy as np

from ._typedefs cimport float64_t, offset_t
from ._openmp_helpers import effective_threads

ctypedef fused floating_t:
    float
    double


cdef inline float64_t _sq_distance_below(
    const floating_t* a, const floating_t* b, Py_ssize_t d, float64_t bound,
) noexcept nogil:
    """Squared distance, or any value >= bound once the partial sum passes it.

    Four accumulators break the add latency chain; checking the bound every
    32 coordinates stops early for the many candidates that do not move.
    """
    cdef Py_ssize_t t = 0, stop
    cdef float64_t s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, e0, e1, e2, e3
    while t + 4 <= d:
        stop = t + 32 if t + 32 <= d else d - (d - t) % 4
        while t < stop:
            e0 = <float64_t> a[t] - <float64_t> b[t]
            e1 = <float64_t> a[t + 1] - <float64_t> b[t + 1]
            e2 = <float64_t> a[t + 2] - <float64_t> b[t + 2]
            e3 = <float64_t> a[t + 3] - <float64_t> b[t + 3]
            s0 += e0 * e0
            s1 += e1 * e1
            s2 += e2 * e2
            s3 += e3 * e3
            t += 4
        if s0 + s1 + s2 + s3 >= bound:
            return s0 + s1 + s2 + s3
    while t < d:
        e0 = <float64_t> a[t] - <float64_t> b[t]
        s0 += e0 * e0
        t += 1
    return (s0 + s1) + (s2 + s3)


cdef inline float64_t _distance(const floating_t* a, const floating_t* b, Py_ssize_t d) noexcept nogil:
    return sqrt(_sq_distance_below(a, b, d, INFINITY))


def farthest_point_clustering(
    const floating_t[:, ::1] X,
    Py_ssize_t max_centers,
    Py_ssize_t first,
    n_threads=None,
    progress=None,
):
    """Return (centres, assignment, distance_to_centre, covering_radius).

    ``centres`` are row numbers of X in the order chosen (first one given).
    Stops early when every point coincides with a centre, so duplicates
    collapse and fewer than ``max_centers`` centres may come back.
    ``progress``, if given, is called as progress(n_centres_so_far).
    """
    cdef Py_ssize_t n = X.shape[0], d = X.shape[1]
    cdef int n_workers = effective_threads(n_threads, n * d)
    cdef Py_ssize_t i, t, b, k, a, c, n_cand, n_cand_clusters, member
    cdef float64_t best, half
    cdef Py_ssize_t report_every = max(1, max_centers // 100)
    cdef int step_workers

    centres_arr = np.empty(max_centers, dtype=np.int64)
    assignment_arr = np.zeros(n, dtype=np.int64)
    dist_arr = np.empty(n, dtype=np.float64)
    # Each cluster's members sit in one contiguous run of ``pool``
    # (start[b], count[b]), in increasing point order, so walking a cluster
    # reads memory in order. A new cluster's run is appended at pool_end; when
    # the pool is full, the runs are packed to the front again.
    pool_arr = np.empty(2 * n + 1, dtype=np.int64)
    spare_arr = np.empty(2 * n + 1, dtype=np.int64)
    start_arr = np.zeros(max_centers, dtype=np.int64)
    count_arr = np.zeros(max_centers, dtype=np.int64)
    radius_arr = np.zeros(max_centers, dtype=np.float64)
    far_arr = np.full(max_centers, -1, dtype=np.int64)
    to_new_arr = np.empty(max_centers, dtype=np.float64)
    cand_arr = np.empty(n, dtype=np.int64)
    cand_dist_arr = np.empty(n, dtype=np.float64)
    cand_clusters_arr = np.empty(max_centers, dtype=np.int64)

    cdef offset_t[::1] centres = centres_arr
    cdef offset_t[::1] assignment = assignment_arr
    cdef float64_t[::1] dist = dist_arr
    cdef offset_t[::1] pool = pool_arr
    cdef offset_t[::1] spare = spare_arr
    cdef offset_t[::1] start = start_arr
    cdef offset_t[::1] count = count_arr
    cdef float64_t[::1] radius = radius_arr
    cdef offset_t[::1] far = far_arr
    cdef float64_t[::1] to_new = to_new_arr
    cdef offset_t[::1] cand = cand_arr
    cdef float64_t[::1] cand_dist = cand_dist_arr
    cdef offset_t[::1] cand_clusters = cand_clusters_arr
    cdef offset_t pool_end, pos, keep, needed, new_start

    centres[0] = first
    for i in prange(n, nogil=True, num_threads=n_workers, schedule="static"):
        dist[i] = _distance(&X[i, 0], &X[first, 0], d)
    for i in range(n):
        pool[i] = i
    start[0] = 0
    count[0] = n
    pool_end = n
    radius[0] = 0.0
    far[0] = first
    for i in range(n):
        if dist[i] > radius[0]:
            radius[0] = dist[i]
            far[0] = i

    k = 1
    while k < max_centers:
        a = 0
        for b in range(1, k):
            if radius[b] > radius[a]:
                a = b
        if radius[a] <= 0.0:
            break
        c = far[a]
        centres[k] = c

        # Each step opens its own parallel regions, once per centre: a step
        # asks the thread policy with 1/64 of its k * d coordinates as its
        # work, so that only steps that pay for the wake-ups run in parallel.
        step_workers = effective_threads(n_threads, (k * d) >> 6)
        for b in prange(k, nogil=True, num_threads=step_workers, schedule="static"):
            to_new[b] = _distance(&X[centres[b], 0], &X[c, 0], d)

        n_cand = 0
        n_cand_clusters = 0
        needed = 0
        for b in range(k):
            if 2.0 * radius[b] <= to_new[b]:
                continue
            cand_clusters[n_cand_clusters] = b
            n_cand_clusters += 1
            needed += count[b]
            half = 0.5 * to_new[b]
            for pos in range(start[b], start[b] + count[b]):
                member = pool[pos]
                if dist[member] > half:
                    cand[n_cand] = member
                    n_cand += 1

        step_workers = effective_threads(n_threads, (n_cand * d) >> 6)
        for t in prange(n_cand, nogil=True, num_threads=step_workers, schedule="static"):
            cand_dist[t] = _sq_distance_below(
                &X[cand[t], 0], &X[c, 0], d, dist[cand[t]] * dist[cand[t]]
            )
        for t in range(n_cand):
            i = cand[t]
            if cand_dist[t] < dist[i] * dist[i]:
                dist[i] = sqrt(cand_dist[t])
                assignment[i] = k

        if pool_end + needed > pool.shape[0]:
            # Pack every run to the front (order kept) to make room.
            pos = 0
            for b in range(k):
                for t in range(count[b]):
                    spare[pos + t] = pool[start[b] + t]
                start[b] = pos
                pos += count[b]
            pool, spare = spare, pool
            pool_end = pos

        # Stable partition of each touched cluster: members that stay move to
        # the front of its run, members that moved are appended to cluster k.
        new_start = pool_end
        radius[k] = 0.0
        far[k] = c
        for t in range(n_cand_clusters):
            b = cand_clusters[t]
            keep = start[b]
            radius[b] = 0.0
            far[b] = centres[b]
            for pos in range(start[b], start[b] + count[b]):
                member = pool[pos]
                if assignment[member] == b:
                    pool[keep] = member
                    keep += 1
                    if dist[member] > radius[b]:
                        radius[b] = dist[member]
                        far[b] = member
                else:
                    pool[pool_end] = member
                    pool_end += 1
                    if dist[member] > radius[k]:
                        radius[k] = dist[member]
                        far[k] = member
            count[b] = keep - start[b]
        start[k] = new_start
        count[k] = pool_end - new_start
        k += 1
        if progress is not None and k % report_every == 0:
            progress(k)

    best = 0.0
    for b in range(k):
        if radius[b] > best:
            best = radius[b]
    return centres_arr[:k].copy(), assignment_arr, dist_arr, best
