"""Writer for the concurrency test: add batches and compact for DURATION seconds.

usage: python concurrent_writer.py INDEX START_BATCH DURATION COMPACT_EVERY
(run with the environment of _support.processes.child_env)

stdout: "READY n", then "ACK b n s" after each add (n = live count after it,
s = segments after it: fewer than before means the size tiers merged),
"COMPACTED b" after each compact, "DONE" at the end. With a COMPACT_EVERY
that is never reached and $SOBOLEV_TEST_BATCH_MAX=1, every add is one
document and the only merges are the size tiers'.
"""

import sys
import time

from _support.index import batch_keys, batch_measures
from _support.processes import say


def main():
    path, b, duration, every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    from sobolev_index import SobolevIndex

    with SobolevIndex.open(path, "a", timeout=30) as idx:
        n_nodes = idx.graph.n_nodes
        say(f"READY {len(idx)}")
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            keys = idx.add(batch_measures(b, n_nodes), keys=batch_keys(b))
            assert keys == batch_keys(b)
            say(f"ACK {b} {len(idx)} {len(idx.segments)}")
            b += 1
            if b % every == 0:
                idx.compact()
                say(f"COMPACTED {b}")
    say("DONE")


if __name__ == "__main__":
    main()
