"""Distance (Gram) matrices of a sharded index as a ``dask.array``, for
matrices too large for one machine's memory.

The documents are cut into chunks of rows. One task per chunk reads the
chunk's stored features from the shards, opened read-only by path inside
the task (so the task can run, and run again, on any worker); one task per
block of the matrix computes S_p between two chunks with
:func:`sobolev_index.distances.sliced_pairwise`. A diagonal block is the
chunk with itself (exactly symmetric, zero diagonal) and the block below the
diagonal is the transpose of the one above, so the whole matrix is exactly
symmetric, as :func:`pairwise_sobolev` of all the documents is. Write it
with ``to_zarr``, which needs no lock between processes.
"""
import functools
import math
import os

import numpy as np

from ..distances import check_p, sliced_pairwise, sobolev_kernel
from ..errors import KeyNotFoundError
from ..graph import normalise_eta
from ..index import SobolevIndex, storage
from ..index.arguments import check_positive, check_str_keys, root_positions
from .manifest import route


@functools.lru_cache(maxsize=4)
def _trees(graph_dir, n_roots):
    """The shortest-path trees stored in ``graph_dir/graph.h5`` (read once
    per process)."""
    return storage.read_graph(graph_dir, n_roots)[1]


def feature_chunk(shard_paths, keys, positions):
    """Per root position, the stored features of ``keys`` (CSR, rows in the
    order of ``keys``), read from the shards that hold them."""
    import scipy.sparse as sp

    shards = len(shard_paths)
    parts = {}
    for j, key in enumerate(keys):
        parts.setdefault(route(key, shards), []).append(j)
    out = []
    pieces = {r: [] for r in positions}
    order = []
    for i, rows in sorted(parts.items()):
        with SobolevIndex.open(shard_paths[i], mode="r") as shard:
            for r in positions:
                pieces[r].append(shard.features([keys[j] for j in rows], root=r))
        order.extend(rows)
    back = np.argsort(np.asarray(order, dtype=np.int64), kind="stable")
    for r in positions:
        stacked = sp.vstack(pieces[r], format="csr")[back]
        stacked.sort_indices()
        out.append(stacked)
    return out


def block(FX, FY, graph_dir, n_roots, positions, p, eta, t, power):
    """S_p (or the kernel, with ``t``) between two chunks' features; ``FY``
    None: the chunk with itself."""
    trees = [_trees(graph_dir, n_roots)[r] for r in positions]
    if t is None:
        return sliced_pairwise(FX, FY, trees, p, eta, None, power=power)
    return sobolev_kernel(FX, FY, trees, p=p, t=t, power=power, eta=eta)


def _transposed(matrix):
    return np.ascontiguousarray(matrix.T)


def distance_array(shard_paths, keys, n_roots, positions, p, eta, t, power, chunk):
    """The (len(keys) x len(keys)) matrix as a dask.array of float64 blocks
    of ``chunk`` x ``chunk``."""
    import dask
    import dask.array as da

    starts = list(range(0, len(keys), chunk))
    features = [dask.delayed(feature_chunk, pure=True)(shard_paths, keys[a:a + chunk], positions)
                for a in starts]
    sizes = [min(chunk, len(keys) - a) for a in starts]
    graph_dir = shard_paths[0]
    compute = dask.delayed(block, pure=True)
    rows = []
    upper = {}
    for x, FX in enumerate(features):
        row = []
        for y, FY in enumerate(features):
            shape = (sizes[x], sizes[y])
            if x == y:
                value = compute(FX, None, graph_dir, n_roots, positions, p, eta, t, power)
            elif x < y:
                value = upper[x, y] = compute(FX, FY, graph_dir, n_roots, positions, p, eta, t,
                                              power)
            else:
                value = dask.delayed(_transposed, pure=True)(upper[y, x])
            row.append(da.from_delayed(value, shape=shape, dtype=np.float64))
        rows.append(row)
    return da.block(rows)


def distance_matrix(index, keys, p, roots, t, power, chunk):
    """:meth:`ShardedIndex.distance_matrix` of the open ``index``: the
    arguments checked as a single index checks them, then the lazy array."""
    check_positive("chunk", chunk)
    p = index.p if p is None else check_p(p)
    if power and math.isinf(p):
        raise ValueError("power=True needs a finite p; S_inf has no p-th power")
    positions = root_positions(roots, len(index.roots))
    eta = normalise_eta(index.eta[positions], len(positions))
    if keys is None:
        keys = index.keys_in_order()
    else:
        keys = [keys] if isinstance(keys, str) else list(keys)
        check_str_keys(keys)
        live = index.existing_keys(keys)
        missing = [key for key in keys if key not in live]
        if missing:
            raise KeyNotFoundError(f"{len(missing)} key(s) are not in the index, e.g. "
                                   f"{missing[0]!r}")
    if not keys:
        raise ValueError("no documents were chosen: the index is empty, or keys is empty")
    array = distance_array(index.shard_paths, keys, len(index.roots), positions, p, eta, t,
                           bool(power), int(chunk))
    return array, keys


def write_distance_matrix(index, path, keys, p, roots, t, power, chunk):
    """:meth:`ShardedIndex.write_distance_matrix` of ``index``."""
    import dask
    import zarr

    if os.path.exists(path):
        raise FileExistsError(f"{path} exists; choose a new path for the matrix")
    array, keys = index.distance_matrix(keys, p=p, roots=roots, t=t, power=power,
                                       chunk=chunk)
    stored = array.to_zarr(os.fspath(path), compute=False)
    if index.client is not None:
        index.client.compute(stored).result()
    else:
        dask.compute(stored)
    out = zarr.open_array(os.fspath(path), mode="r+")
    p = index.p if p is None else check_p(p)
    out.attrs.update({"keys": keys, "p": "inf" if math.isinf(p) else p,
                      "roots": root_positions(roots, len(index.roots)), "t": t, "power": bool(power)})
    return {"path": os.path.abspath(path), "shape": list(array.shape),
            "chunks": [int(chunk), int(chunk)]}
