"""What a type checker sees of the public API: checked by ``tests/typing/test_typing.py``, never run.

A line whose comment starts with ``N:`` must make mypy print a note
containing the rest of the comment (``reveal_type``); one starting with
``E:``, an error containing it; no other line may have an error. Type names
are compared without the ```` prefix older mypy versions print.
The main ``mypy`` run excludes this folder.
"""

from __future__ import annotations

from typing import Any, reveal_type

import runnerq_fast as rq

engine = rq.WorkerEngine("memory://", queue_name="app", max_workers=64, activity_types=["send_email"])
reveal_type(engine)  # N: Revealed type is "runnerq_fast.engine.engine.WorkerEngine"

rq.WorkerEngine("memory://", queue_nme="app")  # E: Unexpected keyword argument "queue_nme" for "WorkerEngine"
rq.WorkerEngine("memory://", max_workers="64")  # E: Argument "max_workers" to "WorkerEngine" has incompatible type "str"; expected "int"
engine.configure(lease_timout=5.0)  # E: Unexpected keyword argument "lease_timout" for "configure" of "WorkerEngine"


@engine.activity("send_email")
async def send_email(payload: dict[str, Any], ctx: rq.ActivityContext) -> dict[str, bool]:
    reveal_type(ctx.metadata)  # N: Revealed type is "dict[str, str]"
    reveal_type(ctx.executor)  # N: Revealed type is "runnerq_fast.executor.ActivityExecutor"
    return {"sent": True}


reveal_type(send_email)  # N: Revealed type is "def (payload: dict[str, Any], ctx: runnerq_fast.engine._context_py.ActivityContext) -> typing.Coroutine[Any, Any, dict[str, bool]]"


@engine.activity("audit")
def audit(payload: Any, ctx: rq.ActivityContext) -> None:  # a plain def handler is fine too
    pass


@engine.activity("wrong")  # E: Value of type variable "H" of function cannot be "Callable[[Any], Coroutine[Any, Any, None]]"
async def wrong(payload: Any) -> None:
    pass


class Hooks(rq.LifecycleHooks):
    def on_processed(self, activity: rq.ActivityInfo, duration: float) -> None:
        reveal_type(activity.attempt)  # N: Revealed type is "int"
        reveal_type(activity.metadata)  # N: Revealed type is "dict[str, str]"


async def enqueue(conn: object) -> None:
    builder = engine.executor.activity("send_email").payload({"to": "a@b.c"}).priority(rq.Priority.HIGH)
    reveal_type(builder)  # N: Revealed type is "runnerq_fast.executor.ActivityBuilder[Any]"
    future = await builder.execute(connection=conn)
    reveal_type(future)  # N: Revealed type is "runnerq_fast.executor.ActivityFuture"
    reveal_type(await future.result(timeout=10))  # N: Revealed type is "Any"
    ids = await engine.executor.enqueue_many([("audit", {"n": 1}), builder], connection=conn)
    reveal_type(ids)  # N: Revealed type is "list[str]"
    reveal_type(rq.current_activity())  # N: Revealed type is "runnerq_fast.engine.hooks.ActivityInfo | None"
    builder.timeout("30")  # E: Argument 1 to "timeout" of "ActivityBuilder" has incompatible type "str"; expected "float"
    builder.metadata({"tenant": 1})  # E: Dict entry 0 has incompatible type "str": "int"; expected "str": "str"


async def migrate(backend: rq.Backend) -> None:
    report = await backend.migrate()
    reveal_type(report)  # N: Revealed type is "runnerq_fast.models.MigrationReport | None"
    if report is not None:
        reveal_type(report.applied)  # N: Revealed type is "tuple[int, ...]"
        reveal_type(report.warning)  # N: Revealed type is "str | None"


class OwnBackend(rq.MemoryBackend):
    async def migrate(self) -> None:  # written when migrate() returned None: still a valid override
        pass
