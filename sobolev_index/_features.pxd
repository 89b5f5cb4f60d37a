# The feature map's row routine, shared with the search kernel, which
# rebuilds candidate rows from their stored measures with it: the same
# arithmetic as when they were added, so the same values to the bit.
from ._typedefs cimport float64_t, node_t, offset_t


cdef offset_t touch_row(
    const node_t* parent, node_t root,
    const node_t* nodes, const float64_t* masses, float64_t scale,
    offset_t start, offset_t end,
    offset_t* stamp, offset_t row_stamp, float64_t* acc, node_t* touched,
) noexcept nogil
