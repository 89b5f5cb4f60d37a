from .._typedefs cimport float64_t
from ._heap cimport Found
from ._search_common cimport Scratch, Search, SegmentView


# A search_unit_t (see _search_common.pxd) for a finite p and no limit
# (k = 0: ``heap`` has no places and ``shared`` is not read).
cdef void radius_unit(const Search* se, const SegmentView* sg, Py_ssize_t segment, Py_ssize_t i,
                      Py_ssize_t row_lo, Py_ssize_t row_hi, Scratch* sc, Found* heap,
                      float64_t* shared) noexcept nogil
