"""Where the real data sets are: ``$SOBOLEV_INDEX_DATA`` when it is set,
otherwise ``../shared/data`` beside the repository (as on CI). Tests that
need a file skip, naming the place they looked, when it is not there."""
import os
from pathlib import Path

from . import REPO_DIR

DATA_ENV = "SOBOLEV_INDEX_DATA"


def data_dir():
    """The directory that holds the real data sets (it may not exist)."""
    configured = os.environ.get(DATA_ENV)
    if configured:
        return Path(configured)
    return Path(REPO_DIR).parent / "shared" / "data"


def missing_reason(path):
    """A skip reason for a data file that is not at ``path``."""
    return (f"{path} not found: the real data sets live in ../shared/data beside the "
            f"repository, or set {DATA_ENV} to their directory")
