"""Regression gate: fail when a change makes runnerq-fast's hot paths slower than its baseline.

::

    .venv/bin/python benchmarks/gate.py                 # what .ci/run runs
    .venv/bin/python benchmarks/gate.py --baseline HEAD~1 --rounds 12

Absolute figures on a shared 2-core machine move by ±30 % from one run to the
next, so the gate never compares against a stored number. It measures a
**baseline tree in the same job** and compares ratios:

1. the baseline is the merge-base of ``HEAD`` with ``main`` (``origin/main``
   first), or ``HEAD``'s first parent when ``HEAD`` is on main (CI clones main,
   so that is the previous main), or ``HEAD`` itself when the working tree has
   uncommitted changes; ``--baseline REF`` overrides. It is ``git archive``-d
   into ``benchmarks/results/.baseline-<commit>-...`` (kept as a cache for
   the next run) and its Cython modules are built in place with this
   interpreter's Cython;
2. each round runs ``runnerq-fast bench`` (through the tree's own CLI entry
   point, so any layout of the package works) on memory, SQLite, PostgreSQL
   and Redis, for both trees, alternating which tree goes first, each in its
   own subprocess with ``PYTHONPATH`` at that tree; every tree has its own
   PostgreSQL database (created and dropped here), its own SQLite files and
   its own database of a private ``redis-server`` this script starts;
3. the bare reference loops (``benchmarks/peers/bare_pg.py``,
   ``bare_redis.py``) run once per round as well: they normalise the figures
   when no baseline can be built (a shallow clone) and show how much of a
   round's noise the machine itself contributes;
4. ``benchmarks/micro`` (pytest-benchmark) runs in each tree with that tree's
   own tests, giving compiled-vs-pure speedups;
5. per figure the median of the per-round ratios is compared with the floors
   of ``benchmarks/gate_floors.toml``: below ``fail_below`` fails, below
   ``warn_below`` warns. A figure below its floor first gets its backend (or
   the micro-benchmarks) measured for more rounds, and fails only if, over
   all its rounds, the median is still below the floor and the figure is
   below ``warn_below`` with 95 % confidence (sign test: the upper confidence
   bound of the median, an order statistic, is below ``warn_below``);
   otherwise it is a warning that says so.

Every run's figures are printed as a table and written as JSON to
``benchmarks/results/gate-<UTC time>.json`` (an ignored path). Exit status: 0
pass (warnings included), 1 a figure fell below its floor or a run failed,
2 bad input (floors file, unknown baseline reference).
"""

from __future__ import annotations

import io
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import msgspec
from _services import PgDatabases, PrivateRedis, ServiceUnavailable
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FLOORS = ROOT / "benchmarks" / "gate_floors.toml"
BACKENDS = ("memory", "sqlite", "postgresql", "redis")
MICRO_MEAN = "micro.geometric mean (all)"
# The tree's console-script entry point (pyproject: runnerq-fast = "runnerq_fast.cli:main"), which
# works whether runnerq_fast.cli is a module or a package.
CLI = "import sys; from runnerq_fast.cli import main; sys.argv[0] = 'runnerq-fast'; main()"
DEFAULT_PG = os.environ.get("RUNNERQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


class GateError(Exception):
    """A run the gate needs failed (exit status 1)."""


class BadInput(Exception):
    """The gate was given something it cannot use (exit status 2)."""


# --------------------------------------------------------------------------- floors


@dataclass(frozen=True)
class Floor:
    """Floors of one figure (ratios, higher is better)."""

    fail_below: float
    warn_below: float
    reason: str = ""


@dataclass(frozen=True)
class Floors:
    """``benchmarks/gate_floors.toml``, checked."""

    rounds: int
    micro_rounds: int
    confirm_rounds: int
    micro_confirm_rounds: int
    micro_short_call_seconds: float
    micro_short_call: Floor
    default: Floor
    per_figure: dict[str, Floor]
    n: dict[str, int]
    idle_samples: int
    normalised: dict[str, float]

    def floor(self, figure: str) -> Floor:
        """The floor of ``figure`` (its own under ``[figures]``, else the default)."""
        return self.per_figure.get(figure, self.default)

    @classmethod
    def load(cls, path: Path) -> Floors:
        """Read and check the floors file.

        Raises
        ------
        BadInput
            If the file is missing, not TOML, or a value is out of range.
        """
        try:
            doc = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise BadInput(f"{path}: {exc}") from None
        try:
            gate = doc["gate"]
            default = Floor(float(gate["fail_below"]), float(gate["warn_below"]))
            per_figure = {
                name: Floor(float(v["fail_below"]), float(v.get("warn_below", default.warn_below)),
                            str(v.get("reason", "")))
                for name, v in doc.get("figures", {}).items()
            }
            workload = doc["workload"]
            short = doc.get("micro_short_calls", {})
            floors = cls(
                rounds=int(gate["rounds"]), micro_rounds=int(gate["micro_rounds"]),
                confirm_rounds=int(gate.get("confirm_rounds", 0)),
                micro_confirm_rounds=int(gate.get("micro_confirm_rounds", 0)),
                micro_short_call_seconds=float(short.get("below_ns", 0)) / 1e9,
                micro_short_call=Floor(float(short.get("fail_below", default.fail_below)),
                                       float(short.get("warn_below", default.warn_below)),
                                       str(short.get("reason", ""))),
                default=default,
                per_figure=per_figure, n={k: int(v) for k, v in workload["n"].items()},
                idle_samples=int(workload["idle_samples"]),
                normalised={k: float(v) for k, v in doc.get("normalised", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadInput(f"{path}: missing or invalid entry: {exc}") from None
        for name, f in [("[gate]", default), ("[micro_short_calls]", floors.micro_short_call), *per_figure.items()]:
            if not 0 < f.fail_below <= f.warn_below:
                raise BadInput(f"{path}: {name}: need 0 < fail_below <= warn_below")
            if name == "[micro_short_calls]" and floors.micro_short_call_seconds and not f.reason:
                raise BadInput(f"{path}: [micro_short_calls] needs a reason")
            if name not in ("[gate]", "[micro_short_calls]") and not f.reason:
                raise BadInput(f"{path}: figure {name!r} has its own floor but no reason")
        if (floors.rounds < 1 or floors.micro_rounds < 0 or floors.confirm_rounds < 0
                or floors.micro_confirm_rounds < 0 or floors.idle_samples < 1):
            raise BadInput(f"{path}: need rounds >= 1, idle_samples >= 1 and no negative micro_rounds, "
                           "confirm_rounds or micro_confirm_rounds")
        if missing := set(BACKENDS) - set(floors.n):
            raise BadInput(f"{path}: [workload.n] has no {', '.join(sorted(missing))}")
        return floors


# --------------------------------------------------------------------------- trees


@dataclass(frozen=True)
class Tree:
    """A source tree the gate runs: the one under test or the baseline."""

    label: str
    path: Path
    commit: str


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, ["git", *args], proc.stdout, proc.stderr)
    return proc.stdout.strip()


def _try_git(*args: str) -> str | None:
    try:
        return _git(*args)
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def resolve_baseline(ref: str | None) -> tuple[str | None, str]:
    """Choose the baseline commit.

    Returns
    -------
    (commit or None, why)
        ``None`` when there is no usable history (then the gate normalises by the bare loops).

    Raises
    ------
    BadInput
        If ``ref`` is given and is not a commit.
    """
    if _try_git("rev-parse", "--git-dir") is None:
        return None, "not a git checkout"
    if ref is not None:
        commit = _try_git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if commit is None:
            raise BadInput(f"--baseline {ref!r} is not a commit")
        return commit, f"--baseline {ref}"
    head = _git("rev-parse", "HEAD")
    dirty = bool(_try_git("status", "--porcelain", "--untracked-files=no"))
    for main in ("origin/main", "main"):
        if _try_git("rev-parse", "--verify", "--quiet", f"{main}^{{commit}}") is None:
            continue
        base = _try_git("merge-base", "HEAD", main)
        if base is not None and base != head:
            return base, f"merge-base of HEAD with {main}"
        break
    if dirty:
        return head, "HEAD (the working tree has uncommitted changes)"
    parent = _try_git("rev-parse", "--verify", "--quiet", "HEAD^1^{commit}")
    if parent is None:
        return None, "HEAD has no parent in this clone (shallow clone?)"
    return parent, "first parent of HEAD (the previous main)"


def _subprocess_env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RUNNERQ_NO_EXTENSIONS", "PYTHONPATH")}
    env["PYTHONPATH"] = str(tree)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _compiled_ok(tree: Path) -> str | None:
    """``None`` if the tree's compiled hot paths import, else why not."""
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c",
         "import runnerq_fast, runnerq_fast.speedups as s, sys; "
         "assert runnerq_fast.__file__.startswith(sys.argv[1]), runnerq_fast.__file__; "
         "print('ok' if s.enabled else s.import_error)", str(tree)],
        cwd=tree, env=_subprocess_env(tree), capture_output=True, text=True)
    out = proc.stdout.strip()
    if proc.returncode == 0 and out == "ok":
        return None
    return out or proc.stderr.strip().splitlines()[-1]


def build_baseline(commit: str) -> Path:
    """The baseline tree with its extensions built in place (cached by commit under ``benchmarks/results``).

    Raises
    ------
    GateError
        If the archive or the build fails.
    """
    import importlib.metadata

    key = f"{commit[:12]}-py{platform.python_version()}-cython{importlib.metadata.version('Cython')}"
    path = RESULTS / f".baseline-{key}"
    if path.is_dir() and _compiled_ok(path) is None:
        return path
    shutil.rmtree(path, ignore_errors=True)
    tmp = RESULTS / f".baseline-{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        raise GateError(f"git archive {commit[:12]} failed: {archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp, filter="data")
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace", "-j", "2"],
                           cwd=tmp, env=_subprocess_env(tmp), capture_output=True, text=True)
    if build.returncode != 0:
        tail = "\n".join((build.stdout + build.stderr).strip().splitlines()[-5:])
        raise GateError(f"building the baseline {commit[:12]} failed:\n{tail}")
    shutil.rmtree(tmp / "build", ignore_errors=True)
    if (why := _compiled_ok(tmp)) is not None:
        raise GateError(f"the baseline's compiled modules do not import: {why}")
    tmp.rename(path)
    return path


# --------------------------------------------------------------------------- runs


def _run(cmd: Sequence[str], tree: Path, what: str, timeout: float) -> None:
    try:
        proc = subprocess.run(list(cmd), cwd=tree, env=_subprocess_env(tree), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GateError(f"{what}: no result within {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise GateError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def bench(tree: Tree, url: str, n: int, idle_samples: int, out: Path) -> dict[str, Any]:
    """One ``runnerq-fast bench`` of ``tree`` on ``url``; its JSON result."""
    _run([sys.executable, "-c", CLI, "bench", "--backend", url, "-n", str(n), "--idle-samples", str(idle_samples),
          "--no-progress", "--log-level", "error", "--output-json", str(out)],
         tree.path, f"bench of the {tree.label} tree on {url.split(':')[0]}", timeout=300)
    result: dict[str, Any] = msgspec.json.decode(out.read_bytes())
    if not result.get("speedups_enabled", False):
        raise GateError(f"the {tree.label} tree ran its pure-Python twins (compiled modules did not load)")
    return result


def bare(kind: str, url: str, n: int, out: Path) -> dict[str, Any]:
    """One bare reference loop (``pg`` or ``redis``) from this tree's ``benchmarks/peers``; its JSON result."""
    script = ROOT / "benchmarks" / "peers" / f"bare_{kind}.py"
    flag = "--pg-dsn" if kind == "pg" else "--redis-url"
    _run([sys.executable, str(script), "--n", str(n), flag, url, "--output-json", str(out)], ROOT,
         f"bare {kind} loop", timeout=300)
    result: dict[str, Any] = msgspec.json.decode(out.read_bytes())
    return result


def micro(tree: Tree, out: Path) -> dict[str, tuple[float, float]]:
    """The tree's own ``benchmarks/micro`` hot-path benchmarks: ``{group: (pure / compiled, compiled seconds)}``.

    Each side is pytest-benchmark's fastest round (``min``): on a shared machine
    the minimum is the figure least disturbed by other processes.
    """
    target = "benchmarks/micro/test_hot_paths.py"
    if not (tree.path / target).is_file():
        target = "benchmarks/micro"
    if not (tree.path / target).exists():
        return {}   # a tree without micro-benchmarks: its figures are reported, not gated
    _run([sys.executable, "-m", "pytest", target, "-m", "bench", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
          "-W", "ignore::DeprecationWarning", "--benchmark-json", str(out), "--benchmark-max-time=0.1",
          "--benchmark-min-rounds=5", "--benchmark-disable-gc"],
         tree.path, f"micro-benchmarks of the {tree.label} tree", timeout=300)
    doc = msgspec.json.decode(out.read_bytes())
    medians: dict[str, dict[str, float]] = {}
    for b in doc["benchmarks"]:
        impl = "compiled" if "compiled" in b["param"] else "pure"
        medians.setdefault(b["group"], {})[impl] = b["stats"]["min"]
    return {g: (t["pure"] / t["compiled"], t["compiled"])
            for g, t in medians.items() if "pure" in t and "compiled" in t}


# --------------------------------------------------------------------------- figures


@dataclass
class Figure:
    """One gated figure over the rounds.

    ``current`` and ``baseline`` hold the raw values per round (activities/s,
    milliseconds, or pure/compiled speedups); ``ratios`` the per-round ratios,
    higher is better.
    """

    name: str
    unit: str
    higher_is_better: bool
    current: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    call_seconds: list[float] = field(default_factory=list)   # micro-benchmarks: compiled time per call

    @property
    def ratios(self) -> list[float]:
        """Per-round current/baseline (or baseline/current for a latency)."""
        out = []
        for c, b in zip(self.current, self.baseline, strict=False):
            if c > 0 and b > 0:
                out.append(c / b if self.higher_is_better else b / c)
        return out

    @property
    def normalised(self) -> list[float]:
        """Per-round current / bare reference loop."""
        return [c / r for c, r in zip(self.current, self.bare, strict=False) if r > 0]


CONFIDENCE = 0.95
"""How sure the gate must be that a figure is below its floor before it fails."""


def median_upper_bound(values: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """Distribution-free one-sided upper confidence bound of the median of ``values`` (sign test).

    The smallest order statistic ``x_(k)`` with ``P(Binomial(n, 1/2) < k) >= confidence``:
    the true median lies below it with that confidence. For 16 rounds it is the
    12th smallest value, for 8 the 7th, for 6 or fewer the largest.
    """
    xs = sorted(values)
    n = len(xs)
    cumulative = 0.0
    for k in range(n):
        cumulative += math.comb(n, k) / 2**n
        if cumulative >= confidence:
            return xs[k]
    return xs[-1]


def _cv(values: list[float]) -> float | None:
    """Coefficient of variation (stdev / mean) of ``values``; ``None`` for fewer than 3."""
    if len(values) < 3:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class Verdict(msgspec.Struct, kw_only=True):
    """The outcome of one figure, as written to the JSON.

    ``ratio`` is the median of the per-round ratios (current / baseline, higher
    is better) or, without a baseline, of current / bare loop (a micro-benchmark:
    pure / compiled); ``cv_ratio`` and ``cv_normalised`` are the spreads
    (stdev / mean) of the per-round current/baseline and current/bare ratios.
    """

    figure: str
    unit: str
    status: str = "info"                 # ok / warn / fail / info (not gated)
    below_floor: bool = False            # the median is below fail_below (fails only if also significant)
    ratio: float | None = None
    ratio_upper: float | None = None     # one-sided 95 % upper bound of the median ratio
    ratio_min: float | None = None
    ratio_max: float | None = None
    fail_below: float | None = None
    warn_below: float | None = None
    current_median: float | None = None
    baseline_median: float | None = None
    bare_median: float | None = None
    cv_ratio: float | None = None
    cv_normalised: float | None = None
    current: list[float] = []
    baseline: list[float] = []
    bare: list[float] = []
    note: str = ""


def judge(fig: Figure, floors: Floors, have_baseline: bool) -> Verdict:
    """Compare one figure with its floor."""
    ratios, norm = fig.ratios, fig.normalised
    v = Verdict(figure=fig.name, unit=fig.unit, current_median=_median(fig.current),
                baseline_median=_median(fig.baseline), bare_median=_median(fig.bare), cv_ratio=_cv(ratios),
                cv_normalised=_cv(norm), current=fig.current, baseline=fig.baseline, bare=fig.bare)
    micro = fig.name.startswith("micro.")
    if have_baseline:
        if micro and not (fig.current and fig.baseline):
            v.note = "in one tree only: not gated"
            return v
        floor = floors.floor(fig.name)
        if (micro and fig.name not in floors.per_figure and fig.call_seconds
                and statistics.median(fig.call_seconds) < floors.micro_short_call_seconds):
            floor = floors.micro_short_call
        values = ratios
        v.fail_below, v.warn_below, v.note = floor.fail_below, floor.warn_below, floor.reason
    else:
        values = fig.current if micro else norm
        limit = floors.normalised.get("micro_speedup" if micro else fig.name)
        if limit is None:
            v.ratio = _median(values)
            v.note = "no baseline and no bare-loop floor: not gated"
            return v
        v.fail_below, v.warn_below = limit, limit
        v.note = "no baseline: " + ("pure/compiled" if micro else "current / bare loop")
    if not values:
        v.status, v.note = "fail", "no measurement"
        return v
    v.ratio, v.ratio_min, v.ratio_max = statistics.median(values), min(values), max(values)
    v.ratio_upper = median_upper_bound(values)
    assert v.fail_below is not None and v.warn_below is not None
    v.below_floor = v.ratio < v.fail_below
    # fail: the median is past the floor AND the figure is below the warning line with 95 % confidence
    if v.below_floor and v.ratio_upper < v.warn_below:
        v.status = "fail"
    elif v.below_floor:
        v.status = "warn"
        v.note = (f"below the floor, not significantly: 95 % upper bound {v.ratio_upper:.2f} >= {v.warn_below:.2f}"
                  + (f"; {v.note}" if v.note else ""))
    else:
        v.status = "warn" if v.ratio < v.warn_below else "ok"
    return v


# --------------------------------------------------------------------------- the run


class Report(msgspec.Struct, kw_only=True):
    """Everything one gate run measured and decided (``benchmarks/results/gate-*.json``)."""

    started_at: str
    wall_seconds: float
    passed: bool
    mode: str                    # "baseline" or "bare-loop normalisation"
    current_commit: str | None
    current_dirty: bool
    baseline_commit: str | None
    baseline_reason: str
    rounds: int
    micro_rounds: int
    workload: dict[str, Any]
    machine: dict[str, Any]
    verdicts: list[Verdict]
    confirmed: dict[str, int]    # backend (or "micro") -> extra rounds run to confirm a figure below its floor
    errors: list[str]


@contextmanager
def services(pg_admin: str, backends: Sequence[str], trees: Sequence[str], ci: bool) -> Iterator[dict[str, Any]]:
    """Start/create what the backends need; yield ``{"<tree>.<backend>": url, "bare.pg": url, ...}``."""
    urls: dict[str, Any] = {}
    skipped: list[str] = []
    with ExitStack() as stack:
        if "postgresql" in backends:
            try:
                pg = stack.enter_context(PgDatabases(pg_admin))
                for t in (*trees, "bare"):
                    urls[f"{t}.postgresql"] = pg.create(t)
            except ServiceUnavailable as exc:
                if ci:
                    raise GateError(str(exc)) from None
                skipped.append(f"postgresql ({exc})")
        if "redis" in backends:
            try:
                redis = stack.enter_context(PrivateRedis())
                for db, t in enumerate((*trees, "bare")):
                    urls[f"{t}.redis"] = redis.url(db)
            except ServiceUnavailable as exc:
                if ci:
                    raise GateError(str(exc)) from None
                skipped.append(f"redis ({exc})")
        urls["skipped"] = skipped
        yield urls


def _print_table(report: Report) -> None:
    table = Table(title=f"runnerq-fast regression gate ({report.mode}; {report.rounds} rounds, "
                        f"{report.micro_rounds} micro rounds)", title_justify="left")
    for col in ("figure", "baseline", "current", "ratio (median)", "min-max", "cv", "floor", "verdict"):
        table.add_column(col, justify="left" if col in ("figure", "verdict") else "right")
    style = {"ok": "green", "warn": "yellow", "fail": "bold red", "info": "dim"}

    def num(v: float | None, unit: str) -> str:
        if v is None:
            return "-"
        return f"{v:,.0f}/s" if unit == "1/s" else f"{v:.3f} ms" if unit == "ms" else f"{v:.2f}x"

    for v in report.verdicts:
        rng = f"{v.ratio_min:.2f}-{v.ratio_max:.2f}" if v.ratio_min is not None and v.ratio_max is not None else "-"
        cv = v.cv_ratio if report.mode == "baseline" else v.cv_normalised
        table.add_row(
            v.figure, num(v.baseline_median, v.unit), num(v.current_median, v.unit),
            f"{v.ratio:.3f}" if v.ratio is not None else "-", rng, f"{cv:.1%}" if cv is not None else "-",
            f"{v.fail_below:.2f}" if v.fail_below is not None else "-",
            f"[{style[v.status]}]{v.status}[/]" + (f" ({v.note})" if v.note and v.status != "ok" else ""))
    console.print(table)


def run_gate(baseline_ref: str | None, floors: Floors, rounds: int, micro_rounds: int, backends: Sequence[str],
             pg_admin: str, force_bare: bool) -> Report:
    """Build the baseline, run every round, judge every figure (see the module docstring)."""
    t_start = time.perf_counter()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    ci = os.environ.get("CI", "").lower() == "true"
    errors: list[str] = []
    current = Tree("current", ROOT, _try_git("rev-parse", "HEAD") or "")
    dirty = bool(_try_git("status", "--porcelain", "--untracked-files=no"))
    if (why := _compiled_ok(ROOT)) is not None:
        raise GateError(f"the tree under test has no compiled hot paths ({why}): pip install -e '.[dev]' first")

    commit, reason = (None, "--bare given") if force_bare else resolve_baseline(baseline_ref)
    baseline: Tree | None = None
    if commit is not None:
        console.print(f"baseline: {commit[:12]} ({reason}); building it …")
        t0 = time.perf_counter()
        try:
            baseline = Tree("baseline", build_baseline(commit), commit)
            console.print(f"baseline built in {time.perf_counter() - t0:.1f} s: {baseline.path}")
        except GateError as exc:
            errors.append(f"baseline not built, falling back to bare-loop normalisation: {exc}")
            reason += f"; build failed: {exc}"
            console.print(f"[yellow]{errors[-1]}[/]")
    else:
        console.print(f"[yellow]no baseline ({reason}): normalising by the bare reference loops[/]")
    mode = "baseline" if baseline is not None else "bare-loop normalisation"
    trees = [current] if baseline is None else [current, baseline]

    figures: dict[str, Figure] = {}

    def fig(name: str, unit: str, higher: bool = True) -> Figure:
        return figures.setdefault(name, Figure(name, unit, higher))

    work = RESULTS / f".gate-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    confirmed: dict[str, int] = {}
    micro_means: dict[str, list[dict[str, tuple[float, float]]]] = {"current": [], "baseline": []}

    def e2e_round(r: int, active: Sequence[str], urls: dict[str, Any]) -> None:
        order = trees if r % 2 == 0 else trees[::-1]
        t0 = time.perf_counter()
        for kind, backend in (("pg", "postgresql"), ("redis", "redis")):
            if backend in active:
                res = bare(kind, urls[f"bare.{backend}"], floors.n[backend], work / f"bare-{kind}-{r}.json")
                fig(f"{backend}.drain", "1/s").bare.append(res["drain_per_s"])
                fig(f"{backend}.enqueue", "1/s").bare.append(res["enqueue_per_s"])
        for backend in active:
            for tree in order:
                if backend == "memory":
                    url = "memory://"
                elif backend == "sqlite":
                    url = f"sqlite:///{work / f'{tree.label}-{r}.db'}"
                else:
                    url = urls[f"{tree.label}.{backend}"]
                res = bench(tree, url, floors.n[backend], floors.idle_samples,
                            work / f"{tree.label}-{backend}-{r}.json")
                side = "current" if tree is current else "baseline"
                getattr(fig(f"{backend}.drain", "1/s"), side).append(res["process_per_s"])
                getattr(fig(f"{backend}.enqueue", "1/s"), side).append(res["enqueue_per_s"])
                getattr(fig(f"{backend}.idle_p50", "ms", higher=False), side).append(res["idle_latency"]["p50_ms"])
            for p in work.glob("*.db*"):
                p.unlink()
        first = "current" if order[0] is current else "baseline"
        console.print(f"round {r + 1} ({', '.join(active)}; {first} first) in {time.perf_counter() - t0:.1f} s")

    def micro_round(r: int) -> None:
        order = trees if r % 2 == 0 else trees[::-1]
        t0 = time.perf_counter()
        for tree in order:
            speedups = micro(tree, work / f"micro-{tree.label}-{r}.json")
            side = "current" if tree is current else "baseline"
            for group, (speedup, seconds) in speedups.items():
                f = fig(f"micro.{group}", "x")
                getattr(f, side).append(speedup)
                if side == "current":
                    f.call_seconds.append(seconds)
            micro_means[side].append(speedups)
        console.print(f"micro round {r + 1} in {time.perf_counter() - t0:.1f} s")

    def judge_all() -> list[Verdict]:
        # one more figure: the geometric mean over the micro-benchmarks both trees have, per round
        if micro_means["current"]:
            mean = Figure(MICRO_MEAN, "x", True)
            for r, cur in enumerate(micro_means["current"]):
                if baseline is None:
                    mean.current.append(statistics.geometric_mean(v[0] for v in cur.values()))
                elif r < len(micro_means["baseline"]) and (groups := set(cur) & set(micro_means["baseline"][r])):
                    base = micro_means["baseline"][r]
                    mean.current.append(statistics.geometric_mean(cur[g][0] for g in groups))
                    mean.baseline.append(statistics.geometric_mean(base[g][0] for g in groups))
            figures[MICRO_MEAN] = mean
        return [judge(f, floors, baseline is not None) for f in figures.values()]

    try:
        with services(pg_admin, backends, [t.label for t in trees], ci) as urls:
            for skipped in urls["skipped"]:
                errors.append(f"skipped {skipped}")
                console.print(f"[yellow]skipped {skipped}[/]")
            active = [b for b in backends if b in ("memory", "sqlite") or f"current.{b}" in urls]
            for r in range(rounds):
                e2e_round(r, active, urls)
            for r in range(micro_rounds):
                micro_round(r)
            verdicts = judge_all()
            # A figure below its floor is measured again before it fails the gate: its backend gets
            # confirm_rounds more rounds (the micro-benchmarks micro_confirm_rounds) and the verdict uses
            # all of them. Noise rarely survives twice as many rounds; a real slowdown does.
            failing = {v.figure.split(".")[0] for v in verdicts if v.below_floor}
            again = [b for b in active if b in failing] if floors.confirm_rounds else []
            micro_again = floors.micro_confirm_rounds if "micro" in failing else 0
            if again or micro_again:
                console.print(f"[yellow]below the floor: {', '.join(v.figure for v in verdicts if v.below_floor)}"
                              "; measuring again before failing[/]")
                for r in range(rounds, rounds + (floors.confirm_rounds if again else 0)):
                    e2e_round(r, again, urls)
                for b in again:
                    confirmed[b] = floors.confirm_rounds
                for r in range(micro_rounds, micro_rounds + micro_again):
                    micro_round(r)
                if micro_again:
                    confirmed["micro"] = micro_again
                verdicts = judge_all()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    passed = not any(v.status == "fail" for v in verdicts)
    return Report(
        started_at=started_at, wall_seconds=round(time.perf_counter() - t_start, 1), passed=passed, mode=mode,
        current_commit=current.commit or None, current_dirty=dirty,
        baseline_commit=baseline.commit if baseline is not None else None, baseline_reason=reason,
        rounds=rounds, micro_rounds=micro_rounds,
        workload={"n": {b: floors.n[b] for b in backends}, "idle_samples": floors.idle_samples},
        machine={"python": platform.python_version(), "platform": platform.platform(),
                 "cpu_count": os.cpu_count() or 0, "ci": ci},
        verdicts=verdicts, confirmed=confirmed, errors=errors)



def _exit_cleanly_on_signals() -> None:
    """SIGTERM (and SIGINT, even where the parent ignores it) unwind the stack, so servers and databases go."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


@click.command()
@click.option("--baseline", "baseline_ref", metavar="REF",
              help="Commit to compare with (default: merge-base with main, or the previous main).")
@click.option("--bare", "force_bare", is_flag=True,
              help="Build no baseline; gate on the bare-loop-normalised floors only (what a shallow clone gets).")
@click.option("--rounds", type=click.IntRange(min=1), help="End-to-end rounds (default: gate_floors.toml).")
@click.option("--micro-rounds", type=click.IntRange(min=0), help="Micro-benchmark rounds (default: gate_floors.toml).")
@click.option("--backends", default=",".join(BACKENDS), show_default=True, help="Comma-separated backends to run.")
@click.option("--floors", "floors_path", type=click.Path(dir_okay=False, path_type=Path), default=FLOORS,
              show_default=True)
@click.option("--pg-admin", default=DEFAULT_PG, show_default=True,
              help="PostgreSQL URL allowed to CREATE DATABASE (env RUNNERQ_TEST_PG).")
@click.option("--output-json", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write the report here (it always goes to benchmarks/results/gate-<time>.json).")
def main(baseline_ref: str | None, force_bare: bool, rounds: int | None, micro_rounds: int | None, backends: str,
         floors_path: Path, pg_admin: str, output_json: Path | None) -> None:
    """Fail when the hot paths got slower than the baseline (see benchmarks/README.md)."""
    _exit_cleanly_on_signals()
    try:
        floors = Floors.load(floors_path)
        chosen = [b.strip() for b in backends.split(",") if b.strip()]
        if unknown := [b for b in chosen if b not in BACKENDS]:
            raise BadInput(f"unknown backend(s): {', '.join(unknown)} (choose from {', '.join(BACKENDS)})")
        report = run_gate(baseline_ref, floors, rounds or floors.rounds,
                          floors.micro_rounds if micro_rounds is None else micro_rounds, chosen, pg_admin, force_bare)
    except BadInput as exc:
        console.print(f"gate: error: {exc}", style="red", soft_wrap=True)
        raise SystemExit(2) from None
    except GateError as exc:
        console.print(f"gate: FAIL: {exc}", style="bold red", soft_wrap=True)
        raise SystemExit(1) from None

    _print_table(report)
    for e in report.errors:
        console.print(f"[yellow]note: {e}[/]")
    data = msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"gate-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_bytes(data)
    if output_json is not None:
        output_json.parent.mkdir(parents=True, exist_ok=True)
        output_json.write_bytes(data)
    fails = [v for v in report.verdicts if v.status == "fail"]
    warns = [v for v in report.verdicts if v.status == "warn"]
    summary = ", ".join(f"{v.figure} {v.ratio:.2f} < {v.fail_below:.2f}" if v.ratio is not None else v.figure
                        for v in fails)
    verdict = "PASS" if report.passed else "FAIL"
    console.print(f"gate: {verdict} ({report.mode}, baseline {(report.baseline_commit or '-')[:12]}): "
                  f"{len(report.verdicts)} figures, {len(fails)} failed, {len(warns)} warnings, "
                  f"{report.wall_seconds:.0f} s; wrote {path.relative_to(ROOT)}"
                  + (f"; failed: {summary}" if fails else ""),
                  style="green" if report.passed else "bold red", soft_wrap=True)
    if not report.passed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
