"""Turning raw data into measures and indexes: text (tokens, word vectors,
corpora, documents), point sets and persistence diagrams, and the quickstart.

This layer sits above ``sobolev_index.index`` and the core; the text and
point pipelines do not import each other, and share ``fill`` for creating and
filling an index in batches.
"""
