"""benchmarks/compare.py's report: medians per entry and runnerq-fast / entry ratios on the same backend."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import compare


def _series(key: str, drain: list[float], enqueue: list[float]) -> compare.Series:
    entry = next(e for e in compare.ENTRIES if e.key == key)
    return compare.Series(entry, 100, drain=drain, enqueue=enqueue)


def test_ratios_compare_runnerq_fast_with_each_entry_of_its_backend_by_median() -> None:
    rows = {r.key: r for r in compare.build_rows([
        _series("runnerq/postgresql", [30_000.0, 10_000.0, 20_000.0], [40_000.0, 40_000.0, 40_000.0]),
        _series("pgqueuer/best", [5_000.0, 4_000.0, 6_000.0], [20_000.0, 10_000.0, 30_000.0]),
        _series("bare/postgresql", [40_000.0, 40_000.0, 40_000.0], [80_000.0, 80_000.0, 80_000.0]),
        _series("runnerq/redis", [1_000.0], [1_000.0]),
    ])}
    assert rows["runnerq/postgresql"].drain_median == 20_000.0
    assert rows["runnerq/postgresql"].runnerq_over_this_drain is None
    assert rows["pgqueuer/best"].runnerq_over_this_drain == 4.0       # 20,000 / 5,000
    assert rows["pgqueuer/best"].runnerq_over_this_enqueue == 2.0     # 40,000 / 20,000
    assert (rows["pgqueuer/best"].drain_min, rows["pgqueuer/best"].drain_max) == (4_000.0, 6_000.0)
    assert rows["bare/postgresql"].runnerq_over_this_drain == 0.5     # runnerq-fast at half the bare loop
    assert rows["pgqueuer/best"].bare_over_this_drain == 8.0          # the bare loop: 40,000 / 5,000
    assert rows["bare/postgresql"].bare_over_this_drain is None
    assert rows["runnerq/postgresql"].bare_over_this_drain is None


def test_an_entry_whose_runs_all_failed_has_no_figures_and_keeps_its_errors() -> None:
    failed = _series("arq/best", [], [])
    failed.errors.append("exit 1: ConnectionError")
    (row,) = compare.build_rows([failed])
    assert row.drain_median is None and row.runnerq_over_this_drain is None
    assert row.errors == ["exit 1: ConnectionError"]


def test_every_peer_module_named_by_an_entry_exists_and_declares_its_variant() -> None:
    for e in compare.ENTRIES:
        if e.kind == "runnerq":
            continue
        source = (compare.PEERS / e.script).read_text()
        assert f'"{e.variant}":' in source, (e.key, e.script)
