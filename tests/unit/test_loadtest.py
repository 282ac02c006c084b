"""The load-test harness's measurement code: histogram, records, lost/duplicate counting, thresholds, mix."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runnerq_fast.loadtest.capacity import (
    StepResult,
    StepWindow,
    capacity_verdict,
    history_between,
    judge_step,
    read_locust_history,
    read_steps,
)
from runnerq_fast.loadtest.histogram import LatencyHistogram
from runnerq_fast.loadtest.mix import Mix, spike_users, step_users
from runnerq_fast.loadtest.records import Accepted, LineWriter, RecordTail, Run, read_accepted, read_runs
from runnerq_fast.loadtest.summary import (
    Sample,
    Thresholds,
    count_runs,
    evaluate,
    read_locust_csv,
    summarize,
)
from runnerq_fast.loadtest.verdict import SENT_CHECK, Verdict, generator_cause, judge
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


# ------------------------------------------------------------------ verdict
def _judged(sent: float, asked: float = 1000.0, p99: float = 50.0, machine: float = 100.0, locust: float = 20.0,
            lost: int = 0, mean_ms: float | None = 95.0, limit: float = 1000.0) -> Verdict:
    summary: dict[str, Any] = {
        "counts": {"accepted_unique": 5000, "lost": lost, "duplicate_runs": 0},
        "locust": {"requests": 6000, "failures": 0, "mean_ms": mean_ms},
        "latency": {"enqueue_to_start": {"p99_ms": p99}},
        "drained": True,
        "throughput": {"requests_per_s": sent, "accepted_per_s": sent * 3.3},
        "cpu_percent": {"machine": machine, "locust": locust, "serve": 30.0, "workers": 90.0},
        "run": {"rate": asked, "users": 20, "shape": ""},
    }
    checks = evaluate(summary, Thresholds(max_p99_ms=limit))
    return judge(summary, checks, cores=2)


def test_the_issue_run_is_inconclusive_in_one_line_not_failed() -> None:
    # issue 27: 211 of 1,000 req/s sent, p99 1,366 ms over 1,000, 165 % of 2 cores busy, 0 lost
    v = _judged(sent=211, p99=1366, machine=165)
    assert (v.status, v.exit_code) == ("inconclusive", 3)
    assert "\n" not in v.line
    assert v.line.startswith("INCONCLUSIVE: locust sent 211 req/s of the 1,000 asked (21%): the machine was CPU-bound "
                             "(165 % of 2 cores busy; 20 users waiting 95 ms per answer send at most 211/s)")
    assert "p99 of 1,366 ms reflects an overloaded machine, not the queue" in v.line
    assert "--capacity" in v.line


def test_locust_itself_cpu_bound_is_named() -> None:
    v = _judged(sent=300, p99=2000, machine=120, locust=97)
    assert v.status == "inconclusive"
    assert "locust was CPU-bound (97 % of a core; 120 % of 2 cores busy)" in v.line


def test_a_short_generator_with_spare_cpu_and_a_broken_p99_is_a_failure() -> None:
    # the machine had CPU to spare: serve answered slowly, and the limit broke even at the lower rate sent
    v = _judged(sent=211, p99=1366, machine=90)
    assert (v.status, v.exit_code) == ("failed", 1)
    assert v.line.startswith("FAILED: enqueue→start p99 1,366 ms over the 1,000 ms limit even at the 211 req/s sent")
    assert "more --users would send more" in v.line


def test_a_short_generator_with_every_threshold_held_is_inconclusive_the_rate_was_not_tested() -> None:
    v = _judged(sent=460, p99=339, machine=131)
    assert (v.status, v.exit_code) == ("inconclusive", 3)
    assert "every threshold held at 460 req/s, 1,000 req/s was not tested" in v.line


def test_a_lost_activity_fails_whatever_the_generator_sent() -> None:
    v = _judged(sent=211, p99=1366, machine=165, lost=2)
    assert (v.status, v.exit_code) == ("failed", 1)
    assert v.line == "FAILED: lost 2 (limit 0)"


def test_passed_and_failed_at_the_rate_asked() -> None:
    ok = _judged(sent=99, asked=100, p99=81)
    assert (ok.status, ok.exit_code) == ("passed", 0)
    assert ok.line == "PASSED: 99 req/s (327 activities/s), enqueue→start p99 81 ms (limit 1,000), 0 lost, " \
                      "0 duplicate runs"
    late = _judged(sent=100, asked=100, p99=1500)
    assert late.line == "FAILED: enqueue→start p99 1,500 ms over the 1,000 ms limit at 100 req/s (330 activities/s)"


def test_the_sent_rate_is_checked_only_at_a_fixed_rate() -> None:
    base = _summary()
    base["throughput"] = {"requests_per_s": 50.0}
    for run, checked in (({"rate": 100.0, "shape": ""}, True), ({"rate": 0.0, "shape": ""}, False),
                         ({"rate": 100.0, "shape": "step"}, False), ({}, False)):
        checks = {c.name: c for c in evaluate({**base, "run": run}, Thresholds(min_sent_share=0.9))}
        assert (SENT_CHECK in checks) is checked, run
        if checked:
            assert (checks[SENT_CHECK].value, checks[SENT_CHECK].ok) == (0.5, False)


def test_generator_cause_names_the_users_bound_only_when_it_explains_the_shortfall() -> None:
    assert generator_cause({"machine": 50.0}, 2) == ("locust could not keep its pace (50 % of 2 cores busy)", False)
    assert generator_cause({"locust": 180.0, "machine": 190.0}, 2, locust_processes=2)[1] is True
    # 60 users answered in 121 ms each can send 496/s: not why 300/s asked were not sent
    cause, cpu_bound = generator_cause({"machine": 200.0}, 2, users=60, mean_response_ms=121, asked=300)
    assert (cause, cpu_bound) == ("the machine was CPU-bound (200 % of 2 cores busy)", True)
    cause, _ = generator_cause({"machine": 100.0}, 2, users=60, mean_response_ms=121, asked=300)
    assert cause == "locust could not keep its pace (100 % of 2 cores busy; mean answer 121 ms)"
    cause, _ = generator_cause({"machine": 100.0}, 2, users=20, mean_response_ms=100, asked=300)
    assert cause == "20 users waiting 100 ms per answer send at most 200/s (100 % of 2 cores busy): " \
                    "more --users would send more"


# ------------------------------------------------------------------ capacity steps
def _window(step: int, start: float, end: float, users: int = 10, rate: float = 100.0) -> StepWindow:
    return StepWindow(step, users, rate, start, end)


def test_read_steps_makes_windows_and_the_last_one_ends_at_the_end(tmp_path: Path) -> None:
    (tmp_path / "steps.tsv").write_text("100.0\t1\t10\n110.0\t2\t20\n120.5\t3\t30\n121.0\t4")  # last line cut
    w = read_steps(tmp_path / "steps.tsv", user_rate=5.0, end=125.0)
    assert w == [StepWindow(1, 10, 50.0, 100.0, 110.0), StepWindow(2, 20, 100.0, 110.0, 120.5),
                 StepWindow(3, 30, 150.0, 120.5, 125.0)]
    assert read_steps(tmp_path / "none.tsv", 5.0, 1.0) == []


def test_a_step_holds_or_breaks_on_p99_sent_rate_or_errors() -> None:
    # 10 s, 100 req/s asked: 1,000 requests, one activity each, started 5 ms after being ready
    accepted = [Accepted(f"a{i}", True, 100 + i / 100) for i in range(1000)]
    starts = {a.id: a.ready + 0.005 for a in accepted}
    th = Thresholds(max_p99_ms=100, min_sent_share=0.9, max_error_rate=0.01)
    held = judge_step(_window(1, 100, 110), accepted, starts, th, step_seconds=10)
    assert held.ok and held.reason == "" and held.requests == 1000 and held.sent_rate == 100
    assert held.p99_ms == pytest.approx(5, rel=0.02) and held.late == 0 and held.activities_per_s == 100
    # 2 % of the activities started 300 ms late: p99 over the limit
    slow = {**starts, **{f"a{i}": 100 + i / 100 + 0.3 for i in range(0, 1000, 50)}}
    r = judge_step(_window(1, 100, 110), accepted, slow, th, step_seconds=10)
    assert not r.ok and r.late == 20 and r.reason == "enqueue→start p99 300 ms over the 100 ms limit"
    # half the requests: locust fell short (whatever the latency)
    r = judge_step(_window(1, 100, 110, rate=200.0), accepted, starts, th, step_seconds=10,
                   cpu={"machine": 190.0, "locust": 40.0}, cores=2, mean_response_ms=100.0)
    assert not r.ok and r.reason.startswith("locust sent 100 req/s of the 200 asked (50%): the machine was CPU-bound")
    r = judge_step(_window(1, 100, 110), accepted, starts, th, failures=20, step_seconds=10)
    assert not r.ok and r.reason == "2.0% of requests failed (limit 1.0%)"
    # every limit a step broke is named
    r = judge_step(_window(1, 100, 110, rate=200.0), accepted, slow, th, failures=20, step_seconds=10,
                   cpu={"machine": 100.0}, cores=2)
    assert r.reason == "2.0% of requests failed (limit 1.0%); locust sent 100 req/s of the 200 asked (50%): " \
                       "locust could not keep its pace (100 % of 2 cores busy); " \
                       "enqueue→start p99 300 ms over the 100 ms limit"
    # a step the load stopped in is shown, not judged
    r = judge_step(_window(3, 100, 105), accepted, starts, th, step_seconds=10)
    assert (r.complete, r.ok, r.reason) == (False, False, "partial")


def test_live_an_activity_not_started_yet_counts_with_its_wait_so_far() -> None:
    # a batch request: three activities share one send time and count one request
    accepted = [Accepted("a", True, 100.0), Accepted("b", True, 100.0), Accepted("c", True, 100.0, delay=9.5),
                Accepted("d", False, 101.0)]
    th = Thresholds(max_p99_ms=1000, min_sent_share=0)
    starts = {"a": 100.01}
    # at 101.5: b has waited 1.5 s, over the limit; c is not due yet; d is an idempotent repeat
    r = judge_step(_window(1, 100, 102), accepted, starts, th, now=101.5)
    assert (r.requests, r.activities, r.latencies, r.late) == (2, 3, 2, 1)
    assert not r.ok and r.p99_ms == pytest.approx(1500, rel=0.01)
    # after the drain only the starts count (b never started: it is lost, counted apart)
    assert judge_step(_window(1, 100, 102), accepted, starts, th).ok


def _step(step: int, ok: bool, reason: str = "", complete: bool = True) -> StepResult:
    return StepResult(step=step, users=10 * step, asked_rate=100.0 * step, seconds=10, requests=1000 * step,
                      sent_rate=99.0 * step, failures=0, activities=3300 * step, activities_per_s=330.0 * step,
                      latencies=3300 * step, late=0, p50_ms=5.0, p99_ms=40.0 * step, complete=complete, ok=ok,
                      reason=reason)


def test_capacity_is_the_highest_step_that_held_before_the_first_that_broke() -> None:
    steps = [_step(1, True), _step(2, True), _step(3, False, "enqueue→start p99 1,262 ms over the 1,000 ms limit"),
             _step(4, False, "partial", complete=False)]
    v, best, broke = capacity_verdict(steps, max_steps=10)
    assert (v.status, v.exit_code, best, broke) == ("passed", 0, steps[1], steps[2])
    assert v.line == ("CAPACITY: 200 req/s sustained (198 sent, 660 activities/s, enqueue→start p99 80 ms, step 2); "
                      "step 3 at 300 req/s broke: enqueue→start p99 1,262 ms over the 1,000 ms limit")
    # a later step that held does not lift the capacity over a step that broke
    assert capacity_verdict([_step(1, True), _step(2, False, "x"), _step(3, True)])[1] == _step(1, True)
    v, best, broke = capacity_verdict([_step(1, True), _step(2, True)], max_steps=2)
    assert v.status == "passed" and broke is None and "all 2 steps held: at least this" in v.line
    v, best, _ = capacity_verdict([_step(1, False, "2.0% of requests failed (limit 1.0%)")])
    assert (v.status, v.exit_code, best) == ("inconclusive", 3, None)
    assert v.line == "INCONCLUSIVE: the first step (100 req/s) already broke: 2.0% of requests failed (limit 1.0%); " \
                     "lower --rate"
    v, _, _ = capacity_verdict([_step(1, True)], ["lost: 3 (limit 0)"])
    assert (v.status, v.line) == ("failed", "FAILED: lost: 3 (limit 0)")
    assert capacity_verdict([])[0].status == "inconclusive"


def test_locust_history_gives_a_window_s_failures_and_mean_answer_time(tmp_path: Path) -> None:
    head = ("Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,"
            "100%,Total Request Count,Total Failure Count,Total Median Response Time,Total Average Response Time,"
            "Total Min Response Time,Total Max Response Time,Total Average Content Size\n")
    rows = [(100, 0, 0, 0.0), (105, 500, 1, 10.0), (110, 1000, 4, 20.0)]
    body = "".join(f"{t},10,,Aggregated,0,0,1,1,1,1,1,1,1,1,1,1,1,{n},{f},1,{m},1,1,1\n" for t, n, f, m in rows)
    (tmp_path / "l_stats_history.csv").write_text(head + "1,10,POST,single,0,0,1,1,1,1,1,1,1,1,1,1,1,9,9,1,1,1,1,1\n"
                                                  + body + "111,10,,Aggregated,0,0,1")  # a row being written
    history = read_locust_history(tmp_path / "l")
    assert [r.t for r in history] == [100, 105, 110]
    assert history_between(history, 105.5, 110.2) == (3, 30.0)  # (20 x 1000 - 10 x 500) / 500
    assert history_between(history, 50, 99) == (0, None)
    assert read_locust_history(tmp_path / "missing") == []


def test_record_tail_reads_only_what_was_appended_and_whole_lines(tmp_path: Path) -> None:
    tail = RecordTail(tmp_path)
    (tmp_path / "accepted-1.tsv").write_text("a\t1\t10.0\t0.5\nb\t0\t11.0\t0.0\nc\t1\t1")
    assert tail.accepted() == [Accepted("a", True, 10.0, 0.5), Accepted("b", False, 11.0)]
    with (tmp_path / "accepted-1.tsv").open("a") as fh:
        fh.write("2.0\t0.0\n")
    (tmp_path / "runs-2.tsv").write_text("a\t1\tnotify\t10.5\t10.6\t10.7\tok\n")
    assert tail.accepted() == [Accepted("c", True, 12.0)]
    assert tail.accepted() == []
    assert tail.runs() == [Run("a", 1, "notify", 10.5, 10.6, 10.7, "ok")]
    assert Accepted("a", True, 10.0, 0.5).ready == 10.5
    assert read_accepted(tmp_path) == [Accepted("a", True, 10.0, 0.5), Accepted("b", False, 11.0),
                                       Accepted("c", True, 12.0)]
