"""The parts of a write that spans shards: each shard's rows of a batch
(:func:`rows_of`), and what a write that failed in some shards committed
all the same (:func:`settle`).

Each shard commits its part of a batch on its own, so a write can fail in
some shards and be committed in others; it then raises
:class:`~sobolev_index.distributed.ShardedWriteError` listing the keys that
were committed. A part that raised may still have been committed: a Dask
worker that died after the commit, whose task Dask ran again, reports the
rerun's error. So before the error is made, each shard whose part failed
is asked, at its latest commit, which of the part's keys it wrote.
"""
import numpy as np

from ..errors import add_note
from ..measures import MeasureBatch
from .errors import write_error


def rows_of(batch, rows):
    """The measures ``rows`` of a validated batch, as a batch of their own
    (not checked again): the same arrays a single index would store."""
    rows = np.asarray(rows, dtype=np.int64)
    sizes = np.diff(batch.indptr)[rows]
    indptr = np.zeros(len(rows) + 1, dtype=batch.indptr.dtype)
    np.cumsum(sizes, out=indptr[1:])
    starts = np.asarray(batch.indptr)[rows]
    take = np.repeat(starts - indptr[:-1], sizes) + np.arange(int(indptr[-1]))
    return MeasureBatch(indptr=indptr, nodes=batch.nodes[take], masses=batch.masses[take],
                        row_scale=batch.row_scale[rows])


def settle(placement, what, results, parts, keys, check, args_of, paths):
    """The positions in ``keys`` that the shards whose part of a write
    raised wrote all the same; raises ShardedWriteError when a part is not
    written in full.

    ``what`` is the write ("add", "upsert" or "delete"), ``results`` each
    shard's answer ({shard: its result, or the exception its part
    raised}), ``parts`` each shard's positions in ``keys``, and ``paths``
    the shard directories the error names. Each failed shard i is asked,
    through ``placement`` (LocalShards or DaskShards, within a bound of its
    own), ``check(shard, *args_of(i))``: which of its part's keys it wrote.
    A shard that wrote its whole part counts as done (its error came after
    the commit); one that cannot be asked counts as not done, with a note
    on its error saying so, and the error says that its part may have been
    written."""
    failed = {i: exc for i, exc in results.items() if isinstance(exc, Exception)}
    if not failed:
        return set()
    done_word = "deleted" if what == "delete" else "committed"
    asked = "deleted its keys" if what == "delete" else "committed its part"
    done = {j for i, js in parts.items() if i not in failed for j in js}
    checked = placement.map(check, {i: args_of(i) for i in failed}, pinned=True)
    found, unknown = set(), set()
    for i in list(failed):
        answer = checked[i]
        if isinstance(answer, Exception):
            add_note(failed[i], f"(whether shard {i} {asked} could not be checked: "
                                f"{answer!r}; taken as not {done_word})")
            unknown.add(i)
            continue
        answer = set(answer)
        mine = [j for j in parts[i] if keys[j] in answer]
        found.update(mine)
        if len(mine) == len(parts[i]):
            del failed[i]  # done in full: its error came after the commit
    if failed:
        raise write_error(what, [keys[j] for j in sorted(done | found)], failed, len(keys),
                          paths, unknown)
    return found
