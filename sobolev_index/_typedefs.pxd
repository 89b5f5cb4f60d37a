# Shared C types of the compiled core. Node ids and CSR column indices are
# int32 (graphs have far fewer than 2**31 nodes), CSR offsets are int64 (a
# corpus can have more than 2**31 stored nonzeros), values are float64.
from libc.stdint cimport int32_t, int64_t

ctypedef double float64_t
ctypedef float float32_t
ctypedef int32_t node_t
ctypedef int64_t offset_t
