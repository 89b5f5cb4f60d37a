"""The ``words`` table of a text index: each word's graph node and document
frequency, kept in the index's catalog next to the documents.

The index does not make words; this module adds the table through the
catalog's generic transaction, in the same commit as the meta values that
describe the text settings (the index only reads it, to name the nodes of
an explanation).
"""
from ..index.catalog import WORDS_TABLE
from ..index.storage import utc_now


def read_words(catalog):
    """The word -> (node, df) table of a text index; empty for an index of
    plain measures."""
    if not catalog.has_table(WORDS_TABLE):
        return {}
    rows = catalog.query(f"SELECT word, node, df FROM {WORDS_TABLE}")
    return {word: (node, df) for word, node, df in rows}


def add_words(catalog, rows, meta=None):
    """One transaction: insert (word, node, df) rows that are not there yet,
    and set ``meta`` values. A word keeps the node it got first."""
    now = utc_now()
    with catalog.transaction() as tx:
        tx.execute(
            f"CREATE TABLE IF NOT EXISTS {WORDS_TABLE} (word TEXT PRIMARY KEY, "
            "node INTEGER NOT NULL, df INTEGER NOT NULL DEFAULT 0, added_at TEXT)")
        tx.executemany(
            f"INSERT OR IGNORE INTO {WORDS_TABLE} (word, node, df, added_at) VALUES (?, ?, ?, ?)",
            [(str(w), int(n), int(d), now) for w, n, d in rows])
        if meta:
            tx.set_meta(meta)
