"""The load-test harness's measurement code: histogram, records, lost/duplicate counting, thresholds, mix."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest

from runnerq_fast.loadtest.histogram import LatencyHistogram
from runnerq_fast.loadtest.mix import Mix, spike_users, step_users
from runnerq_fast.loadtest.records import Accepted, LineWriter, Run, read_accepted, read_runs
from runnerq_fast.loadtest.summary import (
    Sample,
    Thresholds,
    count_runs,
    evaluate,
    read_locust_csv,
    summarize,
)
from runnerq_fast.web.wire import BatchEnqueueRequest, EnqueueRequest


# ------------------------------------------------------------------ histogram
def test_percentiles_are_within_one_percent_of_the_exact_sample() -> None:
    values = [i / 1e6 * 37 for i in range(1, 10_001)]  # 37 µs .. 370 ms
    h = LatencyHistogram(values)
    for p in (1, 10, 50, 90, 99, 99.9):
        exact = values[math.ceil(p / 100 * len(values)) - 1]
        got = h.percentile(p)
        assert exact <= got <= exact * 1.01 + 1e-6, (p, exact, got)
    assert h.percentile(0) == values[0]
    assert h.percentile(100) == values[-1]
    assert h.count == len(values)
    assert h.mean == pytest.approx(sum(values) / len(values))


def test_sub_millisecond_latencies_are_told_apart() -> None:
    h = LatencyHistogram([0.00025] * 50 + [0.00031] * 50)  # 250 µs and 310 µs
    assert h.percentile(50) == pytest.approx(0.00025, abs=3e-6)
    assert h.percentile(51) == pytest.approx(0.00031, abs=4e-6)
    assert LatencyHistogram([0.000042]).percentile(50) == pytest.approx(0.000042, abs=1e-6)


def test_merge_equals_one_histogram_of_both() -> None:
    a_values = [0.001 * i for i in range(1, 300)]
    b_values = [0.0003 * i for i in range(1, 700)]
    merged = LatencyHistogram(a_values)
    merged.merge(LatencyHistogram(b_values))
    both = LatencyHistogram(a_values + b_values)
    for p in (5, 50, 95, 99):
        assert merged.percentile(p) == both.percentile(p)
    assert (merged.count, merged.min, merged.max) == (both.count, both.min, both.max)


def test_empty_negative_and_bad_input() -> None:
    empty = LatencyHistogram()
    assert math.isnan(empty.percentile(99))
    assert empty.summary_ms()["p99_ms"] is None
    h = LatencyHistogram([-0.00001, 0.002])
    assert h.negative == 1
    assert h.percentile(50) <= 1e-6  # recorded as 0: the first bucket, [0, 1 µs)
    with pytest.raises(ValueError, match="finite"):
        h.record(math.nan)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        h.percentile(101)


# ------------------------------------------------------------------ records
def test_records_round_trip_and_a_cut_last_line_is_skipped(tmp_path: Path) -> None:
    runs = LineWriter(tmp_path, "runs")
    runs.write("a" * 32, 1, "notify", 100.0, 100.0005, 100.0012, "ok")
    runs.close()
    runs.close()  # idempotent
    acc = LineWriter(tmp_path, "accepted")
    acc.write("a" * 32, 1, 99.999)
    acc.close()
    with (tmp_path / "runs-1.tsv").open("w") as fh:  # another process, killed mid-line
        fh.write("b" * 32 + "\t2\tflaky\t1.0\t1.1\t1.2\tRetryableError\n" + "c" * 32 + "\t1\tno")
    got = read_runs(tmp_path)
    assert Run("a" * 32, 1, "notify", 100.0, 100.0005, 100.0012, "ok") in got
    assert Run("b" * 32, 2, "flaky", 1.0, 1.1, 1.2, "RetryableError") in got
    assert len(got) == 2
    assert read_accepted(tmp_path) == [Accepted("a" * 32, True, 99.999)]


def test_a_damaged_record_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "runs-7.tsv").write_text("x\t1\n")
    with pytest.raises(ValueError, match="7 fields"):
        read_runs(tmp_path)


# ------------------------------------------------------------------ lost and duplicates
def _run(i: str, attempt: int = 1, outcome: str = "ok", ready: float = 10.0, start: float = 10.001,
         end: float = 10.002, kind: str = "notify") -> Run:
    return Run(i, attempt, kind, ready, start, end, outcome)


def test_lost_is_an_accepted_id_without_a_successful_run() -> None:
    accepted = [Accepted("a", True, 1.0), Accepted("b", True, 1.0), Accepted("c", True, 1.0)]
    runs = [_run("a"), _run("b", 1, "RetryableError")]  # b failed once and never succeeded; c never ran
    c = count_runs(accepted, runs)
    assert (c.lost, c.completed, c.duplicate_runs) == (2, 1, 0)
    assert c.lost_ids == ["b", "c"]


def test_a_retry_is_not_a_duplicate_but_a_second_run_of_an_attempt_or_success_is() -> None:
    accepted = [Accepted(i, True, 1.0) for i in "abcd"]
    runs = [
        _run("a", 1, "RetryableError"), _run("a", 2),  # an ordinary retry
        _run("b"), _run("b"),                           # attempt 1 ran twice (both succeeded): one duplicate
        _run("c", 1, "RetryableError"), _run("c", 1, "RetryableError"), _run("c", 2),  # attempt 1 twice
        _run("d", 1), _run("d", 2),                     # succeeded, then ran again after a reclaim
    ]
    c = count_runs(accepted, runs)
    assert c.duplicate_runs == 3
    assert (c.lost, c.completed, c.runs) == (0, 4, 9)


def test_idempotent_repeats_and_unexpected_completions_are_counted_apart() -> None:
    accepted = [Accepted("a", True, 1.0), Accepted("a", False, 1.5), Accepted("b", True, 1.0)]
    c = count_runs(accepted, [_run("a"), _run("b"), _run("z")])
    assert (c.accepted, c.accepted_unique, c.created, c.existing) == (3, 2, 2, 1)
    assert (c.lost, c.unexpected) == (0, 1)


# ------------------------------------------------------------------ summary and thresholds
def test_summary_latencies_come_from_the_first_attempt_and_the_successful_one() -> None:
    accepted = [Accepted("a", True, 100.0), Accepted("b", True, 100.0)]
    runs = [
        _run("a", 1, "ok", ready=100.0, start=100.0004, end=100.003),
        _run("b", 1, "RetryableError", ready=101.0, start=101.002, end=101.0021, kind="flaky"),  # delayed by 1 s
        _run("b", 2, "ok", ready=101.0, start=101.6, end=101.7, kind="flaky"),
    ]
    s = summarize(accepted, runs, [Sample(100.5, 1, 0, {"serve": 50.0, "machine": 150.0}), Sample(102.0, 0, 0)], None,
                  t0=100.0, load_end=101.0, drained=True)
    lat = s["latency"]
    assert lat["enqueue_to_start"]["count"] == 2
    assert lat["enqueue_to_start_undelayed"]["p50_ms"] == pytest.approx(0.4, abs=0.01)
    assert lat["due_to_start_delayed"]["p50_ms"] == pytest.approx(2.0, rel=0.01)
    assert lat["enqueue_to_done_by_type"]["flaky"]["p50_ms"] == pytest.approx(700, rel=0.01)
    assert s["errors"]["handler"] == {"RetryableError": 1}
    assert s["series"]["completed_per_s"] == [1, 1, 0]  # seconds 0, 1 and 2 (the last sample)
    assert s["series"]["backlog"] == [1, 0]
    assert s["throughput"]["drain_seconds"] == pytest.approx(0.7)
    assert s["cpu_percent"] == {"serve": 50.0, "machine": 150.0}  # the sample inside the load only
    assert s["cpu_ms_per_activity"] == {"serve": pytest.approx(250.0)}  # half a core for 1 s, 2 activities


def _summary(lost: int = 0, dup: int = 0, p99: float | None = 5.0, requests: int = 100, failures: int = 0,
             unique: int = 10, drained: bool = True) -> dict[str, object]:
    return {
        "counts": {"accepted_unique": unique, "lost": lost, "duplicate_runs": dup},
        "locust": {"requests": requests, "failures": failures},
        "latency": {"enqueue_to_start": {"p99_ms": p99}},
        "drained": drained,
    }


@pytest.mark.parametrize(
    ("summary", "failing"),
    [
        (_summary(), set()),
        (_summary(lost=1), {"lost"}),
        (_summary(dup=2), {"duplicate runs"}),
        (_summary(p99=1500.0), {"enqueue→start p99 ms"}),
        (_summary(p99=None, unique=0), {"enqueue→start p99 ms", "accepted enqueues"}),
        (_summary(failures=2), {"error rate"}),
        (_summary(requests=0), {"error rate"}),
        (_summary(drained=False), {"drained"}),
    ],
)
def test_thresholds(summary: dict[str, object], failing: set[str]) -> None:
    checks = evaluate(summary, Thresholds(max_error_rate=0.01, max_p99_ms=1000))
    assert {c.name for c in checks if not c.ok} == failing


def test_read_locust_csv(tmp_path: Path) -> None:
    head = ("Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,"
            "Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,"
            "99.99%,100%\n")
    (tmp_path / "l_stats.csv").write_text(
        head + "POST,single,870,3,10,16.2,1.9,108.1,78.0,123.8,0.4,10,14,18,23,38,52,78,89,110,110,110\n"
        ",Aggregated,1321,3,9,15.2,0.6,183.3,163.9,188.0,0.4,9,12,16,20,37,53,85,100,180,180,180\n")
    (tmp_path / "l_failures.csv").write_text("Method,Name,Error,Occurrences\nPOST,single,HTTP 503: busy,3\n")
    f = read_locust_csv(tmp_path / "l")
    assert (f.requests, f.failures) == (1321, 3)
    assert f.by_name["POST single"]["p99_ms"] == 89
    assert f.errors == {"single: HTTP 503: busy": 3}
    with pytest.raises(FileNotFoundError):
        read_locust_csv(tmp_path / "missing")


# ------------------------------------------------------------------ mix and shapes
def test_the_mix_is_what_serve_accepts_and_follows_its_weights() -> None:
    mix = Mix(seed=1, key_pool=10)
    specs = mix.batch(2000, now=5.0)
    for spec in specs[:200]:
        EnqueueRequest(**msgspec.to_builtins(spec))  # the fields of the HTTP body
    body = msgspec.json.encode({"activities": specs[:50]})
    assert len(msgspec.json.decode(body, type=BatchEnqueueRequest).activities) == 50
    kinds = {k: sum(1 for s in specs if s.type == k) / len(specs) for k in ("notify", "io_sleep", "cpu_hash", "flaky")}
    assert kinds == pytest.approx({"notify": 0.25, "io_sleep": 0.45, "cpu_hash": 0.2, "flaky": 0.1}, abs=0.04)
    assert all(s.payload["t"] == 5.0 for s in specs)
    delays = [(s.delay, s.payload["d"]) for s in specs if s.delay is not None]
    assert 0.06 < len(delays) / len(specs) < 0.14
    assert all(d == in_payload and 0.1 <= d <= 2 for d, in_payload in delays)
    assert all(s.payload["d"] == 0.0 for s in specs if s.delay is None)
    keys = [s.idempotency_key for s in specs if s.idempotency_key]
    assert keys and len(set(keys)) <= 10 and all(s.type == "notify" for s in specs if s.idempotency_key)
    assert {s.priority for s in specs} == {"low", "normal", "high", "critical"}
    sizes = [len(msgspec.json.encode(s.payload)) for s in specs if s.type == "cpu_hash"]
    assert min(sizes) > 4096


def test_shapes() -> None:
    assert [step_users(t, start=2, step=2, step_seconds=10, limit=7) for t in (0, 9.9, 10, 25, 100)] == [2, 2, 4, 6, 7]
    assert [spike_users(t, base=1, peak=9, every=10, spike_seconds=2) for t in (0, 5, 10, 11.9, 12, 21)] == \
        [1, 1, 9, 9, 1, 9]
    with pytest.raises(ValueError):
        step_users(1, start=1, step=1, step_seconds=0, limit=1)
    with pytest.raises(ValueError):
        spike_users(1, base=1, peak=2, every=1, spike_seconds=1)
