"""The ``shard`` command: an index split into a sharded one."""
import time

import click

from ._common import (
    _echo_json,
    _json_option,
    _progress,
    _silent_option,
    _table,
)


# ------------------------------------------------------------------- shard
@click.command()
@click.argument("source", type=click.Path())
@click.argument("dest", type=click.Path())
@click.option("--shards", required=True, type=click.IntRange(1), metavar="S",
              help="Number of shards.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1),
              help="Documents copied per committed batch.")
@_silent_option
@_json_option
def shard(source, dest, shards, batch_size, silent, as_json):
    """Split the index SOURCE into a new sharded index DEST of S shards.

    Every shard gets SOURCE's graph file, roots, eta and p, its text
    settings and words table (each shard stays a complete index), and the
    documents whose keys route to it, copied as stored in insertion order:
    searches on DEST give SOURCE's keys and distances. SOURCE is read, not
    changed. DEST is built in a hidden sibling whose name starts with
    .sobolev-split- and renamed into place when complete: a split that
    fails or is killed leaves no index at DEST (a killed one may leave
    that sibling).
    """
    from ..distributed import shard_index

    started = time.perf_counter()
    progress = _progress(silent)
    try:
        report = shard_index(source, dest, shards, batch_size=batch_size, progress=progress)
    finally:
        progress.finish()
    report["seconds"] = round(time.perf_counter() - started, 3)
    if as_json:
        _echo_json(report)
        return
    click.echo(f"split {source} into {report['shards']} shards at {report['path']}: "
               f"{report['documents']:,} documents ({report['seconds']:.1f} s)")
    click.echo(_table(["shard", "documents"],
                      [[i, f"{n:,}"] for i, n in enumerate(report["per_shard"])]))
