"""Capacity mode (``runnerq-fast loadtest --capacity``): raise the rate step by step until a step breaks.

locust's ``CapacityShape`` (``loadtest/locustfile.py``) runs ``--users`` users
more every ``--step-seconds``, each user at ``--rate / --users`` requests/s,
so step k asks k x ``--rate`` requests/s, and writes the time each step
began into ``records/steps.tsv`` (:func:`read_steps`). A step **holds** when,
over the activities sent during it:

* the requests that failed are at most ``max_error_rate`` of those sent;
* locust sent at least ``min_sent_share`` of the rate asked (a request is
  one send time of the accepted records: a batch's activities share theirs);
* the enqueue → start p99 is within ``max_p99_ms``.

While the load runs, :class:`LiveJudge` judges each step once its window is
``max_p99_ms`` + :data:`SLACK_SECONDS` old, from the records read so far: an
activity of the step that has still not started by then has waited longer
than the limit, and counts so (its wait so far is a lower bound), so "the
p99 broke the limit" is known then, not guessed. At the first step that
breaks, the runner writes the stop file and the shape ends the load. After
the drain, :func:`judge_steps` judges every step again from the complete
records (the figures reported), and :func:`capacity_verdict` names the
highest step that held: the rate the setup sustains.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import msgspec

from runnerq_fast.loadtest.histogram import LatencyHistogram
from runnerq_fast.loadtest.records import Accepted, RecordTail, Run
from runnerq_fast.loadtest.summary import Sample, Thresholds
from runnerq_fast.loadtest.verdict import Verdict, generator_cause

__all__ = [
    "SLACK_SECONDS",
    "HistoryRow",
    "LiveJudge",
    "StepResult",
    "StepWindow",
    "capacity_verdict",
    "history_between",
    "judge_step",
    "judge_steps",
    "read_locust_history",
    "read_steps",
]

SLACK_SECONDS = 1.0
"""Seconds a step is judged live after its window is ``max_p99_ms`` old: the records' flush (0.25 s) and more."""

PARTIAL_SHARE = 0.8
"""A step that ran less than this share of ``--step-seconds`` (the load stopped in it) is shown, not judged."""


class StepWindow(msgspec.Struct, frozen=True):
    """One step of the load as locust ran it.

    Attributes
    ----------
    step : int
        1, 2, ...
    users : int
        locust users during the step.
    asked_rate : float
        Requests/s asked: users x the rate of one user.
    start, end : float
        Epoch **seconds** the step began and ended.
    """

    step: int
    users: int
    asked_rate: float
    start: float
    end: float


def read_steps(path: str | Path, user_rate: float, end: float) -> list[StepWindow]:
    """The steps ``CapacityShape`` wrote to ``steps.tsv`` (none if it has not started).

    Parameters
    ----------
    path : str or Path
        ``records/steps.tsv``.
    user_rate : float
        Requests/s of one user.
    end : float
        Epoch seconds the last step ends (now, while the load runs; the last send after it).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    rows = [line.split("\t") for line in text.splitlines() if line.count("\t") == 2]
    begun = [(float(t), int(step), int(users)) for t, step, users in rows]
    return [StepWindow(step, users, round(users * user_rate, 3), t,
                       begun[i + 1][0] if i + 1 < len(begun) else max(end, t))
            for i, (t, step, users) in enumerate(begun)]


class HistoryRow(msgspec.Struct, frozen=True):
    """One aggregated row of locust's ``_stats_history.csv`` (written every second): cumulative figures."""

    t: float
    requests: int
    failures: int
    mean_ms: float


def read_locust_history(prefix: str | Path) -> list[HistoryRow]:
    """The ``Aggregated`` rows of ``<prefix>_stats_history.csv`` (none if locust has not written it yet)."""
    rows: list[HistoryRow] = []
    try:
        with open(f"{prefix}_stats_history.csv", newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if row.get("Name") != "Aggregated" or row.get("Total Average Response Time") is None:
                    continue
                try:
                    rows.append(HistoryRow(float(row["Timestamp"]), int(row["Total Request Count"]),
                                           int(row["Total Failure Count"]), float(row["Total Average Response Time"])))
                except (KeyError, ValueError):  # a row locust is still writing
                    continue
    except FileNotFoundError:
        pass
    return rows


def history_between(rows: Sequence[HistoryRow], start: float, end: float) -> tuple[int, float | None]:
    """Failed requests and the mean answer time (ms) between ``start`` and ``end`` (epoch s), to a second.

    locust's rows are cumulative and stamped in whole seconds: the figures
    are the difference between the last rows at or before each end.
    """
    def at(t: float) -> HistoryRow | None:
        before = [r for r in rows if r.t <= t]
        return before[-1] if before else None

    a, b = at(start), at(end)
    if b is None:
        return 0, None
    n0, f0, m0 = (a.requests, a.failures, a.mean_ms) if a else (0, 0, 0.0)
    done = b.requests - n0
    mean = (b.mean_ms * b.requests - m0 * n0) / done if done > 0 else None
    return b.failures - f0, None if mean is None or mean < 0 else round(mean, 3)


class StepResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one step measured and whether it held.

    Attributes
    ----------
    step, users : int
        The step and its locust users.
    asked_rate, sent_rate : float
        Requests/s asked and sent (successful requests over the step's seconds).
    seconds : float
        The step's length.
    requests, failures : int
        Successful and failed requests.
    activities, activities_per_s : int, float
        Activities created by the step's requests, and per second.
    latencies, late : int
        Activities whose enqueue → start was measured; of them, over the limit.
    p50_ms, p99_ms : float or None
        Enqueue → start percentiles, **milliseconds**.
    complete : bool
        Whether the step ran (nearly) its full length; a partial one is not judged.
    ok : bool
        Whether it held (``False`` for a partial step).
    reason : str
        Why it did not hold, every limit it broke ("" if it held); "partial" for a partial step.
    """

    step: int
    users: int
    asked_rate: float
    seconds: float
    requests: int
    sent_rate: float
    failures: int
    activities: int
    activities_per_s: float
    latencies: int
    late: int
    p50_ms: float | None
    p99_ms: float | None
    complete: bool
    ok: bool
    reason: str


def _mean_cpu(samples: Iterable[Sample], start: float, end: float) -> dict[str, float]:
    inside = [s for s in samples if start < s.t <= end and s.cpu]
    roles = {k for s in inside for k in s.cpu}
    return {k: sum(s.cpu.get(k, 0.0) for s in inside) / len(inside) for k in roles}


def _ms(seconds: float) -> float | None:
    return None if math.isnan(seconds) else round(seconds * 1000, 3)


def judge_step(window: StepWindow, accepted: Iterable[Accepted], starts: Mapping[str, float],
               thresholds: Thresholds, *, failures: int = 0, now: float | None = None, step_seconds: float = 0.0,
               cpu: Mapping[str, float] | None = None, cores: int = 1,
               mean_response_ms: float | None = None) -> StepResult:
    """Judge one step (see the module docstring).

    Parameters
    ----------
    window : StepWindow
        The step.
    accepted : iterable of Accepted
        Accepted enqueues (any of the run; those sent in the window count).
    starts : mapping of str to float
        Activity id to the epoch seconds its first attempt started.
    thresholds : Thresholds
        ``max_error_rate``, ``min_sent_share`` and ``max_p99_ms`` apply.
    failures : int
        Failed requests during the step (locust's history).
    now : float, optional
        While the load runs, the epoch seconds of the records read: an
        activity not started by then counts with its wait so far, if that is
        over the limit. ``None`` after the drain: every start is known.
    step_seconds : float
        The planned length of a step; a step shorter than
        :data:`PARTIAL_SHARE` of it is partial. 0: every step is complete.
    cpu : mapping of str to float, optional
        Mean CPU by role during the step (% of one core), to say why locust fell short.
    cores : int
        CPU cores of the machine.
    mean_response_ms : float, optional
        locust's mean answer time during the step.
    """
    limit = thresholds.max_p99_ms / 1000
    seconds = max(window.end - window.start, 1e-9)
    sends: set[float] = set()
    hist = LatencyHistogram()
    late = activities = 0
    for a in accepted:
        if not window.start <= a.sent < window.end:
            continue
        sends.add(a.sent)
        if not a.created:  # an idempotent repeat: the first one's latency counts
            continue
        activities += 1
        started = starts.get(a.id)
        if started is not None:
            wait = max(started - a.ready, 0.0)
        elif now is not None and now - a.ready > limit:
            wait = now - a.ready  # not started yet: at least this
        else:
            continue
        hist.record(wait)
        late += wait > limit
    requests = len(sends)
    sent_rate = requests / seconds
    p99 = _ms(hist.percentile(99))
    complete = step_seconds <= 0 or seconds >= PARTIAL_SHARE * step_seconds
    reasons: list[str] = []
    error_rate = failures / (requests + failures) if requests + failures else 0.0
    if not complete:
        reasons.append("partial")
    else:
        if error_rate > thresholds.max_error_rate:
            reasons.append(f"{error_rate:.1%} of requests failed (limit {thresholds.max_error_rate:.1%})")
        if sent_rate < thresholds.min_sent_share * window.asked_rate:
            cause, _ = generator_cause(cpu or {}, cores, users=window.users, mean_response_ms=mean_response_ms,
                                       asked=window.asked_rate)
            reasons.append(f"locust sent {sent_rate:,.0f} req/s of the {window.asked_rate:,.0f} asked "
                           f"({sent_rate / window.asked_rate:.0%}): {cause}")
        if p99 is None:
            reasons.append("no activity started")
        elif p99 > thresholds.max_p99_ms:
            reasons.append(f"enqueue→start p99 {p99:,.0f} ms over the {thresholds.max_p99_ms:,.0f} ms limit")
    reason = "; ".join(reasons)
    return StepResult(step=window.step, users=window.users, asked_rate=window.asked_rate, seconds=round(seconds, 3),
                      requests=requests, sent_rate=round(sent_rate, 1), failures=failures, activities=activities,
                      activities_per_s=round(activities / seconds, 1), latencies=hist.count, late=late,
                      p50_ms=_ms(hist.percentile(50)), p99_ms=p99, complete=complete, ok=not reason, reason=reason)


def _first_starts(runs: Iterable[Run], into: dict[str, float]) -> None:
    for r in runs:
        if r.attempt == 1 and r.id not in into:
            into[r.id] = r.start


def judge_steps(windows: Sequence[StepWindow], accepted: Sequence[Accepted], runs: Sequence[Run],
                history: Sequence[HistoryRow], samples: Sequence[Sample], thresholds: Thresholds, *,
                step_seconds: float, cores: int) -> list[StepResult]:
    """Judge every step from the complete records (after the drain)."""
    starts: dict[str, float] = {}
    _first_starts(runs, starts)
    out = []
    for w in windows:
        failures, mean = history_between(history, w.start, w.end)
        out.append(judge_step(w, accepted, starts, thresholds, failures=failures, step_seconds=step_seconds,
                              cpu=_mean_cpu(samples, w.start, w.end), cores=cores, mean_response_ms=mean))
    return out


class LiveJudge:
    """Judges the steps while the load runs, from what the records hold so far (see the module docstring).

    Parameters
    ----------
    records : Path
        The run's records directory (``steps.tsv``, ``accepted-*``, ``runs-*``).
    locust_prefix : Path
        locust's ``--csv`` prefix (its history gives the failed requests).
    user_rate : float
        Requests/s of one user.
    thresholds : Thresholds
        The limits of a step.
    cores : int
        CPU cores of the machine.
    """

    def __init__(self, records: Path, locust_prefix: Path, user_rate: float, thresholds: Thresholds,
                 cores: int) -> None:
        self.records = records
        self.locust_prefix = locust_prefix
        self.user_rate = user_rate
        self.thresholds = thresholds
        self.cores = cores
        self._tail = RecordTail(records)
        self._accepted: list[Accepted] = []
        self._starts: dict[str, float] = {}
        self.judged: dict[int, StepResult] = {}

    def poll(self, now: float, samples: Sequence[Sample]) -> StepResult | None:
        """Judge every step ended at least ``max_p99_ms`` + :data:`SLACK_SECONDS` before ``now``.

        Returns
        -------
        StepResult or None
            The first step judged now that did not hold, if any.
        """
        self._accepted.extend(self._tail.accepted())
        _first_starts(self._tail.runs(), self._starts)
        wait = self.thresholds.max_p99_ms / 1000 + SLACK_SECONDS
        windows = read_steps(self.records / "steps.tsv", self.user_rate, now)
        history: list[HistoryRow] | None = None
        for w in windows[:-1]:  # the last one is still running
            if w.step in self.judged or now < w.end + wait:
                continue
            if history is None:
                history = read_locust_history(self.locust_prefix)
            failures, mean = history_between(history, w.start, w.end)
            result = judge_step(w, self._accepted, self._starts, self.thresholds, failures=failures, now=now,
                                cpu=_mean_cpu(samples, w.start, w.end), cores=self.cores, mean_response_ms=mean)
            self.judged[w.step] = result
            if not result.ok:
                return result
        return None


def capacity_verdict(steps: Sequence[StepResult], run_failures: Sequence[str] = (), *,
                     max_steps: int = 0) -> tuple[Verdict, StepResult | None, StepResult | None]:
    """The highest step that held before the first that broke, as a verdict line.

    Parameters
    ----------
    steps : sequence of StepResult
        Every step, in order.
    run_failures : sequence of str
        The run's own failures (lost, duplicate runs, not drained): the run fails whatever the steps say.
    max_steps : int
        Steps planned (to say that every one held).

    Returns
    -------
    tuple of (Verdict, StepResult or None, StepResult or None)
        The verdict (passed: a sustained rate was measured; inconclusive: the
        first step already broke, or none completed; failed: ``run_failures``),
        the highest step that held, and the first that broke.
    """
    best: StepResult | None = None
    broke: StepResult | None = None
    for s in steps:
        if not s.complete:
            continue
        if not s.ok:
            broke = s
            break
        best = s
    if run_failures:
        return Verdict("failed", "FAILED: " + "; ".join(run_failures)), best, broke
    if best is None:
        if broke is None:
            return Verdict("inconclusive", "INCONCLUSIVE: no step ran its full length"), None, None
        return Verdict("inconclusive", f"INCONCLUSIVE: the first step ({broke.asked_rate:,.0f} req/s) already broke: "
                                       f"{broke.reason}; lower --rate"), None, broke
    held = (f"CAPACITY: {best.asked_rate:,.0f} req/s sustained ({best.sent_rate:,.0f} sent, "
            f"{best.activities_per_s:,.0f} activities/s, enqueue→start p99 {best.p99_ms or 0:,.0f} ms, "
            f"step {best.step})")
    if broke is None:
        more = f"all {max_steps} steps held" if max_steps and best.step >= max_steps else "the load stopped"
        return Verdict("passed", f"{held}; {more}: at least this (raise --max-steps or --rate)"), best, None
    return Verdict("passed", f"{held}; step {broke.step} at {broke.asked_rate:,.0f} req/s broke: {broke.reason}"), \
        best, broke
