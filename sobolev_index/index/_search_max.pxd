from .._typedefs cimport float64_t
from ._heap cimport Found
from ._search_common cimport Scratch, Search, SegmentView


# A search_unit_t (see _search_common.pxd) for p = inf, k-NN or radius.
cdef void max_unit(const Search* se, const SegmentView* sg, Py_ssize_t segment, Py_ssize_t i,
                   Py_ssize_t row_lo, Py_ssize_t row_hi, Scratch* sc, Found* heap,
                   float64_t* shared) noexcept nogil
