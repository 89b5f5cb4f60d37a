"""Hold an index's writer lock in another process.

usage: python hold_writer.py INDEX SECONDS
(run with the environment of _support.processes.child_env)
Prints "READY" once the index is open for writing, holds it for SECONDS (or until
stdin is closed when SECONDS < 0), closes it and prints "RELEASED".
"""

import sys
import time


def main():
    path, seconds = sys.argv[1], float(sys.argv[2])
    from sobolev_index import SobolevIndex

    idx = SobolevIndex.open(path, "a")
    print("READY", flush=True)
    if seconds < 0:
        sys.stdin.read()
    else:
        time.sleep(seconds)
    idx.close()
    print("RELEASED", flush=True)


if __name__ == "__main__":
    main()
