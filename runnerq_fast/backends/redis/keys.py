"""Every Redis key and channel name of the Redis backend, in one place.

Every name starts with a namespace, ``rq`` unless the backend is opened with
another (tests use a fresh one per test; several applications can share a
server). Below, ``rq`` stands for the namespace.

All keys of one queue share the hash tag ``{<queue>}``, so a queue lives in one
Redis Cluster slot and every Lua script touches one slot only. The scripts get
the prefix as ``KEYS[1]`` and build the per-activity names from it; their
headers (``lua/*.lua``) name every key they touch.

=============================  ======  ==================================================
key (``P = rq:{<queue>}:``)    type    contents
=============================  ======  ==================================================
``P a:<id>``                   HASH    one activity and its events (fields in ``lua/_common.lua``)
``P ready:<type>``             ZSET    ready activities of one type, score = ready score
``P types``                    SET     types that ever had a ready set
``P sched``                    ZSET    not-yet-due activities, score = ready time (ms)
``P lease``                    ZSET    processing activities, score = lease deadline (ms)
``P st:<status>``              ZSET    ids per status, score = creation time (ms): counts, listings
``P ct:<type>``                ZSET    ids of one type (any status), score = creation time (ms)
``P ch:<id>``                  ZSET    children of activity ``<id>``, score = creation time (ms)
``P cnt``                      HASH    ``<status>:<type>`` -> number of activities (queue summary)
``P fin``                      ZSET    finished activities whose hash expires, score = finish time (ms);
                                       member ``<id>\x1f<type>\x1f<parent id>`` (for pruning)
``P dl``                       ZSET    dead-lettered ids, score = dead-letter time (ms)
``P events``                   STREAM  live events, one entry per script run (capped, ~10,000)
``P evseq``                    STRING  last event id of the queue (ids count 1, 2, ...)
``P wake``                     LIST    wake tokens for fetchers blocked in ``BLPOP``
``P idem:<n>:<type>:<key>``    STRING  id holding an idempotency key (``<n>`` = len(type))
``P done``                     PUBSUB  comma-separated ids that reached a terminal status
``rq:queues``                  SET     every queue name seen (outside any hash tag)
=============================  ======  ==================================================
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_NAMESPACE",
    "STATUSES",
    "activity",
    "by_type",
    "children",
    "counts",
    "dead_letter",
    "done_channel",
    "done_pattern",
    "finished",
    "prefix",
    "queue_of_channel",
    "queues",
    "sched",
    "status_set",
    "stream",
    "wake",
]

DEFAULT_NAMESPACE = "rq"
"""Namespace of every key unless the backend is opened with another."""

STATUSES = ("pending", "scheduled", "processing", "retrying", "completed", "failed", "dead_letter", "cancelled")


def prefix(ns: str, queue: str) -> str:
    """``rq:{<queue>}:``, the prefix of every key of ``queue`` (passed as ``KEYS[1]``)."""
    return f"{ns}:{{{queue}}}:"


def activity(ns: str, queue: str, activity_id: str) -> str:
    """HASH of one activity."""
    return f"{ns}:{{{queue}}}:a:{activity_id}"


def status_set(ns: str, queue: str, status: str) -> str:
    """ZSET of the ids in ``status``, scored by creation time (ms)."""
    return f"{ns}:{{{queue}}}:st:{status}"


def dead_letter(ns: str, queue: str) -> str:
    """ZSET of dead-lettered ids, scored by dead-letter time (ms)."""
    return f"{ns}:{{{queue}}}:dl"


def by_type(ns: str, queue: str, activity_type: str) -> str:
    """ZSET of the ids of one type (any status), scored by creation time (ms)."""
    return f"{ns}:{{{queue}}}:ct:{activity_type}"


def children(ns: str, queue: str, parent_id: str) -> str:
    """ZSET of the children of ``parent_id``, scored by creation time (ms)."""
    return f"{ns}:{{{queue}}}:ch:{parent_id}"


def counts(ns: str, queue: str) -> str:
    """HASH ``<status>:<type>`` -> number of activities."""
    return f"{ns}:{{{queue}}}:cnt"


def finished(ns: str, queue: str) -> str:
    """ZSET of finished activities whose hash expires, scored by finish time (ms)."""
    return f"{ns}:{{{queue}}}:fin"


def sched(ns: str, queue: str) -> str:
    """ZSET of not-yet-due activities, scored by ready time (ms)."""
    return f"{ns}:{{{queue}}}:sched"


def stream(ns: str, queue: str) -> str:
    """STREAM of the queue's live events."""
    return f"{ns}:{{{queue}}}:events"


def wake(ns: str, queue: str) -> str:
    """LIST of wake tokens for ``wait_for_work``."""
    return f"{ns}:{{{queue}}}:wake"


def done_channel(ns: str, queue: str) -> str:
    """Pub/sub channel announcing ids that reached a terminal status."""
    return f"{ns}:{{{queue}}}:done"


def queues(ns: str) -> str:
    """SET of every queue name seen (outside any hash tag)."""
    return f"{ns}:queues"


def done_pattern(ns: str) -> str:
    """PSUBSCRIBE pattern matching the ``done`` channel of every queue."""
    return f"{ns}:{{*}}:done"


def queue_of_channel(ns: str, channel: str) -> str:
    """Inverse of :func:`done_channel`."""
    return channel[len(ns) + 2 : -6]
