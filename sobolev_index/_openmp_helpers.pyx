"""The one thread policy of the compiled loops.

Every parallel loop asks :func:`effective_threads` how many threads to use.
Below the serial threshold a parallel region costs more than it saves (waking
a thread is slow, and very slow on a busy machine), so small inputs run on one
thread. Results never depend on the thread count; tests lower the threshold
with :func:`set_serial_threshold` so that small inputs take the parallel path.
"""

# Units of work (roughly: stored values touched) below which a loop is serial.
cdef Py_ssize_t _serial_below = 1 << 14


def effective_threads(n_threads=None, work=None):
    """Threads a parallel loop will use (at least 1).

    ``n_threads`` None or <= 0 means every thread OpenMP offers; larger
    requests are capped there. ``work``, when given and below the serial
    threshold, makes the loop serial.
    """
    if work is not None and work < _serial_below:
        return 1
    cdef int available = sobolev_max_threads()
    if n_threads is None or n_threads <= 0:
        return max(1, available)
    return max(1, min(int(n_threads), available))


def set_serial_threshold(value):
    """Set the serial threshold (a non-negative integer); returns the old one."""
    global _serial_below
    if int(value) != value or value < 0:
        raise ValueError(f"serial threshold must be a non-negative integer, got {value!r}")
    old = _serial_below
    _serial_below = int(value)
    return old
