"""Turning raw data into measures and indexes: text (tokens, word vectors,
corpora, documents), point sets and persistence diagrams, and the quickstart.

This layer sits above ``sobolev_index.index`` and the core. The text
pipeline (``text``, ``embeddings``, ``words``, ``documents``, and the
quickstart's ``stdlib_corpus`` and ``quickstart``) and the point pipeline
(``pointsets``, ``pointindex``) do not import each other; both use ``fill``
for what they share (the index's kind, creating and filling an index in
batches). ``pipelines`` sits above both and picks one by the input or the
index's kind, so that callers such as the command line need not.
"""

# The modules whose ``__all__`` is the public Python API of this layer: the
# API reference documents them, and tests/test_docstrings.py holds their
# docstrings to the numpydoc form. The others (``fill``, ``inputs``,
# ``parsing``, ``words``, ``corpus``, ``recipes``, ``stdlib_corpus``) are
# shared plumbing of the command line and the pipelines.
PUBLIC_MODULES = ("documents", "embeddings", "learn", "text", "pointsets", "pointindex",
                  "pipelines", "export", "quickstart")
