"""Run one load test: ``serve``, N worker processes, locust headless, then the drain and the report.

Every part is a real process on a free loopback port: ``runnerq-fast serve``,
``runnerq-fast worker runnerq_fast.loadtest.app:make_engine --processes N``
and ``python -m locust`` (gevent lives only there). While locust runs, and
until the queue has drained, the runner reads the queue's counts by status
from the store and the CPU time of every process (psutil) once a second.
Then it stops the workers and ``serve`` gracefully, reads what the processes
recorded (:mod:`runnerq_fast.loadtest.records`) and locust's CSV files, and
writes the outputs (:mod:`runnerq_fast.loadtest.report`) into the output
directory:

``locust_stats.csv``, ``locust_failures.csv``, ``locust_stats_history.csv``,
``locust.html``, ``summary.json``, ``chart.png``, ``serve.log``,
``workers.log``, ``locust.log`` and ``records/``; in capacity mode also
``records/steps.tsv`` and, when a step broke while the load ran, ``stop``
(the file that ends locust's step shape, holding the reason).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO, Any

import msgspec
import psutil
from rich.console import Console
from rich.text import Text

import runnerq_fast as rq
from runnerq_fast.loadtest.app import RECORDS_ENV
from runnerq_fast.loadtest.capacity import LiveJudge, capacity_verdict, judge_steps, read_locust_history, read_steps
from runnerq_fast.loadtest.records import read_accepted, read_runs
from runnerq_fast.loadtest.report import print_capacity, print_table, write_chart, write_json
from runnerq_fast.loadtest.summary import Sample, Thresholds, evaluate, read_locust_csv, summarize
from runnerq_fast.loadtest.verdict import P99_CHECK, judge
from runnerq_fast.urls import redact_url

__all__ = ["LoadTestOptions", "cores", "run_loadtest"]


class LoadTestOptions(msgspec.Struct, kw_only=True, frozen=True):
    """What one load test runs (see ``runnerq-fast loadtest --help`` for each).

    Attributes
    ----------
    backend : str
        Backend URL.
    locustfile : Path
        The locustfile to run.
    output : Path
        Directory for every output (created).
    duration : float
        Seconds of load.
    users : int
        locust users.
    rate : float
        Requests per second over all users (0: as fast as they can).
    workers : int
        Worker processes.
    concurrency : int
        Activities run at once per worker process.
    api_weight, http_weight : int
        locust's weights of the Python-API and HTTP users.
    shape : str
        ``""``, ``"step"`` or ``"spike"``.
    locust_processes : int
        locust processes (``--processes``; 1 = no forking).
    drain_timeout : float
        Seconds to wait for the queue to drain after the load.
    thresholds : Thresholds
        Pass/fail limits.
    capacity : bool
        Capacity mode (:mod:`runnerq_fast.loadtest.capacity`): ``users`` more
        users every ``step_seconds``, each at ``rate / users`` requests/s, for
        at most ``max_steps`` steps, until a step breaks a limit; ``duration``
        and ``shape`` do not apply.
    step_seconds : float
        Seconds of one capacity step.
    max_steps : int
        Capacity steps at most.
    """

    backend: str
    locustfile: Path
    output: Path
    duration: float = 30.0
    users: int = 20
    rate: float = 1000.0
    workers: int = 2
    concurrency: int = 64
    api_weight: int = 1
    http_weight: int = 3
    shape: str = ""
    locust_processes: int = 1
    drain_timeout: float = 120.0
    thresholds: Thresholds = Thresholds()
    capacity: bool = False
    step_seconds: float = 10.0
    max_steps: int = 20


def cores() -> int:
    """CPU cores of this machine (what ``psutil.cpu_percent`` times the count is measured against)."""
    return psutil.cpu_count() or 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("runnerq-fast")
    return [str(script)] if script.exists() else [sys.executable, "-m", "runnerq_fast.cli"]


class _Proc:
    """A child process whose output goes to a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.log_path = log
        self._log: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._signalled = False

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> None:
        """Send SIGTERM once (a second one would stop `serve` and the supervisor at once, not gracefully)."""
        if not self._signalled and self.proc.poll() is None:
            self._signalled = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> int:
        self.terminate()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


class _Cpu:
    """CPU use by role since the previous reading, in percent of one core."""

    def __init__(self, roots: dict[str, int], store_names: tuple[str, ...]) -> None:
        self.roots = roots
        self.store_names = store_names
        self._last: dict[int, float] = {}
        self._last_t = time.monotonic()
        self._procs: dict[int, psutil.Process] = {}
        psutil.cpu_percent()

    def _tree(self) -> dict[int, str]:
        roles: dict[int, str] = {}
        for role, pid in self.roots.items():
            try:
                root = psutil.Process(pid)
                members = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for p in members:
                try:
                    agent = role == "locust" and "runnerq_fast.loadtest.agent" in " ".join(p.cmdline())
                except psutil.Error:
                    continue
                roles[p.pid] = "api agent" if agent else role
        if self.store_names:
            for p in psutil.process_iter(["name"]):
                if p.info["name"] in self.store_names:
                    roles[p.pid] = "store"
        return roles

    def read(self) -> dict[str, float]:
        now = time.monotonic()
        wall = max(now - self._last_t, 1e-6)
        self._last_t = now
        out: dict[str, float] = {}
        seen: dict[int, float] = {}
        for pid, role in self._tree().items():
            p = self._procs.get(pid)
            try:
                if p is None:
                    p = self._procs[pid] = psutil.Process(pid)
                t = p.cpu_times()
            except psutil.Error:
                continue
            total = t.user + t.system
            seen[pid] = total
            if pid in self._last:
                out[role] = out.get(role, 0.0) + (total - self._last[pid]) / wall * 100
        self._last = seen
        out["machine"] = psutil.cpu_percent() * (psutil.cpu_count() or 1)
        return {k: round(v, 1) for k, v in out.items()}


def _wait_port(port: int, proc: _Proc, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start:\n{proc.text()[-3000:]}") from None
            time.sleep(0.05)


async def _wait_log(proc: _Proc, text: str, count: int, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while proc.text().count(text) < count:
        if proc.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n{proc.text()[-3000:]}")
        await asyncio.sleep(0.1)


def _sample(stats: rq.QueueStats, cpu: dict[str, float]) -> Sample:
    backlog = stats.pending + stats.scheduled + stats.retrying + stats.processing
    return Sample(time.time(), backlog, stats.processing, cpu)


async def run_loadtest(opts: LoadTestOptions, console: Console) -> int:
    """Run the load test ``opts`` describes and write its outputs.

    Returns
    -------
    int
        The verdict's exit code (:mod:`runnerq_fast.loadtest.verdict`): 0
        passed, 1 failed, 3 inconclusive.

    Raises
    ------
    RuntimeError
        If ``serve``, the workers or locust could not start.
    """
    out = opts.output
    records = out / "records"
    records.mkdir(parents=True, exist_ok=True)
    queue = f"lt-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RUNNERQ_BACKEND"}
    env.update(PYTHONUNBUFFERED="1", RUNNERQ_LOADTEST_QUEUE=queue, RUNNERQ_LOADTEST_RECORDS=str(records))
    env[RECORDS_ENV] = str(records)
    console.print(f"load test: queue {queue} on {redact_url(opts.backend)}, outputs in {out}")
    backend = await rq.connect(opts.backend)  # creates or migrates the schema before anything starts
    procs: list[_Proc] = []
    samples: list[Sample] = []
    try:
        serve = _Proc([*_cli(), "serve", "--backend", opts.backend, "--port", str(port), "--log-level", "warning"],
                      out / "serve.log", env)
        procs.append(serve)
        workers = _Proc([*_cli(), "worker", "runnerq_fast.loadtest.app:make_engine", "--backend", opts.backend,
                         "--queue", queue, "--processes", str(opts.workers), "--concurrency", str(opts.concurrency),
                         "--log-level", "info"], out / "workers.log", env)
        procs.append(workers)
        _wait_port(port, serve, "runnerq-fast serve")
        await _wait_log(workers, " started on ", opts.workers, "the workers")
        scheme = opts.backend.split(":", 1)[0]
        # the store's server processes, for the CPU table (rediss:// and redis+cluster:// are redis-server too)
        store = ("postgres",) if scheme.startswith("postgres") else ("redis-server",) if "redis" in scheme else ()
        user_rate = opts.rate / opts.users if opts.rate > 0 else 0.0
        locust_env = {
            **env,
            "RUNNERQ_LOADTEST_BACKEND": opts.backend,
            "RUNNERQ_LOADTEST_RATE": str(user_rate),
            "RUNNERQ_LOADTEST_SHAPE": "capacity" if opts.capacity else opts.shape,
            "RUNNERQ_LOADTEST_API_WEIGHT": str(opts.api_weight),
            "RUNNERQ_LOADTEST_HTTP_WEIGHT": str(opts.http_weight),
            "RUNNERQ_LOADTEST_STEP_USERS": str(opts.users),
            "RUNNERQ_LOADTEST_STEP_SECONDS": str(opts.step_seconds),
            "RUNNERQ_LOADTEST_MAX_STEPS": str(opts.max_steps),
            "RUNNERQ_LOADTEST_STOP_FILE": str(out / "stop"),
        }
        prefix = out / "locust"
        # capacity: the shape ends the load (at the last step, or at the stop file); -t only bounds it
        seconds = opts.step_seconds * opts.max_steps + 30 if opts.capacity else opts.duration
        argv = [sys.executable, "-m", "locust", "-f", str(opts.locustfile), "--headless",
                "--host", f"http://127.0.0.1:{port}", "-u", str(opts.users), "-r", str(opts.users),
                "-t", f"{max(1, round(seconds))}s", "--stop-timeout", "5", "--csv", str(prefix),
                "--csv-full-history", "--html", str(out / "locust.html"), "--only-summary", "--loglevel", "WARNING",
                "--exit-code-on-error", "0"]
        if opts.locust_processes > 1:
            argv += ["--processes", str(opts.locust_processes)]
        cpu = _Cpu({"locust": 0, "serve": serve.proc.pid, "workers": workers.proc.pid}, store)
        load_before = os.getloadavg()
        t0 = time.time()
        locust = _Proc(argv, out / "locust.log", locust_env)
        procs.append(locust)
        cpu.roots["locust"] = locust.proc.pid
        if opts.capacity:
            console.print(f"capacity: {opts.rate:g} req/s ({opts.users} users) more every {opts.step_seconds:g} s, "
                          f"at most {opts.max_steps} steps, until a step breaks a limit; "
                          f"{opts.workers} worker processes x {opts.concurrency} slots")
        else:
            console.print(f"load: {opts.users} users, {'no rate limit' if opts.rate <= 0 else f'{opts.rate:g} req/s'}"
                          f"{f', shape {opts.shape}' if opts.shape else ''}, {opts.duration:g} s; "
                          f"{opts.workers} worker processes x {opts.concurrency} slots")
        live = LiveJudge(records, prefix, user_rate, opts.thresholds, cores()) if opts.capacity else None
        while locust.proc.poll() is None:
            await asyncio.sleep(1.0)
            samples.append(_sample(await backend.stats(queue), cpu.read()))
            if live is not None and not (out / "stop").exists():
                judged = len(live.judged)
                broke = live.poll(time.time(), samples)
                for step in sorted(live.judged)[judged:]:
                    r = live.judged[step]
                    console.print(f"  step {step}: {r.asked_rate:,.0f} req/s asked, {r.sent_rate:,.0f} sent, "
                                  f"enqueue→start p99 {r.p99_ms or 0:,.0f} ms: {'held' if r.ok else r.reason}")
                if broke is not None:
                    (out / "stop").write_text(f"step {broke.step}: {broke.reason}\n", encoding="utf-8")
                    console.print(f"step {broke.step} broke: stopping the load")
        load_end = time.time()
        load_after = os.getloadavg()
        if locust.proc.returncode != 0:
            console.print(Text.assemble((f"locust exited with {locust.proc.returncode}", "yellow"),
                                        f": see {locust.log_path}"))
        drained = False
        deadline = time.monotonic() + opts.drain_timeout
        while time.monotonic() < deadline:
            s = _sample(await backend.stats(queue), cpu.read())
            samples.append(s)
            if s.backlog == 0:
                drained = True
                break
            await asyncio.sleep(0.5)
        final = await backend.stats(queue)
    finally:
        for p in procs:  # every one gracefully, at once
            p.terminate()
        for p in procs:
            p.stop()
        await backend.close()
    loads = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]}
    return _report(opts, console, samples, t0, load_end, drained, msgspec.structs.asdict(final), queue, loads)


def _report(opts: LoadTestOptions, console: Console, samples: list[Sample], t0: float, load_end: float,
            drained: bool, store: dict[str, Any], queue: str, loads: dict[str, list[float]]) -> int:
    out = opts.output
    try:
        locust = read_locust_csv(out / "locust")
    except FileNotFoundError:
        locust = None
    accepted = read_accepted(out / "records")
    if accepted:  # the load's window: first to last send (not locust's start-up and report writing)
        t0, load_end = min(a.sent for a in accepted), max(a.sent for a in accepted)
    summary = summarize(accepted, read_runs(out / "records"), samples, locust,
                        t0=t0, load_end=load_end, drained=drained, store=store)
    n_cores = cores()
    summary["run"] = {
        "backend": redact_url(opts.backend), "queue": queue, "duration_s": opts.duration, "users": opts.users,
        "rate": opts.rate, "workers": opts.workers, "concurrency": opts.concurrency,
        "shape": "capacity" if opts.capacity else opts.shape,
        "locust_processes": opts.locust_processes, "cores": n_cores, "load_average_1_5_15min": loads,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
    }
    if opts.capacity:
        summary["run"].update(step_seconds=opts.step_seconds, max_steps=opts.max_steps)
    checks = evaluate(summary, opts.thresholds)
    steps = []
    if opts.capacity:  # the whole run's p99 and errors span the steps that broke: each step is judged alone
        checks = [c for c in checks if c.name not in (P99_CHECK, "error rate")]
        user_rate = opts.rate / opts.users
        windows = read_steps(out / "records" / "steps.tsv", user_rate, load_end)
        steps = judge_steps(windows, accepted, read_runs(out / "records"), read_locust_history(out / "locust"),
                            samples, opts.thresholds, step_seconds=opts.step_seconds, cores=n_cores)
        run_failures = [f"{c.name}: {c.value:,.4g} (limit {c.limit:,.4g})" for c in checks if not c.ok]
        verdict, best, broke = capacity_verdict(steps, run_failures, max_steps=opts.max_steps)
        stop = out / "stop"
        summary["capacity"] = {
            "steps": msgspec.to_builtins(steps),
            "sustained_rate": best.asked_rate if best else None,
            "sustained_activities_per_s": best.activities_per_s if best else None,
            "sustained_step": best.step if best else None,
            "broke_step": broke.step if broke else None,
            "stopped_live": stop.read_text(encoding="utf-8").strip() if stop.exists() else None,
        }
    else:
        verdict = judge(summary, checks, cores=n_cores, locust_processes=opts.locust_processes)
    summary["verdict"] = {"status": verdict.status, "line": verdict.line, "exit_code": verdict.exit_code}
    write_json(out / "summary.json", summary, checks)
    title = f"runnerq-fast load test: {redact_url(opts.backend)}, {opts.workers} workers"
    if not write_chart(out / "chart.png", summary, title):
        console.print(Text("matplotlib is not installed: no chart (pip install 'runnerq-fast[loadtest]')",
                           style="yellow"))
    print_table(console, summary, checks)
    if steps:
        print_capacity(console, steps)
    console.print(f"load average (1, 5, 15 min) before the load {loads['before']}, after {loads['after']}; "
                  f"{n_cores} cores; report {out / 'summary.json'}")
    style = {"passed": "green", "failed": "red", "inconclusive": "yellow"}[verdict.status]
    head, _, rest = verdict.line.partition(":")
    console.print(Text.assemble((head, style), f":{rest}"), soft_wrap=True)
    return verdict.exit_code
