"""What a load test measured, from the files its processes wrote, and whether it passed.

:func:`count_runs` compares the accepted enqueues with the handler runs
(lost, duplicate, unexpected); :func:`summarize` adds the latency
percentiles, the time series and locust's own figures; :func:`evaluate`
checks the thresholds, from which :mod:`~runnerq_fast.loadtest.verdict`
makes the verdict and the exit code.

Definitions:

* **lost**: an id some enqueue call answered with success (accepted) that no
  handler run completed;
* **duplicate run**: a run of an attempt of an activity that had already run
  (the same id and attempt twice), or a success of an activity that had
  already succeeded;
* **unexpected**: an id that completed but no generator recorded as
  accepted (e.g. a request that timed out on the client after the server
  stored it): reported, not a failure;
* **enqueue → start**: handler entry minus ready time (send time plus
  delay), first attempt of each activity; **enqueue → done**: handler exit of
  the successful attempt minus ready time (so a retried activity includes its
  failed attempt and its backoff). The first is also given apart for the
  activities sent without a delay and, from their due time, for the delayed
  ones. All in sub-millisecond buckets
  (:class:`~runnerq_fast.loadtest.histogram.LatencyHistogram`).
"""

from __future__ import annotations

import csv
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from runnerq_fast.loadtest.histogram import LatencyHistogram
from runnerq_fast.loadtest.records import Accepted, Run

__all__ = [
    "Check",
    "LocustFigures",
    "RunCounts",
    "Sample",
    "Thresholds",
    "count_runs",
    "evaluate",
    "read_locust_csv",
    "summarize",
]


class RunCounts(msgspec.Struct, frozen=True):
    """Accepted enqueues against handler runs.

    Attributes
    ----------
    accepted : int
        Successful enqueue answers (an idempotent repeat counts again).
    accepted_unique : int
        Distinct accepted ids.
    created, existing : int
        Answers that stored a new activity / returned an existing one.
    completed : int
        Distinct accepted ids with a successful run.
    runs : int
        Handler runs recorded (all attempts).
    lost : int
        Accepted ids never completed.
    duplicate_runs : int
        See the module docstring.
    unexpected : int
        Completed ids nobody recorded as accepted.
    lost_ids : list of str
        Up to 20 lost ids, to inspect.
    """

    accepted: int
    accepted_unique: int
    created: int
    existing: int
    completed: int
    runs: int
    lost: int
    duplicate_runs: int
    unexpected: int
    lost_ids: list[str]


def count_runs(accepted: Sequence[Accepted], runs: Sequence[Run]) -> RunCounts:
    """Count lost, duplicate and unexpected runs (see the module docstring)."""
    accepted_ids = {a.id for a in accepted}
    attempts: Counter[tuple[str, int]] = Counter((r.id, r.attempt) for r in runs)
    successes: Counter[str] = Counter(r.id for r in runs if r.ok)
    duplicate = sum(n - 1 for n in attempts.values()) + sum(n - 1 for n in successes.values())
    # a success that repeated an attempt is counted once, as a repeated attempt
    repeated_ok: Counter[tuple[str, int]] = Counter((r.id, r.attempt) for r in runs if r.ok)
    duplicate -= sum(n - 1 for n in repeated_ok.values())
    lost = sorted(accepted_ids - successes.keys())
    created = sum(1 for a in accepted if a.created)
    return RunCounts(
        accepted=len(accepted),
        accepted_unique=len(accepted_ids),
        created=created,
        existing=len(accepted) - created,
        completed=len(accepted_ids & successes.keys()),
        runs=len(runs),
        lost=len(lost),
        duplicate_runs=duplicate,
        unexpected=len(successes.keys() - accepted_ids),
        lost_ids=lost[:20],
    )


class Sample(msgspec.Struct, frozen=True):
    """One reading taken by the runner during a test (every second).

    Attributes
    ----------
    t : float
        Epoch seconds.
    backlog : int
        Activities not finished: pending + scheduled + retrying + processing.
    processing : int
        Of which being run.
    cpu : dict of str to float
        CPU use since the previous sample, in percent of one core, by role
        (``locust``, ``serve``, ``workers``, ``store``, ``machine``: the last
        in percent of one core too, summed over all cores).
    """

    t: float
    backlog: int
    processing: int
    cpu: dict[str, float] = {}


class LocustFigures(msgspec.Struct, frozen=True):
    """What locust's CSV files say (``<prefix>_stats.csv``, ``<prefix>_failures.csv``).

    Attributes
    ----------
    requests, failures : int
        Over all request names.
    mean_ms : float or None
        Mean answer time over all requests, **milliseconds**.
    by_name : dict
        Per ``"<type> <name>"``: requests, failures, median and p99 in ms
        (locust rounds them), requests/s.
    errors : dict of str to int
        Failures by ``"<name>: <error>"``.
    """

    requests: int
    failures: int
    by_name: dict[str, dict[str, float]]
    errors: dict[str, int]
    mean_ms: float | None = None


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def read_locust_csv(prefix: str | Path) -> LocustFigures:
    """Read locust's ``--csv PREFIX`` output.

    Raises
    ------
    FileNotFoundError
        If ``<prefix>_stats.csv`` does not exist (locust did not run).
    """
    by_name: dict[str, dict[str, float]] = {}
    requests = failures = 0
    mean: float | None = None
    with open(f"{prefix}_stats.csv", newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["Name"] == "Aggregated":
                requests, failures = int(row["Request Count"]), int(row["Failure Count"])
                mean = _num(row["Average Response Time"])
                mean = None if math.isnan(mean) else round(mean, 3)
                continue
            by_name[f"{row['Type']} {row['Name']}"] = {
                "requests": int(row["Request Count"]), "failures": int(row["Failure Count"]),
                "median_ms": _num(row["Median Response Time"]), "p99_ms": _num(row.get("99%", "")),
                "requests_per_s": _num(row["Requests/s"]),
            }
    errors: dict[str, int] = {}
    failures_csv = Path(f"{prefix}_failures.csv")
    if failures_csv.exists():
        with failures_csv.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                key = f"{row['Name']}: {row['Error']}"
                errors[key] = errors.get(key, 0) + int(row["Occurrences"])
    return LocustFigures(requests, failures, by_name, errors, mean)


class Thresholds(msgspec.Struct, frozen=True):
    """Pass/fail limits of a run.

    Attributes
    ----------
    max_error_rate : float
        Failed requests over all requests, in [0, 1] (default 0.01).
    max_p99_ms : float
        Enqueue → start p99, **milliseconds** (default 1000).
    max_lost : int
        Default 0.
    max_duplicate_runs : int
        Default 0.
    min_sent_share : float
        Requests/s locust sent over the rate asked, in [0, 1] (default 0.9);
        checked only for a run at a fixed ``--rate`` (not 0, no ``--shape``).
        Below it the run did not test the rate asked
        (:mod:`~runnerq_fast.loadtest.verdict`).
    """

    max_error_rate: float = 0.01
    max_p99_ms: float = 1000.0
    max_lost: int = 0
    max_duplicate_runs: int = 0
    min_sent_share: float = 0.9


class Check(msgspec.Struct, frozen=True):
    """One threshold against the value measured."""

    name: str
    value: float
    limit: float
    ok: bool


def _series(runs: Iterable[Run], accepted: Iterable[Accepted], samples: Sequence[Sample],
            t0: float) -> dict[str, list[Any]]:
    enq: Counter[int] = Counter(int(a.sent - t0) for a in accepted if a.created)
    done: Counter[int] = Counter()
    start_by_sec: dict[int, LatencyHistogram] = defaultdict(LatencyHistogram)
    for r in runs:
        if r.ok:
            done[int(r.end - t0)] += 1
        if r.attempt == 1:
            start_by_sec[int(r.start - t0)].record(r.start - r.ready)
    last = max([*enq, *done, *start_by_sec, *(int(s.t - t0) for s in samples), 0])
    seconds = list(range(last + 1))
    return {
        "second": seconds,
        "enqueued_per_s": [enq.get(s, 0) for s in seconds],
        "completed_per_s": [done.get(s, 0) for s in seconds],
        "start_p50_ms": [_ms(start_by_sec[s].percentile(50)) if s in start_by_sec else None for s in seconds],
        "start_p99_ms": [_ms(start_by_sec[s].percentile(99)) if s in start_by_sec else None for s in seconds],
        "backlog_t": [round(s.t - t0, 3) for s in samples],
        "backlog": [s.backlog for s in samples],
        "processing": [s.processing for s in samples],
    }


def _ms(seconds: float) -> float | None:
    return None if math.isnan(seconds) else round(seconds * 1000, 3)


def _cpu(samples: Sequence[Sample], t0: float, t1: float) -> dict[str, float]:
    """Mean CPU (% of one core) by role over the samples taken while the load ran."""
    inside = [s for s in samples if t0 < s.t <= t1 and s.cpu]
    if not inside:
        return {}
    roles = sorted({k for s in inside for k in s.cpu})
    return {k: round(sum(s.cpu.get(k, 0.0) for s in inside) / len(inside), 1) for k in roles}


def summarize(
    accepted: Sequence[Accepted],
    runs: Sequence[Run],
    samples: Sequence[Sample],
    locust: LocustFigures | None,
    *,
    t0: float,
    load_end: float,
    drained: bool,
    store: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Everything a run measured, as a JSON-ready dict.

    Parameters
    ----------
    accepted, runs : sequence
        From :func:`~runnerq_fast.loadtest.records.read_accepted` / ``read_runs``.
    samples : sequence of Sample
        The runner's readings of backlog and CPU.
    locust : LocustFigures or None
        locust's CSV figures (``None`` if locust wrote none).
    t0, load_end : float
        Epoch seconds the load started and stopped.
    drained : bool
        Whether the backlog reached zero before the drain timeout.
    store : dict of str to int, optional
        The queue's counts by status once drained.

    Returns
    -------
    dict
        Keys ``counts``, ``throughput``, ``latency`` (``enqueue_to_start``, ``enqueue_to_start_undelayed``,
        ``due_to_start_delayed``, ``enqueue_to_done``, ``enqueue_to_done_by_type``, each in ms), ``errors``, ``locust``,
        ``cpu_percent`` (mean % of one core by role while the load ran), ``cpu_ms_per_activity`` (CPU
        milliseconds per accepted activity by role), ``series``, ``store``, ``drained``.
    """
    counts = count_runs(accepted, runs)
    sent = {a.id: a.sent for a in accepted}
    start = LatencyHistogram()
    undelayed = LatencyHistogram()
    delayed = LatencyHistogram()
    done = LatencyHistogram()
    done_by_type: dict[str, LatencyHistogram] = defaultdict(LatencyHistogram)
    first_start: set[str] = set()
    first_done: set[str] = set()
    for r in runs:
        if r.attempt == 1 and r.id not in first_start:
            first_start.add(r.id)
            start.record(r.start - r.ready)
            # ready later than sent: a delayed activity, whose latency runs from its due time
            (delayed if r.ready - sent.get(r.id, r.ready) > 0.001 else undelayed).record(r.start - r.ready)
        if r.ok and r.id not in first_done:
            first_done.add(r.id)
            done.record(r.end - r.ready)
            done_by_type[r.type].record(r.end - r.ready)
    load_seconds = max(load_end - t0, 1e-9)
    ends = [r.end for r in runs if r.ok]
    in_load = sum(1 for e in ends if e <= load_end)
    handler_errors = Counter(r.outcome for r in runs if not r.ok)
    cpu = _cpu(samples, t0, load_end)
    return {
        "drained": drained,
        "counts": msgspec.to_builtins(counts),
        "throughput": {
            "load_seconds": round(load_seconds, 3),
            "accepted_per_s": round(counts.accepted / load_seconds, 1),
            "created_per_s": round(counts.created / load_seconds, 1),
            "completed_per_s_during_load": round(in_load / load_seconds, 1),
            "drain_seconds": round(max(ends) - load_end, 3) if ends and max(ends) > load_end else 0.0,
            "requests_per_s": round(locust.requests / load_seconds, 1) if locust else None,
        },
        "latency": {
            "enqueue_to_start": start.summary_ms(),
            "enqueue_to_start_undelayed": undelayed.summary_ms(),
            "due_to_start_delayed": delayed.summary_ms(),
            "enqueue_to_done": done.summary_ms(),
            "enqueue_to_done_by_type": {k: v.summary_ms((50, 99)) for k, v in sorted(done_by_type.items())},
            "negative_clock_readings": start.negative + done.negative,
        },
        "errors": {
            "requests": dict(locust.errors) if locust else {},
            "handler": dict(handler_errors),
            "store": {k: v for k, v in (store or {}).items() if k in ("failed", "dead_letter", "cancelled") and v},
        },
        "locust": msgspec.to_builtins(locust) if locust else None,
        "cpu_percent": cpu,
        # CPU time per accepted activity: what a process role costs, whatever share of the machine it got
        "cpu_ms_per_activity": {k: round(v / 100 * load_seconds * 1000 / counts.accepted_unique, 3)
                                for k, v in cpu.items() if k != "machine"} if counts.accepted_unique else {},
        "store": store,
        "series": _series(runs, accepted, samples, t0),
    }


def evaluate(summary: dict[str, Any], thresholds: Thresholds) -> list[Check]:
    """The thresholds checked against ``summary`` (from :func:`summarize`); a run passes if all are ``ok``.

    Besides the four limits of :class:`Thresholds`, a run must have had an
    accepted enqueue (an empty run proves nothing) and must have drained.
    When ``summary["run"]`` says a fixed rate was asked (``rate`` > 0, no
    ``shape``), the requests/s locust sent are checked against
    ``min_sent_share`` of it (``"sent / asked rate"``); the verdict
    (:func:`~runnerq_fast.loadtest.verdict.judge`) reads that check apart.
    """
    counts = summary["counts"]
    locust = summary["locust"]
    requests = locust["requests"] if locust else 0
    failures = locust["failures"] if locust else 0
    error_rate = failures / requests if requests else 1.0
    p99 = summary["latency"]["enqueue_to_start"]["p99_ms"]
    checks = [
        Check("accepted enqueues", counts["accepted_unique"], 1, counts["accepted_unique"] >= 1),
        Check("drained", float(summary["drained"]), 1, bool(summary["drained"])),
        Check("error rate", round(error_rate, 5), thresholds.max_error_rate, error_rate <= thresholds.max_error_rate),
        Check("enqueue→start p99 ms", math.inf if p99 is None else p99, thresholds.max_p99_ms,
              p99 is not None and p99 <= thresholds.max_p99_ms),
        Check("lost", counts["lost"], thresholds.max_lost, counts["lost"] <= thresholds.max_lost),
        Check("duplicate runs", counts["duplicate_runs"], thresholds.max_duplicate_runs,
              counts["duplicate_runs"] <= thresholds.max_duplicate_runs),
    ]
    run = summary.get("run") or {}
    asked = float(run.get("rate") or 0.0)
    if asked > 0 and not run.get("shape"):
        share = (summary["throughput"].get("requests_per_s") or 0.0) / asked
        checks.append(Check("sent / asked rate", round(share, 3), thresholds.min_sent_share,
                            share >= thresholds.min_sent_share))
    return checks
