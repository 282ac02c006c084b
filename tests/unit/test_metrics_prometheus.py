"""PrometheusMetrics as the engine's sink: labels, outcomes, histograms, bounded series (memory backend)."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

import runnerq_fast as rq
from runnerq_fast.metrics import (
    ACTIVITIES_CLAIMED,
    ACTIVITIES_COMPLETED,
    ACTIVITIES_DEAD_LETTERED,
    ACTIVITIES_ENQUEUED,
    ACTIVITIES_FAILED,
    ACTIVITIES_REAPED,
    ACTIVITIES_RETRIED,
    ACTIVITY_DURATION,
    HISTOGRAMS,
    LABELS,
    QUEUE_WAIT,
    labelled,
)
from runnerq_fast.metrics.prometheus import DEFAULT_BUCKETS, OTHER, PrometheusMetrics
from tests.conformance import FAST


def scrape(collector: Collector) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """Samples by family name, from the text exposition (what Prometheus reads)."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = [(s.name, s.labels, s.value) for s in fam.samples]
    return out


def sample(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    for n, lab, v in samples:
        if n == name and lab == labels:
            return v
    raise AssertionError(f"no sample {name}{labels} in {samples}")


async def test_engine_outcomes_are_labelled_by_queue_type_and_outcome() -> None:
    backend = rq.MemoryBackend()
    metrics = rq.PrometheusMetrics()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "m"}, metrics=metrics)

    @engine.activity("ok")
    async def ok(payload: Any, ctx: rq.ActivityContext) -> None:
        if payload == "fail":
            raise rq.NonRetryableError("no")
        if payload == "retry" and ctx.retry_count == 0:
            raise RuntimeError("again")
        if payload == "dead":
            raise RuntimeError("always")

    @engine.activity("other")
    async def other(payload: Any, ctx: rq.ActivityContext) -> int:
        return 1

    ex = engine.executor
    futs = [await ex.activity("ok").payload(p).execute() for p in ("a", "retry", "fail")]
    futs.append(await ex.activity("ok").payload("dead").max_retries(0).execute())
    futs += [await ex.activity("other").execute() for _ in range(3)]
    async with engine:
        for f in futs:
            with contextlib.suppress(rq.ActivityFailed):
                await f.result(timeout=5)

    fams = scrape(metrics)
    enq = fams["runnerq_activities_enqueued"]
    assert sample(enq, ACTIVITIES_ENQUEUED, queue="m", activity_type="ok") == 4
    assert sample(enq, ACTIVITIES_ENQUEUED, queue="m", activity_type="other") == 3
    claimed = fams["runnerq_activities_claimed"]
    assert sample(claimed, ACTIVITIES_CLAIMED, queue="m", activity_type="ok") == 5  # "retry" ran twice
    assert sample(claimed, ACTIVITIES_CLAIMED, queue="m", activity_type="other") == 3
    done = fams["runnerq_activities_completed"]
    assert sample(done, ACTIVITIES_COMPLETED, queue="m", activity_type="ok") == 2
    assert sample(done, ACTIVITIES_COMPLETED, queue="m", activity_type="other") == 3
    assert sample(fams["runnerq_activities_retried"], ACTIVITIES_RETRIED, queue="m", activity_type="ok") == 1
    assert sample(fams["runnerq_activities_failed"], ACTIVITIES_FAILED, queue="m", activity_type="ok") == 1
    assert sample(fams["runnerq_activities_dead_lettered"], ACTIVITIES_DEAD_LETTERED,
                  queue="m", activity_type="ok") == 1

    run = fams[ACTIVITY_DURATION]
    count = f"{ACTIVITY_DURATION}_count"
    assert sample(run, count, queue="m", activity_type="ok", outcome="completed") == 2
    assert sample(run, count, queue="m", activity_type="ok", outcome="retry") == 1
    assert sample(run, count, queue="m", activity_type="ok", outcome="failed") == 1
    assert sample(run, count, queue="m", activity_type="ok", outcome="dead_letter") == 1
    assert sample(run, count, queue="m", activity_type="other", outcome="completed") == 3
    wait = fams[QUEUE_WAIT]
    assert sample(wait, f"{QUEUE_WAIT}_count", queue="m", activity_type="ok") == 5
    assert sample(wait, f"{QUEUE_WAIT}_count", queue="m", activity_type="other") == 3
    # a no-op ran within the largest bucket, and the +Inf bucket equals the count
    assert sample(run, f"{ACTIVITY_DURATION}_bucket", queue="m", activity_type="other", outcome="completed",
                  le="1800.0") == 3
    assert sample(run, f"{ACTIVITY_DURATION}_bucket", queue="m", activity_type="other", outcome="completed",
                  le="+Inf") == 3


async def test_an_expired_lease_counts_as_reaped_requeued() -> None:
    backend = rq.MemoryBackend()
    metrics = rq.PrometheusMetrics()
    q = "reap"
    await rq.ActivityExecutor(backend, q).activity("t").execute()
    (held,) = await backend.claim(q, "crashed-worker", 1, None, 1)  # a 1 ms lease nobody renews
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": q}, metrics=metrics)
    ran: list[str] = []

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        ran.append(ctx.activity_id)

    async with engine:
        await rq.ActivityFuture(backend, held.id).result(timeout=5)
    assert ran == [held.id]
    assert metrics.value(ACTIVITIES_REAPED, (q, "requeued")) == 1
    assert metrics.value(ACTIVITIES_REAPED, (q, "dead_letter")) == 0


def test_buckets_span_half_a_millisecond_to_thirty_minutes() -> None:
    assert DEFAULT_BUCKETS[0] == 0.0005 and DEFAULT_BUCKETS[-1] == 1800.0
    m = PrometheusMetrics()
    labels = ("q", "t", "completed")
    for seconds in (0.0004, 0.0005, 0.7, 4000.0):
        m.observe(ACTIVITY_DURATION, labels, seconds)
    s = scrape(m)[ACTIVITY_DURATION]
    bucket = f"{ACTIVITY_DURATION}_bucket"
    lab = {"queue": "q", "activity_type": "t", "outcome": "completed"}
    assert sample(s, bucket, **lab, le="0.0005") == 2  # le is inclusive
    assert sample(s, bucket, **lab, le="0.5") == 2
    assert sample(s, bucket, **lab, le="1.0") == 3
    assert sample(s, bucket, **lab, le="1800.0") == 3
    assert sample(s, bucket, **lab, le="+Inf") == 4
    assert math.isclose(sample(s, f"{ACTIVITY_DURATION}_sum", **lab), 0.0004 + 0.0005 + 0.7 + 4000.0)


def test_label_sets_beyond_the_cap_fold_into_other() -> None:
    m = PrometheusMetrics(max_label_sets=2)
    for t in ("a", "b", "c", "d"):
        m.count(ACTIVITIES_ENQUEUED, ("q", t))
        m.observe(QUEUE_WAIT, ("q", t), 0.01)
    assert m.value(ACTIVITIES_ENQUEUED, ("q", "a")) == 1
    assert m.value(ACTIVITIES_ENQUEUED, (OTHER, OTHER)) == 2
    assert m.value(QUEUE_WAIT, (OTHER, OTHER)) == 2
    fams = scrape(m)
    assert len(fams["runnerq_activities_enqueued"]) == 3  # a, b and _other: never more


def test_every_metric_has_labels_and_help_and_no_unbounded_label() -> None:
    for name, names in LABELS.items():
        assert set(names) <= {"queue", "activity_type", "outcome"}, name
    assert all(name in LABELS for name in HISTOGRAMS)


def test_a_two_method_sink_still_works_and_sees_completed_durations_only() -> None:
    seen: list[tuple[str, float]] = []

    class Old:
        def inc_counter(self, name: str, value: int = 1) -> None:
            seen.append((name, value))

        def observe_duration(self, name: str, seconds: float) -> None:
            seen.append((name, seconds))

    sink = labelled(Old())
    sink.count(ACTIVITIES_COMPLETED, ("q", "t"), 2)
    sink.observe(ACTIVITY_DURATION, ("q", "t", "completed"), 0.5)
    sink.observe(ACTIVITY_DURATION, ("q", "t", "retry"), 0.25)
    sink.observe(QUEUE_WAIT, ("q", "t"), 0.125)
    assert seen == [(ACTIVITIES_COMPLETED, 2), (ACTIVITY_DURATION, 0.5), (QUEUE_WAIT, 0.125)]
    pm = PrometheusMetrics()
    assert labelled(pm) is pm
    with pytest.raises(TypeError, match="inc_counter"):
        labelled(object())  # type: ignore[arg-type]
    with pytest.raises(rq.ConfigError, match="inc_counter"):
        rq.WorkerEngine(rq.MemoryBackend(), metrics=object())  # type: ignore[arg-type]


def test_sinks_share_nothing_and_register_only_where_asked() -> None:
    a, b = PrometheusMetrics(), PrometheusMetrics()
    a.count(ACTIVITIES_ENQUEUED, ("q", "t"), 5)
    assert b.value(ACTIVITIES_ENQUEUED, ("q", "t")) == 0
    registry = CollectorRegistry()
    c = PrometheusMetrics(registry=registry)
    c.count(ACTIVITIES_ENQUEUED, ("q", "t"))
    assert "runnerq_activities_enqueued_total" in generate_latest(registry).decode()
    with pytest.raises(ValueError, match="Duplicated"):
        registry.register(PrometheusMetrics())
    with pytest.raises(ValueError, match="increasing"):
        PrometheusMetrics(buckets=(1.0, 0.5))


def test_importing_runnerq_fast_does_not_import_prometheus_client() -> None:
    import subprocess
    import sys

    code = "import runnerq_fast, sys; runnerq_fast.PrometheusMetrics(); print('prometheus_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_observe_many_equals_observing_one_by_one() -> None:
    one, many = PrometheusMetrics(max_label_sets=1), PrometheusMetrics(max_label_sets=1)
    values = [0.0001, 0.002, 0.3, 0.3, 7.0, 5000.0]
    for labels in (("q", "a"), ("q", "b")):  # the second label set folds into _other
        for v in values:
            one.observe(QUEUE_WAIT, labels, v)
        many.observe_many(QUEUE_WAIT, labels, values)
    many.observe_many(QUEUE_WAIT, ("q", "a"), [])
    assert scrape(one) == scrape(many)
    assert many.value(QUEUE_WAIT, (OTHER, OTHER)) == len(values)


MULTIPROCESS_CHILD = """
import asyncio, sys
import runnerq_fast as rq

async def main() -> None:
    backend = rq.MemoryBackend()
    metrics = rq.PrometheusMetrics()
    assert metrics.multiprocess and list(metrics.collect()) == []
    engine = rq.WorkerEngine(backend, queue_name="mp", metrics=metrics, ack_flush_interval=0.001)

    @engine.activity("t")
    async def t(payload, ctx):
        return None

    futs = [await engine.executor.activity("t").execute() for _ in range(int(sys.argv[1]))]
    async with engine:
        for f in futs:
            await f.result(timeout=5)

asyncio.run(main())
"""


def test_in_multiprocess_mode_every_process_counts_once(tmp_path: Any) -> None:
    """Two processes with PROMETHEUS_MULTIPROC_DIR set: a MultiProcessCollector over the directory sums them."""
    import os
    import subprocess
    import sys

    from prometheus_client import multiprocess

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n in (3, 4):
        subprocess.run([sys.executable, "-c", MULTIPROCESS_CHILD, str(n)], env=env, check=True, timeout=60)
    registry = CollectorRegistry()
    collector: Any = multiprocess.MultiProcessCollector  # prometheus-client leaves it unannotated
    collector(registry, path=str(tmp_path))
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    done = fams["runnerq_activities_completed"]
    assert sample([(s.name, s.labels, s.value) for s in done.samples], ACTIVITIES_COMPLETED,
                  queue="mp", activity_type="t") == 7
    run = [(s.name, s.labels, s.value) for s in fams[ACTIVITY_DURATION].samples]
    assert sample(run, f"{ACTIVITY_DURATION}_count", queue="mp", activity_type="t", outcome="completed") == 7
    enq = [(s.name, s.labels, s.value) for s in fams["runnerq_activities_enqueued"].samples]
    assert sample(enq, ACTIVITIES_ENQUEUED, queue="mp", activity_type="t") == 7
