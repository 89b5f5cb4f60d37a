"""The ``sobolev-index`` console script.

The command line is imported here, inside the handler: a Ctrl-C while
Click, NumPy or h5py load then ends like a Ctrl-C anywhere else in a
command, with ``Aborted!`` and exit status 130, not a traceback. Importing
this module imports nothing heavy (the package's names load lazily).
"""
import sys


def run():
    try:
        from .cli import main

        main(prog_name="sobolev-index")
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted!\n")
        sys.exit(130)
