"""Small parsing helpers shared by the readers of every input kind (word
vector files, diagram files); they know nothing of indexes."""

__all__ = ["is_number"]


def is_number(text):
    """Whether ``float(text)`` reads ``text`` (a header field, a vector
    value)."""
    try:
        float(text)
    except ValueError:
        return False
    return True
