"""``sobolev-index export``: every live document as JSON lines (being written)."""
