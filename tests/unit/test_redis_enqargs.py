"""The argument layout of one Redis enqueue script call (``backends/redis/_enqargs_py.py``)."""

from __future__ import annotations

from runnerq_fast.backends.redis.enqargs import enqueue_args
from runnerq_fast.models import NewActivity, OnDuplicate, Priority


def _item(i: int, **kw: object) -> NewActivity:
    return NewActivity(id=f"id{i}", activity_type=str(kw.pop("activity_type", "t")), payload=b"p%d" % i, **kw)  # type: ignore[arg-type]


def test_a_batch_of_one_profile_sends_it_once_and_no_profile_numbers() -> None:
    args = enqueue_args([_item(1), _item(2, priority=Priority.NORMAL)])
    assert args == [1, "t", 2, 3, 300_000, 0, b"{}", 0, 86_400_000, "", "id1", b"p1", "id2", b"p2"]
    assert all(type(a) is int for a in args[2:6])  # no IntEnum reaches the wire


def test_keyed_items_send_their_key_and_items_without_a_key_send_none() -> None:
    items = [_item(1, idempotency_key="k1", on_duplicate=OnDuplicate.NO_REUSE),
             _item(2, idempotency_key="k2", on_duplicate=4)]
    args = enqueue_args(items)
    assert args == [1, "t", 2, 3, 300_000, 0, b"{}", 4, 86_400_000, "", "id1", b"p1", "k1", "id2", b"p2", "k2"]
    # without a key the behaviour is ignored: one profile for both
    assert enqueue_args([_item(1, on_duplicate=1), _item(2, on_duplicate=3)])[0] == 1


def test_several_profiles_are_numbered_in_order_of_first_use() -> None:
    items = [
        _item(1),
        _item(2, activity_type="u", priority=Priority.HIGH, parent_id="par"),
        _item(3, idempotency_key="k", on_duplicate=OnDuplicate.RETURN_EXISTING),
        _item(4),
        _item(5, run_at_ms=123, metadata=b'{"a":"b"}', max_retries=0, timeout_ms=5),
    ]
    args = enqueue_args(items)
    assert args[0] == 4
    profiles = [tuple(args[1 + 9 * i : 10 + 9 * i]) for i in range(4)]
    assert profiles == [
        ("t", 2, 3, 300_000, 0, b"{}", 0, 86_400_000, ""),
        ("u", 3, 3, 300_000, 0, b"{}", 0, 86_400_000, "par"),
        ("t", 2, 3, 300_000, 0, b"{}", 2, 86_400_000, ""),
        ("t", 2, 0, 5, 123, b'{"a":"b"}', 0, 86_400_000, ""),
    ]
    assert args[37:] == ["id1", b"p1", 1, "id2", b"p2", 2, "id3", b"p3", 3, "k", "id4", b"p4", 1, "id5", b"p5", 4]
