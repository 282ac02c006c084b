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
    # the slot the last call joined (its width, number and entries; entries None once it fired)
    cdef double _last_res
    cdef long long _last_slot
    cdef set _last_entries
    cdef object _time  # the loop's bound ``time`` method

    cdef set _slot_entries(self, double res, long long slot)
    cdef _Entry enter(self, object task, double timeout)
