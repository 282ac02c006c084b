"""``ActivityContext`` (compiled and pure): the same fields, properties, ``repr`` and errors."""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType
from typing import Any

import pytest

from runnerq_fast import speedups
from runnerq_fast.engine import _context_py, context
from runnerq_fast.models import ClaimedActivity


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("runnerq_fast.engine._context")
    except ImportError:
        return None


COMPILED = _compiled()
IMPLS = [
    pytest.param(_context_py.ActivityContext, id="pure"),
    pytest.param(
        None if COMPILED is None else COMPILED.ActivityContext,
        id="compiled",
        marks=pytest.mark.skipif(COMPILED is None, reason="not built"),
    ),
]

FIELDS = ("activity_id", "activity_type", "retry_count", "max_retries", "priority", "enqueued_at",
          "cancel_requested", "lease_lost", "task", "_cancel_sent")


class _Executor:
    """Records the ``child`` calls a context makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def child(self, parent_id: str, metadata: Any) -> Any:
        self.calls.append((parent_id, metadata))
        return _Child(metadata)


class _Child:
    def __init__(self, metadata: Any) -> None:
        self.inherited_metadata = metadata


def _activity(metadata: bytes | str | None = b'{"tenant":"t1"}') -> ClaimedActivity:
    raw: Any = metadata  # None too: a context must not fail on what a store hands back
    return ClaimedActivity("a" * 32, "send", b"null", 3, 2, 5, 30_000, raw, "tok", 1_700_000_000_123, 1)


def _view(ctx: Any) -> dict[str, Any]:
    return {f: getattr(ctx, f) for f in FIELDS} | {"repr": repr(ctx), "cancelled": ctx.is_cancelled}


def test_the_selector_follows_the_flag() -> None:
    expected = COMPILED.ActivityContext if speedups.enabled and COMPILED is not None else _context_py.ActivityContext
    assert context.ActivityContext is expected


@pytest.mark.parametrize("cls", IMPLS)
def test_fields_and_repr_as_the_reference(cls: Any) -> None:
    ev = asyncio.Event()
    got, ref = cls(_activity(), _Executor(), ev), _context_py.ActivityContext(_activity(), _Executor(), ev)  # type: ignore[arg-type]
    assert _view(got) == _view(ref)
    assert got.enqueued_at == 1_700_000_000.123 and got.cancel_requested is False and got.task is None
    assert got.cancellation is ev
    ev.set()
    assert got.is_cancelled is True
    got.task, got.cancel_requested, got.lease_lost, got._cancel_sent = "t", True, True, True
    assert (got.task, got.cancel_requested, got.lease_lost, got._cancel_sent) == ("t", True, True, True)
    with pytest.raises(AttributeError):
        got.unknown = 1  # no instance dict: a misspelt attribute fails, as with __slots__
    for field in FIELDS[:6]:  # the activity's own fields are read-only properties
        with pytest.raises(AttributeError):
            setattr(got, field, 1)


@pytest.mark.parametrize("cls", IMPLS)
@pytest.mark.parametrize("raw", [b'{"tenant":"t1"}', '{"tenant":"t1"}', b"{}", "{}", b"", None, b"[1]", b'"x"'])
def test_metadata_and_child_executor_as_the_reference(cls: Any, raw: Any) -> None:
    ev = asyncio.Event()
    ex, ref_ex = _Executor(), _Executor()
    got, ref = cls(_activity(raw), ex, ev), _context_py.ActivityContext(_activity(raw), ref_ex, ev)  # type: ignore[arg-type]
    # the executor first (inherits the raw metadata), then the metadata (the child follows the decoded dict)
    child, ref_child = got.executor, ref.executor
    assert got.executor is child
    assert ex.calls == ref_ex.calls == [("a" * 32, raw)]
    assert got.metadata == ref.metadata
    assert got.metadata is got.metadata
    assert child.inherited_metadata == ref_child.inherited_metadata
    assert child.inherited_metadata is got.metadata
    # the metadata first: the child inherits the decoded dict itself
    ex2 = _Executor()
    fresh = cls(_activity(raw), ex2, ev)
    md = fresh.metadata
    md["added"] = "by the handler"
    assert fresh.executor.inherited_metadata is md and ex2.calls == [("a" * 32, md)]


class _Sink:
    """Records what a context hands to the engine's progress buffer."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, str, str]] = []

    def put(self, activity_id: str, claim_token: str, progress: str) -> None:
        self.puts.append((activity_id, claim_token, progress))


BAD_PROGRESS: list[Any] = [float("nan"), float("inf"), -0.01, 1.5, 2, True, "50%", [0.5], None,
                           {"x": b"bytes"}, {1: "int key"}, {"big": "x" * 9000}]


def _error(fn: Any) -> tuple[str, str] | None:
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None


@pytest.mark.parametrize("cls", IMPLS)
def test_set_progress_as_the_reference(cls: Any) -> None:
    ev = asyncio.Event()
    got, ref = _Sink(), _Sink()
    mine = cls(_activity(), _Executor(), ev, got)
    theirs = _context_py.ActivityContext(_activity(), _Executor(), ev, ref)  # type: ignore[arg-type]
    assert mine.progress is None and theirs.progress is None
    for value in (0, 0.25, 1, {"done": 3, "total": 12, "note": "é"}):
        mine.set_progress(value)
        theirs.set_progress(value)
        assert mine.progress == theirs.progress == value
    assert got.puts == ref.puts == [("a" * 32, "tok", "0.0"), ("a" * 32, "tok", "0.25"), ("a" * 32, "tok", "1.0"),
                                    ("a" * 32, "tok", '{"done":3,"total":12,"note":"é"}')]
    for bad in BAD_PROGRESS:
        err = _error(lambda v=bad: mine.set_progress(v))
        assert err is not None and err == _error(lambda v=bad: theirs.set_progress(v)), bad
        assert err[0] in ("ValueError", "TypeError", "InvalidActivityError"), err
    assert len(got.puts) == 4 and mine.progress == {"done": 3, "total": 12, "note": "é"}  # a refused value is not kept
    # without the engine's buffer (a context made by hand, testing.make_context), the value is only kept
    alone = cls(_activity(), _Executor(), ev)
    alone.set_progress(0.5)
    assert alone.progress == 0.5
