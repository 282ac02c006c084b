"""rq.SyncExecutor on its private memory backend: builder, batching across threads, errors, closing."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pytest

import runnerq_fast as rq
from runnerq_fast.backends.memory import MemoryBackend
from runnerq_fast.models import EnqueueResult, NewActivity


@pytest.fixture
def client() -> Iterator[rq.SyncExecutor]:
    with rq.SyncExecutor("memory://", "s") as c:
        yield c


def test_the_builder_enqueues_and_returns_an_id(client: rq.SyncExecutor) -> None:
    activity_id = (client.activity("send").payload({"to": "a@b.c"}).priority(rq.Priority.HIGH).delay(60)
                   .metadata({"tenant": "t1"}).max_retries(1).timeout(5).execute())
    assert isinstance(activity_id, str)
    assert client.status(activity_id) == "scheduled"
    snap = client.run(lambda ex: ex.backend.get_activity(activity_id))
    assert snap is not None and (snap.priority, snap.max_retries, snap.timeout_ms) == (3, 1, 5000)
    assert client.get_result(activity_id) is None
    assert client.cancel(activity_id) is True
    assert client.status(activity_id) == "cancelled"
    with pytest.raises(rq.ActivityCancelled):
        client.result(activity_id, timeout=1)


def test_result_times_out(client: rq.SyncExecutor) -> None:
    activity_id = client.activity("never").execute()
    with pytest.raises(TimeoutError, match=r"did not finish within 0\.05 s"):
        client.result(activity_id, timeout=0.05)


def test_bad_input_is_refused_before_anything_is_stored(client: rq.SyncExecutor) -> None:
    with pytest.raises(rq.InvalidActivityError):
        client.activity("")
    with pytest.raises(rq.InvalidActivityError):
        client.activity("t").priority(7)
    with pytest.raises(rq.InvalidActivityError, match="NaN"):
        client.activity("t").payload(float("nan")).execute()
    stats = client.run(lambda ex: ex.backend.stats("s"))
    assert stats.pending == 0


def test_idempotency_keys_hold_across_threads(client: rq.SyncExecutor) -> None:
    ids: list[str] = []
    lock = threading.Lock()

    def enqueue() -> None:
        got = client.activity("once").idempotency_key("k1").execute()
        with lock:
            ids.append(got)

    threads = [threading.Thread(target=enqueue) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 16 and len(set(ids)) == 1
    with pytest.raises(rq.DuplicateActivityError):
        client.activity("once").idempotency_key("k1", rq.OnDuplicate.NO_REUSE).execute()


def test_enqueues_from_many_threads_are_batched(client: rq.SyncExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    callers: set[str] = set()
    real = MemoryBackend.enqueue

    async def counting(self: MemoryBackend, queue: str, items: Sequence[NewActivity], *,
                       connection: object | None = None) -> list[EnqueueResult]:
        sizes.append(len(items))
        callers.add(threading.current_thread().name)
        return await real(self, queue, items, connection=connection)

    monkeypatch.setattr(MemoryBackend, "enqueue", counting)
    ids: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        mine = [client.activity("t").payload({"n": n, "i": i}).execute() for i in range(200)]
        with lock:
            ids.extend(mine)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1600
    assert sum(sizes) == 1600
    assert max(sizes) > 1  # several threads' enqueues shared a round trip
    assert callers == {"runnerq-sync-client"}  # the backend is used in its own loop thread only
    stats = client.run(lambda ex: ex.backend.stats("s"))
    assert stats.pending == 1600
    assert client.enqueue_many([client.activity("t").payload(1), ("t", 2)]) and client.run(
        lambda ex: ex.backend.stats("s")).pending == 1602


def test_close_is_idempotent_and_refuses_later_calls() -> None:
    client = rq.SyncExecutor("memory://")
    client.activity("t").execute()
    client.close()
    client.close()
    with pytest.raises(rq.ConfigError, match="closed"):
        client.activity("t").execute()
    with pytest.raises(rq.ConfigError, match="closed"):
        client.status("x")
    assert "closed" in repr(client)


def test_a_bad_url_is_a_clear_error_and_leaves_no_thread() -> None:
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(rq.ConfigError, match="unsupported backend URL scheme"):
        rq.SyncExecutor("mysql://x")
    with pytest.raises(rq.ConfigError, match="no backend given"):
        rq.SyncExecutor("", "q")
    assert {t.name for t in threading.enumerate()} <= before
