"""``python -m sobolev_index`` runs the command line."""
from ._console import run

if __name__ == "__main__":
    run()
