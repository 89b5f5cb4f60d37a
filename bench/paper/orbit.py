"""The Orbit data set of the paper's TDA experiment (Section 5.2.1, "Orbit Recognition").

The paper (Le et al., AISTATS 2022) takes the synthesised data set of Adams et
al. (2017, "Persistence images"), following Le & Yamada (2018): 5 classes of
orbits of the linked twist map, 1000 orbits per class, 1000 points per orbit,
and the persistence diagram of the 1-dimensional features of the
Vietoris-Rips filtration. The paper itself gives neither the map nor the
parameters; they are those of Adams et al. (Section 6.4.1 there):

    x_{n+1} = x_n + r y_n (1 - y_n)        mod 1
    y_{n+1} = y_n + r x_{n+1} (1 - x_{n+1})  mod 1

from a uniformly random (x_0, y_0) in [0, 1]^2, with r in
{2.5, 3.5, 4.0, 4.1, 4.3}. The orbit is used as a point cloud in the unit
square with plain Euclidean distances (no torus metric: neither paper
mentions one), and H1 is computed with ``ripser`` (maxdim=1).

Orbit j of class c is drawn from ``SeedSequence(seed, spawn_key=(c, j))``, so a
data set with fewer orbits per class is a prefix (per class) of a larger one
with the same seed, and the result does not depend on ``n_jobs``.

``ripser`` is an optional dependency of the paper experiments only
(``pip install ripser``).
"""
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

R_VALUES = (2.5, 3.5, 4.0, 4.1, 4.3)
CACHE_FORMAT = 1


def class_label(r):
    """Class name of the orbits with parameter r: 'r=2.5', 'r=4.0', ..."""
    return f"r={float(r)}"


def linked_twist_orbit(r, n_points=1000, rng=None):
    """One orbit of the linked twist map: an (n_points, 2) float64 array.

    The first row is the random start (x_0, y_0), uniform in [0, 1)^2; each
    next row applies the map above once. ``rng`` is a numpy Generator, a seed
    or None.
    """
    n_points = int(n_points)
    if n_points < 1:
        raise ValueError(f"n_points is {n_points}; expected >= 1")
    rng = np.random.default_rng(rng)
    x, y = (float(v) for v in rng.random(2))
    r = float(r)
    out = np.empty((n_points, 2), dtype=np.float64)
    out[0] = x, y
    for n in range(1, n_points):
        x = (x + r * y * (1.0 - y)) % 1.0
        y = (y + r * x * (1.0 - x)) % 1.0
        out[n] = x, y
    return out


def h1_diagram(points):
    """H1 (birth, death) pairs of the Euclidean Vietoris-Rips filtration of points.

    A (k, 2) float64 array; pairs with an infinite death are dropped.
    """
    from ripser import ripser

    dgm = np.asarray(ripser(points, maxdim=1)["dgms"][1], dtype=np.float64).reshape(-1, 2)
    return np.ascontiguousarray(dgm[np.isfinite(dgm[:, 1])])


def _orbit_job(job):
    class_no, orbit_no, seed, n_points = job
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(class_no, orbit_no)))
    return h1_diagram(linked_twist_orbit(R_VALUES[class_no], n_points, rng))


def _cache_path(cache_dir, n_per_class, n_points, seed):
    return Path(cache_dir) / f"orbit_h1_n{n_per_class}_p{n_points}_s{seed}.npz"


def _save(path, diagrams, labels, seconds, n_points, seed):
    sizes = np.array([len(d) for d in diagrams], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    points = np.concatenate(diagrams) if diagrams else np.empty((0, 2))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, points=points.astype(np.float64).reshape(-1, 2), offsets=offsets,
             labels=np.array(labels, dtype=str), r_values=np.array(R_VALUES),
             seconds=np.float64(seconds), n_points=np.int64(n_points), seed=np.int64(seed),
             format=np.int64(CACHE_FORMAT))
    os.replace(tmp, path)


def _load(path, n_per_class):
    with np.load(path, allow_pickle=False) as f:
        if int(f["format"]) != CACHE_FORMAT or tuple(f["r_values"]) != R_VALUES:
            return None
        points, offsets = f["points"], f["offsets"]
        labels = [str(s) for s in f["labels"]]
        seconds = float(f["seconds"])
    if len(labels) != n_per_class * len(R_VALUES) or len(offsets) != len(labels) + 1:
        return None
    diagrams = [np.ascontiguousarray(points[offsets[i]:offsets[i + 1]]) for i in range(len(labels))]
    return diagrams, labels, seconds


def orbit_diagrams(n_per_class=100, n_points=1000, seed=0, cache_dir=None, n_jobs=2, progress=None):
    """H1 persistence diagrams of the Orbit data set.

    Parameters
    ----------
    n_per_class : int
        Orbits per class (the paper: 1000).
    n_points : int
        Points per orbit (the paper: 1000).
    seed : int
        Root seed; orbit j of class c uses SeedSequence(seed, spawn_key=(c, j)).
    cache_dir : str or Path or None
        If given, the result is read from / written to one .npz there, keyed
        by (n_per_class, n_points, seed).
    n_jobs : int
        Worker processes for ripser (1 = in this process).
    progress : callable or None
        Called as progress(done, total) after each diagram.

    Returns
    -------
    dict with
        ``diagrams``: list of (k_i, 2) float64 (birth, death) arrays, class-major
        (all of r=2.5 first, then r=3.5, ...);
        ``labels``: list of str such as "r=2.5", one per diagram;
        ``seconds``: wall time of this call;
        ``compute_seconds``: wall time of computing the diagrams (from the
        cache file when cached);
        ``cached``: whether the diagrams came from the cache.
    """
    started = time.perf_counter()
    n_per_class, n_points, seed, n_jobs = int(n_per_class), int(n_points), int(seed), int(n_jobs)
    if n_per_class < 1 or n_points < 1 or n_jobs < 1:
        raise ValueError("n_per_class, n_points and n_jobs must be >= 1")
    path = _cache_path(cache_dir, n_per_class, n_points, seed) if cache_dir is not None else None
    if path is not None and path.exists():
        loaded = _load(path, n_per_class)
        if loaded is not None:
            diagrams, labels, compute_seconds = loaded
            return dict(diagrams=diagrams, labels=labels, seconds=time.perf_counter() - started,
                        compute_seconds=compute_seconds, cached=True)

    import ripser  # noqa: F401  (fail early if missing; forked workers inherit the ~1 s import)

    jobs = [(c, j, seed, n_points) for c in range(len(R_VALUES)) for j in range(n_per_class)]
    labels = [class_label(R_VALUES[c]) for c, _, _, _ in jobs]
    total = len(jobs)
    diagrams = []
    if n_jobs == 1:
        for job in jobs:
            diagrams.append(_orbit_job(job))
            if progress is not None:
                progress(len(diagrams), total)
    else:
        chunksize = max(1, min(8, total // (4 * n_jobs)))
        with multiprocessing.get_context().Pool(n_jobs) as pool:
            for dgm in pool.imap(_orbit_job, jobs, chunksize=chunksize):
                diagrams.append(dgm)
                if progress is not None:
                    progress(len(diagrams), total)
    compute_seconds = time.perf_counter() - started
    if path is not None:
        _save(path, diagrams, labels, compute_seconds, n_points, seed)
    return dict(diagrams=diagrams, labels=labels, seconds=time.perf_counter() - started,
                compute_seconds=compute_seconds, cached=False)


def to_pointsets(diagrams, labels, prefix="orbit"):
    """The diagrams as sobolev_index PointSets (uniform weights), keys prefix-i.

    An empty diagram cannot be a measure; it raises ValueError (not seen in
    practice: every orbit has H1 points).
    """
    from sobolev_index.ingest.pointsets import PointSet

    return [PointSet(key=f"{prefix}-{i}", points=d, label=lab)
            for i, (d, lab) in enumerate(zip(diagrams, labels))]


if __name__ == "__main__":
    n_per_class = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    n_points = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    n_jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    result = orbit_diagrams(n_per_class=n_per_class, n_points=n_points, seed=0, n_jobs=n_jobs)
    diagrams, labels = result["diagrams"], result["labels"]
    n = len(diagrams)
    print(f"{n} diagrams ({n_per_class} per class x {len(R_VALUES)} classes, {n_points} points per orbit, "
          f"{n_jobs} processes): {result['seconds']:.2f} s, "
          f"{result['seconds'] / n * n_jobs:.3f} s per diagram per process")
    for r in R_VALUES:
        sizes = [len(d) for d, lab in zip(diagrams, labels) if lab == class_label(r)]
        print(f"  {class_label(r):6s} H1 points per diagram: median {np.median(sizes):.0f}, "
              f"min {min(sizes)}, max {max(sizes)}")
