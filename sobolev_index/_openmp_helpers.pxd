# The one place that talks to OpenMP. When the extension is built without
# OpenMP (see setup.py), these fall back to a single thread, and ``prange``
# loops run serially with the same results.
cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    static int sobolev_max_threads(void) { return omp_get_max_threads(); }
    #else
    static int sobolev_max_threads(void) { return 1; }
    #endif
    """
    int sobolev_max_threads() noexcept nogil
