"""A Dask worker preload: delays the search of every shard by the seconds
written in the file $SOBOLEV_TEST_SHARD_DELAY names, and its write by those
in that file + ".write", while the file exists.

usage: LocalCluster(..., preload=[child_script("delayed_shards.py")],
                    env={SHARD_DELAY_ENV: DELAY_FILE})
(_support.processes.SHARD_DELAY_ENV; the nannies set it in the workers they
start again after a kill too, so a search is as slow as a trial needs there)
"""
import os
import time

from sobolev_index.distributed import shards

DELAY = os.environ["SOBOLEV_TEST_SHARD_DELAY"]


def _delayed(real, path):
    def task(*args, **kwargs):
        try:
            with open(path) as f:
                time.sleep(float(f.read()))
        except (FileNotFoundError, ValueError):
            pass
        return real(*args, **kwargs)
    task.delayed = True
    return task


# Once per process, however often the module is imported. search_in_turn
# (a k-NN search of the shards on one worker) calls search for each shard.
if not getattr(shards.search, "delayed", False):
    shards.search = _delayed(shards.search, DELAY)
    shards.write = _delayed(shards.write, DELAY + ".write")
