# The one place that talks to OpenMP. When the extension is built without
# OpenMP (see setup.py), these fall back to a single thread, and ``prange``
# loops run serially with the same results.
cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    static int sobolev_max_threads(void) { return omp_get_max_threads(); }
    static int sobolev_thread_num(void) { return omp_get_thread_num(); }
    static const int SOBOLEV_HAVE_OPENMP = 1;
    #else
    static int sobolev_max_threads(void) { return 1; }
    static int sobolev_thread_num(void) { return 0; }
    static const int SOBOLEV_HAVE_OPENMP = 0;
    #endif
    """
    int sobolev_max_threads() noexcept nogil
    int sobolev_thread_num() noexcept nogil
    const int SOBOLEV_HAVE_OPENMP
