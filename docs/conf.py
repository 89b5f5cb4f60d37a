"""Sphinx configuration of the sobolev-index documentation site.

Build it from the repository's root, with warnings as errors:

    pip install ".[docs]"
    sphinx-build -W -b html docs docs/_build/html

The Markdown pages of docs/ are read by MyST as they are, so that they read
the same on GitHub; getting-started.md and index.md include the README's
own sections. The API reference comes from the docstrings (autodoc and
numpydoc), the CLI reference from the click commands (sphinx-click). The
package is imported as installed (its compiled modules are not in the
source tree until it is built), so nothing is added to sys.path.
"""
import importlib
import os
import re

from sphinx.util import logging

from sobolev_index import __version__

project = "sobolev-index"
author = "the sobolev-index authors"
copyright = "the sobolev-index authors"
version = __version__
release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_click",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
# `text` in docstrings and click help is code, and a link where it names
# an object of the API.
default_role = "py:obj"

# MyST: the pages link to one another's sections as GitHub does
# (cli.md#real-word-vectors), so headings down to ### get GitHub's anchors;
# the concepts page writes its formulas as $...$ and $$...$$.
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

# autodoc and numpydoc. The reference pages name the members they show
# (:members:), so numpydoc makes no autosummary table of them (which would
# want a stub page per method).
autodoc_member_order = "bysource"
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

# Curly quotes and ellipses, but no dashes: "--skip-existing" in the click
# help texts and the pages is an option, not an en dash and a word.
smartquotes_action = "qe"

html_theme = "furo"
html_title = f"sobolev-index {release}"

# No warning is suppressed (suppress_warnings is left empty).


def _check_reference_pages(app):
    """Warn (an error under -W) when the API reference pages miss a public
    name: every name of ``sobolev_index.__all__`` on reference/api.md, and
    for every module of ``sobolev_index.ingest.PUBLIC_MODULES`` an
    automodule on reference/ingest.md, with each constant of its
    ``__all__`` (which autodoc would skip: it has no docstring) given an
    autodata of its own."""
    import sobolev_index
    from sobolev_index import ingest

    log = logging.getLogger(__name__)
    here = os.path.join(app.srcdir, "reference")
    with open(os.path.join(here, "api.md"), encoding="utf-8") as f:
        api = f.read()
    documented = set(re.findall(r"^\.\. (?:auto\w+|py:data):: (\w+)", api, re.M))
    for name in sobolev_index.__all__:
        if name not in documented and name != "__version__":
            log.warning(f"reference/api.md does not document sobolev_index.{name}")
    with open(os.path.join(here, "ingest.md"), encoding="utf-8") as f:
        page = f.read()
    for module_name in ingest.PUBLIC_MODULES:
        path = f"sobolev_index.ingest.{module_name}"
        part = page.partition(f".. automodule:: {path}\n")[2].partition("```")[0]
        if not part:
            log.warning(f"reference/ingest.md has no automodule for {path}")
            continue
        module = importlib.import_module(path)
        data = set(re.findall(r"^\.\. autodata:: (\w+)", part, re.M))
        for name in module.__all__:
            value = getattr(module, name)
            if not (callable(value) or name in data):
                log.warning(f"reference/ingest.md has no autodata for {path}.{name}")


def setup(app):
    app.connect("builder-inited", _check_reference_pages)
