# |x|^p with the two common exponents special-cased, shared by the search
# kernels. ``kind`` is 0 for p = 1, 1 for p = 2, 2 for any other finite p
# (``_search`` also uses 3 for p = inf, where this is never called).
from libc.math cimport fabs, pow

from ._typedefs cimport float64_t


cdef inline float64_t abs_pow(float64_t x, float64_t p, int kind) noexcept nogil:
    if kind == 0:
        return fabs(x)
    if kind == 1:
        return x * x
    return pow(fabs(x), p)
