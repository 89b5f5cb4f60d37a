# The one bounded heap of the search kernel. It keeps the k best items
# offered so far with the worst of them at heap[0], so that most offers
# are settled by a single comparison with heap[0].
#
# Items are plain values, values with a tag (a row number), or exact
# results (Found). For values, "worse" means larger; for results, a larger
# value or, on equal values, a larger document id, so that ties go to the
# lower document id. An item no better than heap[0] is not kept.
from libc.stdint cimport int64_t

from .._typedefs cimport float64_t


cdef struct Tagged:
    float64_t value
    int64_t tag


cdef struct Found:
    # One exact result: its value, document id, and where it is stored.
    float64_t value
    int64_t doc
    int64_t segment
    int64_t row


ctypedef fused heap_item:
    float64_t
    Tagged
    Found


cdef inline bint worse(const heap_item* a, const heap_item* b) noexcept nogil:
    """Whether a ranks after b."""
    if heap_item is float64_t:
        return a[0] > b[0]
    elif heap_item is Tagged:
        return a.value > b.value
    else:
        return a.value > b.value or (a.value == b.value and a.doc > b.doc)


cdef inline void heap_offer(heap_item* heap, Py_ssize_t* size, Py_ssize_t k,
                            const heap_item* item) noexcept nogil:
    """Offer ``item`` to the heap of ``size[0]`` items (at most k)."""
    cdef Py_ssize_t i, parent, child
    if size[0] < k:
        i = size[0]
        size[0] += 1
        while i > 0:
            parent = (i - 1) // 2
            if not worse(item, &heap[parent]):
                break
            heap[i] = heap[parent]
            i = parent
        heap[i] = item[0]
        return
    if not worse(&heap[0], item):
        return
    i = 0
    while True:
        child = 2 * i + 1
        if child >= k:
            break
        if child + 1 < k and worse(&heap[child + 1], &heap[child]):
            child += 1
        if not worse(&heap[child], item):
            break
        heap[i] = heap[child]
        i = child
    heap[i] = item[0]
