"""Which edges of the tree carry a distance: :meth:`SobolevIndex.explain`."""

__all__ = ["ExplainMixin"]


class ExplainMixin:
    """The explanation side of :class:`SobolevIndex` (being written)."""
