"""A load test's verdict in one line: PASSED, FAILED or INCONCLUSIVE, and why.

A run that asked locust for ``--rate`` requests/s but got fewer did not
test that rate. What it measured is then the machine, not the queue, when
the machine (or locust itself) had no CPU to spare: every process of the
test shares it, so serve, the workers and the generator slow one another.
Hence three verdicts (:data:`EXIT_CODES`):

* **FAILED** (exit 1): an activity was lost or ran twice, requests failed,
  the queue did not drain, nothing was accepted; or the enqueue → start p99
  broke its limit while the generator sent what was asked, or while the
  machine had CPU to spare (serve's answers were slow: the limit broke even
  at the lower rate the users managed to send);
* **INCONCLUSIVE** (exit 3): the generator sent less than ``min_sent_share``
  of the rate asked and the run is not a failure by the rule above: either
  the thresholds held at the rate sent (the rate asked was not tested), or
  the p99 broke on a CPU-bound machine (it reflects the overload, not the
  queue);
* **PASSED** (exit 0): every threshold held at the rate asked.

Exit code 2 stays click's, for bad input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from runnerq_fast.loadtest.summary import Check

__all__ = [
    "EXIT_CODES",
    "LOCUST_BOUND_PERCENT",
    "MACHINE_BOUND_SHARE",
    "SENT_CHECK",
    "Verdict",
    "generator_cause",
    "judge",
]

EXIT_CODES = {"passed": 0, "failed": 1, "inconclusive": 3}
"""The process exit code of each verdict."""

SENT_CHECK = "sent / asked rate"
"""The name of the check comparing the requests/s locust sent with the rate asked."""

P99_CHECK = "enqueue→start p99 ms"

LOCUST_BOUND_PERCENT = 90.0
"""locust (one gevent process) counts as CPU-bound from this percentage of one core per locust process."""

MACHINE_BOUND_SHARE = 0.8
"""The machine counts as CPU-bound from this share of all its cores busy (every process, the test's or not)."""


class Verdict(msgspec.Struct, frozen=True):
    """The outcome of a run and the one line that says why.

    Attributes
    ----------
    status : str
        ``"passed"``, ``"failed"`` or ``"inconclusive"``.
    line : str
        One line, starting with the status in capitals.
    """

    status: str
    line: str

    @property
    def exit_code(self) -> int:
        """0 passed, 1 failed, 3 inconclusive."""
        return EXIT_CODES[self.status]


def _n(v: float) -> str:
    return f"{v:,.0f}"


def generator_cause(cpu: Mapping[str, float], cores: int, *, locust_processes: int = 1, users: int = 0,
                    mean_response_ms: float | None = None, asked: float = math.inf) -> tuple[str, bool]:
    """Why locust sent less than asked, in a few words, and whether the CPU was the bound.

    Parameters
    ----------
    cpu : mapping of str to float
        Mean CPU use by role over the load, in **percent of one core**
        (``"locust"``, ``"machine"``: every process on it, ...).
    cores : int
        CPU cores of the machine.
    locust_processes : int
        locust processes (each can use one core).
    users : int
        locust users: each waits for its answer before sending again.
    mean_response_ms : float, optional
        Mean answer time of locust's requests, **milliseconds**.
    asked : float
        Requests/s asked: the users' bound (users x 1000 / mean answer ms) is
        named only when it is below this (when it explains the shortfall).

    Returns
    -------
    tuple of (str, bool)
        The cause, and ``True`` when locust or the whole machine was CPU-bound
        (then the latencies measured the overload, not the queue).
    """
    machine = cpu.get("machine")
    locust = cpu.get("locust", 0.0)
    busy = f"{machine:.0f} % of {cores} cores busy" if machine is not None else "machine CPU not measured"
    wait = ""
    if mean_response_ms and users and mean_response_ms > 0 and users * 1000 / mean_response_ms < asked:
        bound = users * 1000 / mean_response_ms
        wait = f"{users} users waiting {mean_response_ms:,.0f} ms per answer send at most {_n(bound)}/s"
    if locust >= LOCUST_BOUND_PERCENT * locust_processes:
        core = "a core" if locust_processes == 1 else f"{locust_processes} cores"
        return f"locust was CPU-bound ({locust:.0f} % of {core}; {busy})", True
    if machine is not None and machine >= MACHINE_BOUND_SHARE * 100 * cores:
        return f"the machine was CPU-bound ({busy}{f'; {wait}' if wait else ''})", True
    if wait:
        return f"{wait} ({busy}): more --users would send more", False
    answers = f"; mean answer {mean_response_ms:,.0f} ms" if mean_response_ms else ""
    return f"locust could not keep its pace ({busy}{answers})", False


def _failed(c: Check) -> str:
    if c.name == "drained":
        return "the queue did not drain"
    if c.name == "accepted enqueues":
        return "no enqueue was accepted"

    def num(v: float) -> str:
        return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.4g}"

    return f"{c.name} {num(c.value)} (limit {num(c.limit)})"


def judge(summary: Mapping[str, Any], checks: Sequence[Check], *, cores: int, locust_processes: int = 1) -> Verdict:
    """The verdict of a run from its summary and checks (see the module docstring).

    Parameters
    ----------
    summary : mapping
        From :func:`~runnerq_fast.loadtest.summary.summarize`, with ``run``
        (``rate``, ``users``) added.
    checks : sequence of Check
        From :func:`~runnerq_fast.loadtest.summary.evaluate`.
    cores : int
        CPU cores of the machine.
    locust_processes : int
        locust processes.
    """
    failing = [c for c in checks if not c.ok]
    by_name = {c.name: c for c in checks}
    t = summary["throughput"]
    sent = t.get("requests_per_s") or 0.0
    asked = float(summary.get("run", {}).get("rate") or 0.0)
    p99 = summary["latency"]["enqueue_to_start"]["p99_ms"]
    hard = [c for c in failing if c.name not in (P99_CHECK, SENT_CHECK)]
    if hard:
        return Verdict("failed", "FAILED: " + "; ".join(_failed(c) for c in hard))
    short = SENT_CHECK in by_name and not by_name[SENT_CHECK].ok
    late = P99_CHECK in by_name and not by_name[P99_CHECK].ok
    limit = by_name[P99_CHECK].limit if P99_CHECK in by_name else math.nan
    p99_text = "none" if p99 is None else f"{p99:,.0f} ms"
    if short:
        locust = summary.get("locust") or {}
        cause, cpu_bound = generator_cause(summary.get("cpu_percent", {}), cores, locust_processes=locust_processes,
                                           users=int(summary.get("run", {}).get("users") or 0),
                                           mean_response_ms=locust.get("mean_ms"), asked=asked)
        head = f"locust sent {_n(sent)} req/s of the {_n(asked)} asked ({sent / asked:.0%}): {cause}"
        if late and cpu_bound:
            return Verdict("inconclusive", f"INCONCLUSIVE: {head}; the enqueue→start p99 of {p99_text} reflects an "
                                           "overloaded machine, not the queue (lower --rate, or find the highest "
                                           "rate it sustains with --capacity)")
        if late:
            return Verdict("failed", f"FAILED: enqueue→start p99 {p99_text} over the {limit:,.0f} ms limit even at "
                                     f"the {_n(sent)} req/s sent ({head})")
        return Verdict("inconclusive", f"INCONCLUSIVE: {head}; every threshold held at {_n(sent)} req/s, "
                                       f"{_n(asked)} req/s was not tested (lower --rate, or --capacity)")
    at = f"{_n(sent)} req/s ({_n(t['accepted_per_s'])} activities/s)"
    if late:
        return Verdict("failed", f"FAILED: enqueue→start p99 {p99_text} over the {limit:,.0f} ms limit at {at}")
    counts = summary["counts"]
    return Verdict("passed", f"PASSED: {at}, enqueue→start p99 {p99_text} (limit {limit:,.0f}), "
                             f"{counts['lost']} lost, {counts['duplicate_runs']} duplicate runs")
