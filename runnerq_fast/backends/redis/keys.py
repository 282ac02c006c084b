"""Every Redis key and channel name of the Redis backend, in one place.

Every name starts with a namespace, ``rq`` unless the backend is opened with
another (tests use a fresh one per test; several applications can share a
server). Below, ``rq`` stands for the namespace.

All keys of one queue share the hash tag ``{<queue>}``, so a queue lives in one
Redis Cluster slot and every Lua script touches one slot only. ``<queue>`` is
the queue name with ``%``, ``{`` and ``}`` escaped as ``%25``, ``%7B`` and
``%7D`` (:func:`tag`; a name without them is its own tag): the first ``}`` of
a key always ends the tag, so distinct queues never share a key or split
over slots, and whatever follows the prefix (activity types, idempotency keys,
ids) is a suffix that cannot reach into another queue's keys. The scripts get
the prefix as ``KEYS[1]`` and build the per-activity names from it; their
headers (``lua/*.lua``) name every key they touch.

=============================  ======  ==================================================
key (``P = rq:{<queue>}:``)    type    contents
=============================  ======  ==================================================
``P a:<id>``                   HASH    one activity and its events (fields in ``lua/_common.lua``)
``P ready:<type>``             ZSET    ready activities of one type, score = ready score
``P susp:<type>``              ZSET    ready suspect activities of one type (claimed only one at a
                                      time), score = ready score
``P types``                    SET     types that ever had a ready set
``P sched``                    ZSET    not-yet-due activities, score = ready time (ms)
``P lease``                    ZSET    processing activities, score = lease deadline (ms)
``P st:<status>``              ZSET    activities per status but processing (that is ``P lease``): member
                                      ``<created ms, 15 digits>:<id>``, score 0, so in
                                      ``(created, id)`` order (``ZRANGE BYLEX``)
``P ty:<type>``                ZSET    every activity of one type, same members and order
``P kids:<parent id>``         ZSET    the activities one activity enqueued (``parent_id``), same
``P counts``                   HASH    ``<status>\\x1f<type>`` -> number of activities
``P fin``                      ZSET    finished activities the reaper removes (completed, failed, cancelled),
                                      score = finish time + result ttl (ms): one member ``b<n>`` per
                                      script run and expiry (a member written before these batches: one id)
``P finb:b<n>``                STRING  one batch of ``P fin``: ``<finish ms>\\x1f<id>,<id>,...``
``P finseq``                   STRING  the last batch number ``n``; when lost, the next batch follows
                                      the highest of ``P fin``
``P dead``                     ZSET    dead-lettered ids, score = dead-letter time (ms)
``P events``                   STREAM  live events, one entry per script run (capped, ~10,000)
``P evseq``                    STRING  last event id of the queue (ids count 1, 2, ...); when lost, the
                                      next script reads the stream's last id instead, or, with the
                                      stream lost too, starts at the clock in microseconds
``P wake``                     LIST    wake tokens for fetchers of every type blocked in ``BLPOP``
``P wake:<type>``              LIST    wake tokens for fetchers of ``<type>`` blocked in ``BLPOP``
``P hold:<purpose>``           STRING  holder of a named hold (``hold``), expiring by ``PX``
``P idem:<n>:<type>:<key>``    STRING  id holding an idempotency key (``<n>`` = bytes in type); once the
                                      reaper removed the holder, ``<id>\\x1f<final status>``
                                      until the key's own ttl (``idempotency_ttl``); prune and delete
                                      release it
``P done``                     PUBSUB  comma-separated ids that reached a terminal status
``P workers``                  HASH    worker registry: worker id -> its ``WorkerInfo`` (JSON)
``P workers:exp``              ZSET    worker ids, score = when the entry expires (ms, server clock)
``P typedefs``                 HASH    per-type enqueue defaults: activity type -> its ``TypeDefaults`` (JSON)
``rq:queues``                  SET     every queue name seen (outside any hash tag)
``rq:wqueues``                 SET     every queue that had a registry entry (outside any hash tag)
=============================  ======  ==================================================

The ``st:``, ``ty:``, ``kids:`` and ``counts`` entries change in the same script
call as the status they index (``rq_move`` in ``lua/_common.lua``), so they
never drift. Finished activities do not expire by themselves: the reaper
removes completed, failed and cancelled ones (hash, index entries, counts,
idempotency key) once their ``result_ttl`` passed, and a prune
(``lua/prune.lua``) removes finished ones older than a retention, dead letters too.

A lost key (evicted under ``allkeys-lru``, deleted) stops nothing: the event and
batch counters are derived again, and each reaper pass compares a few counts
(the type, status and ready indexes, ``counts``, ``dead``, ``types``) and rebuilds
the index that disagrees from the others (``rq_repair`` in ``lua/reaper.lua``).
"""

from __future__ import annotations

import re

__all__ = [
    "DEFAULT_NAMESPACE",
    "QUEUE_KEYS",
    "SHARED_KEYS",
    "STATUSES",
    "activity",
    "children",
    "count_key",
    "counts",
    "dead_letter",
    "done_channel",
    "done_pattern",
    "lease",
    "prefix",
    "queue_of_channel",
    "queues",
    "sched",
    "status_set",
    "stream",
    "suspects",
    "tag",
    "type_set",
    "types",
    "untag",
    "wake",
    "wake_of_type",
    "worker_queues",
]

QUEUE_KEYS = (
    ("a:<id>", "hash"),
    ("ready:<type>", "zset"),
    ("susp:<type>", "zset"),
    ("types", "set"),
    ("sched", "zset"),
    ("lease", "zset"),
    ("st:<status>", "zset"),
    ("ty:<type>", "zset"),
    ("kids:<parent id>", "zset"),
    ("counts", "hash"),
    ("fin", "zset"),
    ("finb:b<n>", "string"),
    ("finseq", "string"),
    ("dead", "zset"),
    ("events", "stream"),
    ("evseq", "string"),
    ("wake", "list"),
    ("wake:<type>", "list"),
    ("hold:<purpose>", "string"),
    ("idem:<n>:<type>:<key>", "string"),
    ("workers", "hash"),
    ("workers:exp", "zset"),
    ("typedefs", "hash"),
)
"""Every key of one queue, as ``(name after the prefix P, Redis type)``, in the order of the table above.

A part in angle brackets stands for any text (a name without one is a single key).
The tests delete each in turn from a queue with work in every status, and check
that every key a queue writes is one of these.
"""

SHARED_KEYS = (("queues", "set"), ("wqueues", "set"))
"""The keys outside any hash tag, as ``(name after "<namespace>:", Redis type)``."""

DEFAULT_NAMESPACE = "rq"
"""Namespace of every key unless the backend is opened with another."""

_ESCAPED = re.compile("%25|%7B|%7D")
_UNESCAPE = {"%25": "%", "%7B": "{", "%7D": "}"}

STATUSES = ("pending", "scheduled", "processing", "retrying", "completed", "failed", "dead_letter", "cancelled")


def tag(queue: str) -> str:
    """The hash tag of ``queue``: its name with ``%``, ``{`` and ``}`` escaped (``%25``, ``%7B``, ``%7D``).

    Injective, and the result holds no brace, so the tag is exactly what
    stands between the braces of every key of the queue.
    """
    if "%" not in queue and "{" not in queue and "}" not in queue:
        return queue
    return queue.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def untag(text: str) -> str:
    """Inverse of :func:`tag`."""
    if "%" not in text:
        return text
    return _ESCAPED.sub(lambda m: _UNESCAPE[m.group(0)], text)


def prefix(ns: str, queue: str) -> str:
    """``rq:{<queue>}:``, the prefix of every key of ``queue`` (passed as ``KEYS[1]``)."""
    return f"{ns}:{{{tag(queue)}}}:"


def activity(ns: str, queue: str, activity_id: str) -> str:
    """HASH of one activity."""
    return prefix(ns, queue) + "a:" + activity_id


def status_set(ns: str, queue: str, status: str) -> str:
    """ZSET of the activities in ``status``, in ``(created, id)`` order (lex members, score 0).

    ``processing`` has none (the name is only passed to ``lua/query.lua``, which
    reads :func:`lease` instead): see :func:`count_key`.
    """
    return f"{prefix(ns, queue)}st:{status}"


def lease(ns: str, queue: str) -> str:
    """ZSET of the processing ids, scored by lease deadline (ms)."""
    return prefix(ns, queue) + "lease"


def count_key(ns: str, queue: str, status: str) -> str:
    """The sorted set whose ``ZCARD`` is the number of activities in ``status``."""
    return lease(ns, queue) if status == "processing" else status_set(ns, queue, status)


def type_set(ns: str, queue: str, activity_type: str) -> str:
    """ZSET of every activity of ``activity_type``, in ``(created, id)`` order (lex members, score 0)."""
    return f"{prefix(ns, queue)}ty:{activity_type}"


def children(ns: str, queue: str, parent_id: str) -> str:
    """ZSET of the activities ``parent_id`` enqueued, in ``(created, id)`` order (lex members, score 0)."""
    return f"{prefix(ns, queue)}kids:{parent_id}"


def counts(ns: str, queue: str) -> str:
    """HASH ``<status>\\x1f<type>`` -> number of activities."""
    return prefix(ns, queue) + "counts"


def dead_letter(ns: str, queue: str) -> str:
    """ZSET of dead-lettered ids, scored by dead-letter time (ms)."""
    return prefix(ns, queue) + "dead"


def suspects(ns: str, queue: str, activity_type: str) -> str:
    """ZSET of the ready suspect activities of ``activity_type`` (only ``claim_suspect`` takes them)."""
    return prefix(ns, queue) + "susp:" + activity_type


def types(ns: str, queue: str) -> str:
    """SET of the activity types that ever had a ready set."""
    return prefix(ns, queue) + "types"


def sched(ns: str, queue: str) -> str:
    """ZSET of not-yet-due activities, scored by ready time (ms)."""
    return prefix(ns, queue) + "sched"


def stream(ns: str, queue: str) -> str:
    """STREAM of the queue's live events."""
    return prefix(ns, queue) + "events"


def wake(ns: str, queue: str) -> str:
    """LIST of wake tokens for ``wait_for_work``."""
    return prefix(ns, queue) + "wake"


def wake_of_type(ns: str, queue: str, activity_type: str) -> str:
    """LIST of wake tokens for ``wait_for_work`` callers that claim ``activity_type``."""
    return prefix(ns, queue) + "wake:" + activity_type


def done_channel(ns: str, queue: str) -> str:
    """Pub/sub channel announcing ids that reached a terminal status."""
    return prefix(ns, queue) + "done"


def queues(ns: str) -> str:
    """SET of every queue name seen (outside any hash tag)."""
    return f"{ns}:queues"


def done_pattern(ns: str) -> str:
    """PSUBSCRIBE pattern matching the ``done`` channel of every queue."""
    return f"{ns}:{{*}}:done"


def queue_of_channel(ns: str, channel: str) -> str:
    """Inverse of :func:`done_channel` (the tag between the braces, unescaped)."""
    return untag(channel[len(ns) + 2 : -6])


def type_defaults(ns: str, queue: str) -> str:
    """HASH of ``queue``'s per-type enqueue defaults: activity type -> its ``TypeDefaults`` as JSON."""
    return f"{prefix(ns, queue)}typedefs"


def worker_queues(ns: str) -> str:
    """SET of every queue that had a worker registry entry (outside any hash tag)."""
    return f"{ns}:wqueues"
