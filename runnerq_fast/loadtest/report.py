"""A load test's outputs besides locust's own: the summary JSON, the PNG chart, the terminal table.

The chart needs matplotlib (the ``loadtest`` extra); without it the chart is
skipped with a note and everything else is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from runnerq_fast.loadtest.capacity import StepResult
from runnerq_fast.loadtest.summary import Check

__all__ = ["print_capacity", "print_table", "write_chart", "write_json"]


def write_json(path: Path, summary: dict[str, Any], checks: list[Check]) -> None:
    """Write ``summary`` plus the checks and ``passed`` as indented JSON.

    ``passed`` is the verdict's (``summary["verdict"]["status"] == "passed"``)
    when the summary holds one, else whether every check holds.
    """
    verdict = summary.get("verdict")
    passed = verdict["status"] == "passed" if verdict else all(c.ok for c in checks)
    doc = {**summary, "checks": msgspec.to_builtins(checks), "passed": passed}
    path.write_bytes(msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")


def write_chart(path: Path, summary: dict[str, Any], title: str) -> bool:
    """Draw throughput, backlog and enqueue → start latency over time into a PNG.

    Returns
    -------
    bool
        ``False`` (nothing written) when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    s = summary["series"]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ax1.plot(s["second"], s["enqueued_per_s"], label="enqueued (created) /s")
    ax1.plot(s["second"], s["completed_per_s"], label="completed /s")
    ax1.set_ylabel("activities / s")
    ax1.legend(loc="upper right")
    ax1.set_title(title)
    ax2.plot(s["backlog_t"], s["backlog"], label="backlog (not finished)")
    ax2.plot(s["backlog_t"], s["processing"], label="processing")
    ax2.set_ylabel("activities")
    ax2.legend(loc="upper right")
    for key, label in (("start_p50_ms", "p50"), ("start_p99_ms", "p99")):
        pts = [(x, y) for x, y in zip(s["second"], s[key], strict=True) if y is not None]
        if pts:
            ax3.plot([p[0] for p in pts], [p[1] for p in pts], label=f"enqueue→start {label}")
    ax3.set_ylabel("ms")
    ax3.set_yscale("log")
    ax3.set_xlabel("seconds since the load started")
    ax3.legend(loc="upper right")
    for ax in (ax1, ax2, ax3):
        ax.axvline(summary["throughput"]["load_seconds"], color="grey", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def print_table(console: Console, summary: dict[str, Any], checks: list[Check]) -> None:
    """Print the run's figures and the checks as rich tables."""
    c, t, lat = summary["counts"], summary["throughput"], summary["latency"]
    figures = Table(title="load test", show_header=True)
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    rows: list[tuple[str, Any]] = [
        ("requests / s (locust)", t["requests_per_s"]),
        ("accepted activities / s", t["accepted_per_s"]),
        ("completed / s during the load", t["completed_per_s_during_load"]),
        ("drain after the load (s)", t["drain_seconds"]),
        ("accepted (unique ids)", c["accepted_unique"]),
        ("idempotent repeats", c["existing"]),
        ("completed", c["completed"]),
        ("lost", c["lost"]),
        ("duplicate runs", c["duplicate_runs"]),
        ("completed, never accepted", c["unexpected"]),
    ]
    for name, label in (("enqueue_to_start", "enqueue→start"), ("enqueue_to_start_undelayed", "  undelayed"),
                        ("due_to_start_delayed", "  delayed, due→start"), ("enqueue_to_done", "enqueue→done")):
        h = lat[name]
        rows.append((f"{label} p50 / p99 / max (ms)",
                     f"{_fmt(h['p50_ms'])} / {_fmt(h['p99_ms'])} / {_fmt(h['max_ms'])}"))
    for kind, errors in summary["errors"].items():
        for what, n in errors.items():
            rows.append((f"errors ({kind}): {what}", n))
    per = summary["cpu_ms_per_activity"]
    for role, pct in summary["cpu_percent"].items():
        rows.append((f"CPU: {role} (% of a core; ms per activity)", f"{_fmt(pct)}; {_fmt(per.get(role))}"))
    for name, value in rows:
        figures.add_row(name, _fmt(value))
    console.print(figures)
    verdict = Table(title="thresholds", show_header=True)
    for col in ("check", "value", "limit", "result"):
        verdict.add_column(col, justify="left" if col == "check" else "right")
    for ch in checks:
        result = Text("pass", style="green") if ch.ok else Text("FAIL", style="red")
        verdict.add_row(ch.name, _fmt(ch.value), _fmt(ch.limit), result)
    console.print(verdict)


def print_capacity(console: Console, steps: list[StepResult]) -> None:
    """Print a capacity run's steps as a rich table."""
    table = Table(title="capacity steps", show_header=True)
    for col in ("step", "users", "asked req/s", "sent req/s", "activities/s", "enqueue→start p50 / p99 (ms)",
                "over the limit", "failed requests", "result"):
        table.add_column(col, justify="right" if col != "result" else "left")
    for s in steps:
        if not s.complete:
            result = Text("partial (the load stopped in it): not judged", style="dim")
        elif s.ok:
            result = Text("held", style="green")
        else:
            result = Text(s.reason, style="red")
        table.add_row(str(s.step), str(s.users), _fmt(s.asked_rate), _fmt(s.sent_rate), _fmt(s.activities_per_s),
                      f"{_fmt(s.p50_ms)} / {_fmt(s.p99_ms)}", _fmt(s.late), _fmt(s.failures), result)
    console.print(table)
