# Powers shared by the compiled loops, with the two common exponents
# special-cased. ``kind`` (from power_kind) is 0 for p = 1, 1 for p = 2,
# 3 for p = inf and 2 for any other p; abs_pow and pth_root serve finite p
# only (kinds 0 to 2).
from libc.math cimport fabs, isinf, pow, sqrt

from ._typedefs cimport float64_t


cdef inline int power_kind(float64_t p) noexcept nogil:
    """Which special case serves p: 0 for p = 1, 1 for p = 2, 3 for inf, 2 otherwise."""
    if isinf(p):
        return 3
    if p == 1.0:
        return 0
    if p == 2.0:
        return 1
    return 2


cdef inline float64_t abs_pow(float64_t x, float64_t p, int kind) noexcept nogil:
    """|x|^p."""
    if kind == 0:
        return fabs(x)
    if kind == 1:
        return x * x
    return pow(fabs(x), p)


cdef inline float64_t pth_root(float64_t x, float64_t p, int kind) noexcept nogil:
    """x^(1/p) for x >= 0."""
    if kind == 0:
        return x
    if kind == 1:
        return sqrt(x)
    return pow(x, 1.0 / p)
