"""The regression gate's decisions (benchmarks/gate.py): floors file, verdicts, baseline choice.

No benchmark runs here: the figures are given, and the baseline choice runs
against a throwaway git repository.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gate

FLOORS_TOML = """
[gate]
rounds = 4
micro_rounds = 2
confirm_rounds = 4
micro_confirm_rounds = 1
fail_below = 0.85
warn_below = 0.95

[workload]
idle_samples = 10

[workload.n]
memory = 100
sqlite = 100
postgresql = 100
redis = 100

[micro_short_calls]
below_ns = 1000
fail_below = 0.65
warn_below = 0.9
reason = "short calls are noisy"

[figures]
"memory.idle_p50" = { fail_below = 0.70, reason = "noisy" }

[normalised]
"postgresql.drain" = 0.30
micro_speedup = 0.9
"""


def floors(tmp_path: Path, text: str = FLOORS_TOML) -> gate.Floors:
    path = tmp_path / "floors.toml"
    path.write_text(text)
    return gate.Floors.load(path)


def test_the_committed_floors_file_loads() -> None:
    f = gate.Floors.load(gate.FLOORS)
    assert f.rounds >= 1 and 0 < f.default.fail_below <= f.default.warn_below
    assert set(f.n) >= set(gate.BACKENDS)
    assert all(floor.reason for floor in f.per_figure.values())


def test_a_figure_floor_overrides_the_default_and_keeps_the_default_warn_band(tmp_path: Path) -> None:
    f = floors(tmp_path)
    assert f.floor("memory.idle_p50") == gate.Floor(0.70, 0.95, "noisy")
    assert f.floor("memory.drain") == gate.Floor(0.85, 0.95)


@pytest.mark.parametrize(("old", "new", "message"), [
    ('{ fail_below = 0.70, reason = "noisy" }', "{ fail_below = 0.70 }", "no reason"),
    ("warn_below = 0.95", "warn_below = 0.80", "fail_below <= warn_below"),
    ("redis = 100", "", "has no redis"),
    ("rounds = 4", "rounds = 0", "rounds >= 1"),
    ("[gate]", "[gate\n", "floors.toml"),
    ('reason = "short calls are noisy"', "", "needs a reason"),
])
def test_a_bad_floors_file_is_refused_with_the_reason(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in FLOORS_TOML
    with pytest.raises(gate.BadInput, match=message):
        floors(tmp_path, FLOORS_TOML.replace(old, new, 1))


def test_throughput_ratio_is_the_median_of_per_round_current_over_baseline(tmp_path: Path) -> None:
    fig = gate.Figure("memory.drain", "1/s", True, current=[90.0, 100.0, 50.0], baseline=[100.0, 100.0, 100.0])
    v = gate.judge(fig, floors(tmp_path), have_baseline=True)
    assert (v.ratio, v.ratio_min, v.ratio_max) == (0.9, 0.5, 1.0)
    assert v.status == "warn"     # 0.85 <= 0.9 < 0.95


def test_a_latency_ratio_is_inverted_so_higher_is_better(tmp_path: Path) -> None:
    fig = gate.Figure("redis.idle_p50", "ms", False, current=[2.0, 2.0], baseline=[1.0, 1.0])
    v = gate.judge(fig, floors(tmp_path), have_baseline=True)
    assert v.ratio == 0.5 and v.status == "fail"


def test_a_figure_at_its_floor_passes_and_below_it_fails(tmp_path: Path) -> None:
    f = floors(tmp_path)
    at = gate.judge(gate.Figure("sqlite.drain", "1/s", True, [95.0], [100.0]), f, True)
    below = gate.judge(gate.Figure("sqlite.drain", "1/s", True, [84.0], [100.0]), f, True)
    override = gate.judge(gate.Figure("memory.idle_p50", "ms", False, [1.25], [1.0]), f, True)
    assert (at.status, below.status, override.status) == ("ok", "fail", "warn")   # 0.8: above its own 0.70


def test_rounds_are_paired_so_a_slow_round_slows_both_sides_alike(tmp_path: Path) -> None:
    # round 2 ran while the machine was busy: both trees lost half; the paired ratio does not move
    fig = gate.Figure("postgresql.drain", "1/s", True, current=[100.0, 50.0, 100.0], baseline=[100.0, 50.0, 100.0])
    assert gate.judge(fig, floors(tmp_path), True).ratio == 1.0


def test_a_micro_benchmark_of_one_tree_only_is_reported_not_gated(tmp_path: Path) -> None:
    fig = gate.Figure("micro.new hot path", "x", True, current=[3.0], baseline=[])
    v = gate.judge(fig, floors(tmp_path), have_baseline=True)
    assert v.status == "info" and "one tree" in v.note


def test_without_a_baseline_only_figures_with_a_bare_loop_floor_are_gated(tmp_path: Path) -> None:
    f = floors(tmp_path)
    pg = gate.judge(gate.Figure("postgresql.drain", "1/s", True, current=[30.0, 40.0], bare=[100.0, 100.0]), f, False)
    slow = gate.judge(gate.Figure("postgresql.drain", "1/s", True, current=[20.0, 25.0], bare=[100.0, 100.0]), f,
                      False)
    memory = gate.judge(gate.Figure("memory.drain", "1/s", True, current=[100.0]), f, False)
    micro = gate.judge(gate.Figure("micro.codec", "x", True, current=[0.8, 0.85]), f, False)
    assert (pg.ratio, pg.status) == (0.35, "ok")
    assert (slow.ratio, slow.status) == (0.225, "fail")
    assert memory.status == "info"
    assert (micro.ratio, micro.status) == (0.825, "fail")     # compiled slower than 0.9x pure


def test_a_sub_microsecond_micro_benchmark_gets_the_short_call_floor(tmp_path: Path) -> None:
    f = floors(tmp_path)
    short = gate.Figure("micro.scoring", "x", True, current=[7.0, 7.0], baseline=[10.0, 10.0],
                        call_seconds=[80e-9, 90e-9])
    long = gate.Figure("micro.worker", "x", True, current=[7.0, 7.0], baseline=[10.0, 10.0], call_seconds=[1e-3, 1e-3])
    assert gate.judge(short, f, True).status == "warn"     # 0.7: above the short-call floor 0.65
    assert gate.judge(long, f, True).status == "fail"      # 0.7: below the default 0.85


def test_a_figure_without_measurements_fails(tmp_path: Path) -> None:
    v = gate.judge(gate.Figure("redis.drain", "1/s", True), floors(tmp_path), True)
    assert v.status == "fail" and v.note == "no measurement"


# --------------------------------------------------------------------------- baseline choice


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with two commits on main; the gate looks at it."""
    _git(tmp_path, "init", "-q", "-b", "main")
    for i in (1, 2):
        (tmp_path / "f.txt").write_text(str(i))
        _git(tmp_path, "add", "f.txt")
        _git(tmp_path, "commit", "-q", "-m", f"c{i}")
    monkeypatch.setattr(gate, "ROOT", tmp_path)
    return tmp_path


def test_on_a_branch_the_baseline_is_the_merge_base_with_main(repo: Path) -> None:
    base = _git(repo, "rev-parse", "main")
    _git(repo, "switch", "-q", "-c", "topic")
    (repo / "f.txt").write_text("topic")
    _git(repo, "commit", "-q", "-am", "topic")
    assert gate.resolve_baseline(None) == (base, "merge-base of HEAD with main")


def test_on_main_the_baseline_is_the_previous_main(repo: Path) -> None:
    parent = _git(repo, "rev-parse", "HEAD^1")
    assert gate.resolve_baseline(None) == (parent, "first parent of HEAD (the previous main)")


def test_uncommitted_changes_on_main_are_measured_against_head(repo: Path) -> None:
    (repo / "f.txt").write_text("edited")
    assert gate.resolve_baseline(None) == (_git(repo, "rev-parse", "HEAD"),
                                           "HEAD (the working tree has uncommitted changes)")


def test_a_clone_without_history_has_no_baseline(repo: Path, tmp_path_factory: pytest.TempPathFactory,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    shallow = tmp_path_factory.mktemp("shallow")
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    monkeypatch.setattr(gate, "ROOT", shallow)
    commit, why = gate.resolve_baseline(None)
    assert commit is None and "shallow" in why


def test_an_explicit_baseline_must_be_a_commit(repo: Path) -> None:
    assert gate.resolve_baseline("HEAD~1")[0] == _git(repo, "rev-parse", "HEAD~1")
    with pytest.raises(gate.BadInput, match="not a commit"):
        gate.resolve_baseline("no-such-ref")


def test_median_upper_bound_is_the_sign_test_order_statistic() -> None:
    values = [float(i) for i in range(1, 17)]          # 16 rounds: the 12th smallest
    assert gate.median_upper_bound(values) == 12.0
    assert gate.median_upper_bound(values[:8]) == 7.0  # 8 rounds: the 7th
    assert gate.median_upper_bound([3.0, 1.0, 2.0]) == 3.0


def test_a_median_below_the_floor_fails_only_when_significantly_below(tmp_path: Path) -> None:
    f = floors(tmp_path)
    # identical code on a machine whose load halves a run at random: median 0.8, but 5 of 16 rounds >= 1.0;
    # slow: the same machine, one extra await per activity (gate-demo): median 0.76, 12 of 16 rounds < 0.95
    noisy = [0.5, 0.55, 0.6, 0.62, 0.7, 0.75, 0.78, 0.8, 0.8, 0.84, 0.9, 1.0, 1.1, 1.2, 1.3, 1.9]
    slow = [0.35, 0.43, 0.52, 0.58, 0.6, 0.67, 0.7, 0.7, 0.81, 0.87, 0.91, 0.94, 0.96, 1.15, 1.26, 1.31]
    v_noisy = gate.judge(gate.Figure("redis.drain", "1/s", True, noisy, [1.0] * 16), f, True)
    v_slow = gate.judge(gate.Figure("redis.drain", "1/s", True, slow, [1.0] * 16), f, True)
    assert v_noisy.below_floor and v_noisy.status == "warn" and "not significantly" in v_noisy.note
    assert v_slow.below_floor and v_slow.status == "fail" and v_slow.ratio_upper == 0.94   # < warn_below 0.95
