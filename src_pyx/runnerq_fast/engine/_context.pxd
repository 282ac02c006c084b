# C-level interface of the compiled activity context, for the compiled worker (``_worker.pyx``).

cdef class ActivityContext:
    cdef public object cancellation, cancel_requested, lease_lost, task
    cdef public object _cancel_sent, _executor, _child_executor, _metadata
    cdef object _activity, _progress, _last_progress


cdef ActivityContext new_context(object activity, object executor, object cancellation, object progress)
