"""Child process for the killed-split test: split an index, then wait to be
killed part-way.

usage: python killed_split.py SOURCE DEST SHARDS BATCH_SIZE
(run with the environment of _support.processes.child_env)

Protocol on stdout (flushed line by line):
    COPIED n              n documents are copied (committed in the shards)
After the first batch the child stops inside the progress callback, with
the split incomplete, until the parent kills it with SIGKILL.
"""

import sys
import time

from _support.processes import say


def main():
    source, dest, shards, batch_size = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4])
    from sobolev_index.distributed import shard_index

    def progress(stage, done, total):
        say(f"COPIED {done}")
        if done > 0:
            time.sleep(600)  # the parent kills us here, mid-split

    shard_index(source, dest, shards, batch_size=batch_size, progress=progress)
    say("DONE")


if __name__ == "__main__":
    main()
