# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled claimed-row decoding and batch parameter arrays (twin of ``runnerq_fast._rows_py``).

One C loop per batch fills every column list at once (the reference makes one
list comprehension per column); the struct class is a C global.
"""

from runnerq_fast.models import ClaimedActivity

cdef object _Claimed = ClaimedActivity


def claimed_from_rows(rows, token):
    """Build the activities of one claim from its result rows (see ``runnerq_fast._rows_py``)."""
    cdef list out = []
    for r in rows:
        out.append(_Claimed(r[0].hex, r[1], r[2], r[3], r[4], r[5], r[6], r[7], token, r[8], r[9]))
    return out


def ack_params(acks):
    """Parallel arrays of an ack batch (see ``runnerq_fast._rows_py``)."""
    cdef list ids = [], tokens = [], outcomes = [], results = [], errors = [], retry_at = []
    cdef object res
    acks = list(acks)
    for a in acks:
        ids.append(a.id)
    for a in acks:
        tokens.append(a.claim_token)
    for a in acks:
        outcomes.append(a.outcome)
    for a in acks:
        res = a.result
        results.append(None if res is None else res.decode())
    for a in acks:
        errors.append(a.error)
    for a in acks:
        retry_at.append(a.retry_at_ms)
    return ids, tokens, outcomes, results, errors, retry_at


def lease_params(leases):
    """Parallel arrays of lease references: ids and claim tokens (see ``runnerq_fast._rows_py``)."""
    cdef list ids = [], tokens = []
    for r in leases:
        ids.append(r.id)
        tokens.append(r.claim_token)
    return ids, tokens


def enqueue_params(items):
    """Parallel arrays of an enqueue batch (see ``runnerq_fast._rows_py``)."""
    cdef list ids = [], types = [], payloads = [], prios = [], retries = [], timeouts = []
    cdef list run_at = [], metas = [], keys = []
    items = list(items)
    for it in items:
        ids.append(it.id)
    for it in items:
        types.append(it.activity_type)
    for it in items:
        payloads.append(it.payload.decode())
    for it in items:
        prios.append(it.priority)
    for it in items:
        retries.append(it.max_retries)
    for it in items:
        timeouts.append(it.timeout_ms)
    for it in items:
        run_at.append(it.run_at_ms)
    for it in items:
        metas.append(it.metadata.decode())
    for it in items:
        keys.append(it.idempotency_key)
    return ids, types, payloads, prios, retries, timeouts, run_at, metas, keys
