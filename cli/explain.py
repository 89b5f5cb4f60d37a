"""``sobolev-index explain``: which subtrees carry a distance (being written)."""
