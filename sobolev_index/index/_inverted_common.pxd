# Declarations shared by _inverted_build (which writes the inverted file's
# arrays) and _inverted_search (which reads them).

cdef enum:
    # Coarse groups of dense columns per root (see inverted.py): the first,
    # cheapest bound of every row sums over them.
    N_COARSE = 4
    # Posting rows are stored as uint16 offsets within blocks of
    # 2^BLOCK_SHIFT rows.
    BLOCK_SHIFT = 16
    BLOCK_ROWS = 1 << BLOCK_SHIFT


cdef inline double value_max() noexcept nogil:
    """The largest stored value (posting or dense) that can be an edge mass
    of a probability measure: 1, with room for the rounding of a sum."""
    return 1.0 + 1e-6


cdef inline double float32_max() noexcept nogil:
    """The largest float32: group norms above it are held at it (the
    search kernel holds the query's the same way)."""
    return 3.4028234663852886e38
