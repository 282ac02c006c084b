"""locust users enqueueing into runnerq-fast: over HTTP (``runnerq-fast serve``) and through the Python API.

Run by ``runnerq-fast loadtest`` (which starts everything and sets the
variables below), or alone against a running ``serve``::

    RUNNERQ_LOADTEST_BACKEND=sqlite:///app.db locust -f loadtest/locustfile.py --headless \\
        --host http://127.0.0.1:8080 -u 20 -r 20 -t 30s

Users (weights set how many of each locust starts):

* ``HttpEnqueuer`` (FastHttpUser, weight ``RUNNERQ_LOADTEST_HTTP_WEIGHT``, 3):
  ``POST /api/v1/queues/Q/activities`` (10 of 11 calls) and ``.../batch``
  with 2 to ``RUNNERQ_LOADTEST_BATCH`` (50) activities.
* ``ApiEnqueuer`` (weight ``RUNNERQ_LOADTEST_API_WEIGHT``, 1; off without
  ``RUNNERQ_LOADTEST_BACKEND``): ``ActivityBuilder.execute`` (10 of 11) and
  ``ActivityExecutor.enqueue_many_futures``, run by an agent process
  (:mod:`runnerq_fast.loadtest.agent`: an event loop cannot run under gevent)
  and reported with ``events.request.fire`` as request type ``api``, with the
  time of the API call itself.

Both send :class:`runnerq_fast.loadtest.mix.Mix` (types, payload sizes,
priorities, delays, idempotency keys). Each user waits to send at most
``RUNNERQ_LOADTEST_RATE`` requests per second (0: no wait). Every id a
successful answer carries goes to ``RUNNERQ_LOADTEST_RECORDS/accepted-<pid>.tsv``
(:mod:`runnerq_fast.loadtest.records`) for the runner's lost-activity check.

``RUNNERQ_LOADTEST_SHAPE=step`` or ``spike`` picks a :class:`locust.LoadTestShape`
reading ``-u`` (users) and ``-t`` (run time): ``step`` adds a fifth of the users
every fifth of the time; ``spike`` runs a quarter of them, with all of them
for the first sixth of every third of the time after the first third.

``RUNNERQ_LOADTEST_SHAPE=capacity`` (``runnerq-fast loadtest --capacity``) runs
``RUNNERQ_LOADTEST_STEP_USERS`` users more every ``RUNNERQ_LOADTEST_STEP_SECONDS``,
for at most ``RUNNERQ_LOADTEST_MAX_STEPS`` steps, each user at the same rate, so
step k asks k times the first step's rate; it stops early once the file
``RUNNERQ_LOADTEST_STOP_FILE`` exists (the runner writes it when a step broke a
limit), and writes the time each step began to ``RUNNERQ_LOADTEST_RECORDS/steps.tsv``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import gevent
import msgspec
from gevent.event import AsyncResult
from gevent.lock import Semaphore
from locust import FastHttpUser, LoadTestShape, User, constant, constant_throughput, events, task
from locust.runners import MasterRunner

from runnerq_fast.loadtest.mix import ActivitySpec, Mix, spike_users, step_users
from runnerq_fast.loadtest.records import LineWriter

QUEUE = os.environ.get("RUNNERQ_LOADTEST_QUEUE", "loadtest")
RECORDS = os.environ.get("RUNNERQ_LOADTEST_RECORDS", "")
BACKEND = os.environ.get("RUNNERQ_LOADTEST_BACKEND", "")
RATE = float(os.environ.get("RUNNERQ_LOADTEST_RATE", "0"))
BATCH = max(2, int(os.environ.get("RUNNERQ_LOADTEST_BATCH", "50")))
SHAPE = os.environ.get("RUNNERQ_LOADTEST_SHAPE", "")
STEP_USERS = int(os.environ.get("RUNNERQ_LOADTEST_STEP_USERS", "10"))
STEP_SECONDS = float(os.environ.get("RUNNERQ_LOADTEST_STEP_SECONDS", "10"))
MAX_STEPS = int(os.environ.get("RUNNERQ_LOADTEST_MAX_STEPS", "20"))
STOP_FILE = os.environ.get("RUNNERQ_LOADTEST_STOP_FILE", "")
HTTP_WEIGHT = int(os.environ.get("RUNNERQ_LOADTEST_HTTP_WEIGHT", "3"))
API_WEIGHT = int(os.environ.get("RUNNERQ_LOADTEST_API_WEIGHT", "1"))

_JSON = {"Content-Type": "application/json"}
_encode = msgspec.json.Encoder().encode


class _One(msgspec.Struct):
    id: str
    created: bool


class _Item(msgspec.Struct):
    id: str
    outcome: str


class _Batch(msgspec.Struct):
    activities: list[_Item]


_decode_one = msgspec.json.Decoder(_One).decode
_decode_batch = msgspec.json.Decoder(_Batch).decode
_Answer = tuple[int, list[str], list[bool], str | None, float]
_decode_answer = msgspec.json.Decoder(_Answer).decode

_writer: dict[int, LineWriter] = {}


def accepted(activity_id: str, created: bool, spec: ActivitySpec) -> None:
    """Record an id a successful answer carried (one file per process; nothing without RECORDS)."""
    if not RECORDS:
        return
    pid = os.getpid()
    if pid not in _writer:  # opened in the process that runs users (locust --processes forks)
        _writer[pid] = LineWriter(RECORDS, "accepted")
    _writer[pid].write(activity_id, int(created), float(spec.payload["t"]), float(spec.payload["d"]))


def _wait() -> Any:
    return constant_throughput(RATE) if RATE > 0 else constant(0)


class HttpEnqueuer(FastHttpUser):
    """Enqueues over HTTP: single requests and batches, idempotency keys on a share of them."""

    weight = HTTP_WEIGHT
    wait_time = _wait()

    def on_start(self) -> None:
        self.mix = Mix()
        self.path = f"/api/v1/queues/{QUEUE}/activities"

    @task(10)
    def single(self) -> None:
        spec = self.mix.one()
        with self.client.post(self.path, data=_encode(spec).decode(), headers=_JSON, name="single",
                              catch_response=True) as resp:
            if resp.status_code in (200, 201) and resp.content:
                one = _decode_one(resp.content)
                accepted(one.id, one.created, spec)
                resp.success()
            else:
                resp.failure(f"HTTP {resp.status_code}: {(resp.text or '')[:200]}")

    @task(1)
    def batch(self) -> None:
        specs = self.mix.batch(self.mix._rng.randint(2, BATCH))
        body = _encode({"activities": specs}).decode()
        with self.client.post(self.path + "/batch", data=body, headers=_JSON, name="batch",
                              catch_response=True) as resp:
            if resp.status_code in (200, 201) and resp.content:
                for spec, item in zip(specs, _decode_batch(resp.content).activities, strict=True):
                    if item.outcome != "conflict":
                        accepted(item.id, item.outcome == "created", spec)
                resp.success()
            else:
                resp.failure(f"HTTP {resp.status_code}: {(resp.text or '')[:200]}")


class _Agent:
    """The agent process of this locust process, and the greenlet reading its answers."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_fast.loadtest.agent", "--backend", BACKEND, "--queue", QUEUE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout
        if self._out.readline().strip() != b"ready":
            raise RuntimeError(f"the API agent did not start (exit code {self.proc.poll()})")
        self._lock = Semaphore()
        self._waiting: dict[int, AsyncResult] = {}
        self._next = 0
        self._reader = gevent.spawn(self._read)

    def _read(self) -> None:
        while line := self._out.readline():
            answer = _decode_answer(line)
            waiter = self._waiting.pop(answer[0], None)
            if waiter is not None:
                waiter.set(answer)
        for waiter in self._waiting.values():
            waiter.set_exception(RuntimeError("the API agent exited"))

    def call(self, single: bool, specs: list[ActivitySpec]) -> _Answer:
        self._next += 1
        rid = self._next
        waiter = AsyncResult()
        self._waiting[rid] = waiter
        with self._lock:
            self._in.write(_encode([rid, single, specs]) + b"\n")
            self._in.flush()
        answer: _Answer = waiter.get(timeout=60)
        return answer

    def close(self) -> None:
        self._in.close()
        self.proc.wait(30)


_agents: dict[int, _Agent] = {}
_agent_lock = Semaphore()


def agent() -> _Agent:
    """This process's agent, started at the first call."""
    with _agent_lock:
        if os.getpid() not in _agents:
            _agents[os.getpid()] = _Agent()
        return _agents[os.getpid()]


@events.init.add_listener
def _start_agent(environment: Any, **_: Any) -> None:
    """Start this process's agent before the test (its start-up is not load); not in a master process."""
    if not BACKEND or API_WEIGHT == 0 or isinstance(environment.runner, MasterRunner):
        return
    agent()


@events.quitting.add_listener
def _close(**_: Any) -> None:
    for a in _agents.values():
        a.close()
    for w in _writer.values():
        w.close()


class ApiEnqueuer(User):
    """Enqueues through the Python API (by way of the agent), reporting each call to locust."""

    abstract = not BACKEND
    weight = API_WEIGHT
    wait_time = _wait()

    def on_start(self) -> None:
        self.mix = Mix()

    def _call(self, single: bool, specs: list[ActivitySpec], name: str) -> None:
        t = time.perf_counter()
        error: str | None
        try:
            _, ids, created, error, seconds = agent().call(single, specs)
        except Exception as exc:
            ids, created, error, seconds = [], [], f"{type(exc).__name__}: {exc}", time.perf_counter() - t
        events.request.fire(request_type="api", name=name, response_time=seconds * 1000, response_length=len(ids),
                            exception=RuntimeError(error) if error else None, context={})
        for spec, activity_id, was_created in zip(specs, ids, created, strict=False):  # no ids: an error
            accepted(activity_id, was_created, spec)

    @task(10)
    def execute(self) -> None:
        self._call(True, [self.mix.one()], "execute")

    @task(1)
    def enqueue_many(self) -> None:
        self._call(False, self.mix.batch(self.mix._rng.randint(2, BATCH)), "enqueue_many")


class _Shape(LoadTestShape):
    """A shape reading ``-u`` (users) and ``-t`` (run time); subclasses say how many users run at a time."""

    abstract = True
    use_common_options = True

    def users_at(self, elapsed: float, users: int, run_time: float) -> int:
        raise NotImplementedError

    def tick(self) -> tuple[int, float] | None:
        opts = self.runner.environment.parsed_options if self.runner else None
        users = int(getattr(opts, "num_users", None) or 10)
        run_time = float(getattr(opts, "run_time", None) or 60)
        elapsed = self.get_run_time()
        if elapsed >= run_time:
            return None
        return self.users_at(elapsed, users, run_time), float(users)


class StepShape(_Shape):
    """A fifth of ``-u`` users more every fifth of ``-t`` (``RUNNERQ_LOADTEST_SHAPE=step``)."""

    abstract = SHAPE != "step"

    def users_at(self, elapsed: float, users: int, run_time: float) -> int:
        step = max(1, users // 5)
        return step_users(elapsed, start=step, step=step, step_seconds=run_time / 5, limit=users)


class SpikeShape(_Shape):
    """A quarter of ``-u`` users, all for a sixth of every third of ``-t`` (``RUNNERQ_LOADTEST_SHAPE=spike``)."""

    abstract = SHAPE != "spike"

    def users_at(self, elapsed: float, users: int, run_time: float) -> int:
        every = run_time / 3
        return spike_users(elapsed, base=max(1, users // 4), peak=users, every=every, spike_seconds=every / 2)


class CapacityShape(LoadTestShape):
    """Step k of ``RUNNERQ_LOADTEST_MAX_STEPS`` runs k x ``RUNNERQ_LOADTEST_STEP_USERS`` users (``SHAPE=capacity``).

    Stops at the end of the last step or as soon as ``RUNNERQ_LOADTEST_STOP_FILE``
    exists; appends ``<epoch s> <tab> <step> <tab> <users>`` to ``steps.tsv`` of the
    records directory as each step begins (the windows the runner judges).
    """

    abstract = SHAPE != "capacity"

    def __init__(self) -> None:
        super().__init__()
        self._step = 0

    def tick(self) -> tuple[int, float] | None:
        elapsed = self.get_run_time()
        step = int(elapsed // STEP_SECONDS) + 1
        if step > MAX_STEPS or (STOP_FILE and os.path.exists(STOP_FILE)):
            return None
        users = step_users(elapsed, start=STEP_USERS, step=STEP_USERS, step_seconds=STEP_SECONDS,
                           limit=STEP_USERS * MAX_STEPS)
        if step != self._step:
            self._step = step
            if RECORDS:
                with open(os.path.join(RECORDS, "steps.tsv"), "a", encoding="utf-8") as fh:
                    fh.write(f"{time.time():.6f}\t{step}\t{users}\n")
        return users, float(users)  # every new user at once: the step's rate from its first second
