"""Child process for the crash-safety test: add deterministic batches forever.

usage: python crash_writer.py INDEX START_BATCH COMPACT_EVERY [MAX_SIZE]
(run with the environment of _support.processes.child_env)

Protocol on stdout (flushed line by line):
    READY                 index opened for writing
    START b               about to add batch b
    ACK b                 add() of batch b returned
    COMPACT b             about to compact (before batch b)
    COMPACTED b           compact() returned
The parent kills this process with SIGKILL at random moments.
"""

import sys

from _support.index import batch_keys, batch_measures
from _support.processes import say


def main():
    path, start, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    max_size = int(sys.argv[4]) if len(sys.argv) > 4 else 24
    from sobolev_index import SobolevIndex

    idx = SobolevIndex.open(path, "a", timeout=30)
    n_nodes = idx.graph.n_nodes
    say("READY")
    b = start
    while True:
        if b % every == 0 and b != start:
            say(f"COMPACT {b}")
            idx.compact()
            say(f"COMPACTED {b}")
        measures = batch_measures(b, n_nodes, max_size=max_size)
        keys = batch_keys(b, max_size=max_size)
        say(f"START {b}")
        got = idx.add(measures, keys=keys)
        assert got == keys, (got, keys)
        say(f"ACK {b}")
        b += 1


if __name__ == "__main__":
    main()
