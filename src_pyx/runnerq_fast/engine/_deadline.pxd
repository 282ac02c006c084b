# C-level interface of the compiled handler timeouts, for the compiled worker (``_worker.pyx``).

cdef class _Entry:
    cdef object task
    cdef bint fired
    cdef set entries


cdef class Deadlines:
    cdef object _loop
    cdef double _min_res
    cdef dict _slots
    cdef object _fire_cb

    cdef _Entry enter(self, object task, double timeout)
