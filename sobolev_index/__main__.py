"""``python -m sobolev_index`` runs the command line."""
from .cli import main

if __name__ == "__main__":
    main(prog_name="sobolev-index")
