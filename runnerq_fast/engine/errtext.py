"""Error text and tracebacks safe to store in a backend."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
import traceback

__all__ = ["describe_error", "format_traceback"]

_MAX_ERROR_CHARS = 4000


def describe_error(exc: BaseException, *, prefix: bool = True) -> str:
    """Error text safe to store: never raises, no NUL, valid UTF-8, at most 4000 characters.

    ``"Type: message"`` (or just the message with ``prefix=False``); an
    exception whose ``__str__`` raises is described as unprintable.
    """
    try:
        msg = str(exc)
    except Exception:
        msg = "<unprintable exception>"
    text = f"{type(exc).__name__}: {msg}" if prefix else msg
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 15] + "... (truncated)"


# ------------------------------------------------------------ tracebacks

_MAX_TRACEBACK_CHARS = 16_000
"""Most characters of a stored traceback (:func:`format_traceback`)."""
_TRACEBACK_HEAD_CHARS = 2_000
"""Characters kept from the start of a traceback longer than :data:`_MAX_TRACEBACK_CHARS`."""
_MAX_FRAMES = 200
"""Frames read from each exception's traceback (the innermost ones); the rest are cut unread."""

_ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""runnerq_fast/engine/: the frames above a handler's are the engine's."""
_STDLIB_CALLERS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep if m.__file__.endswith("__init__.py") else m.__file__
    for m in (asyncio, concurrent.futures, threading, contextlib)
    if m.__file__ is not None
)
"""The standard library's frames that run a handler: the event loop, the thread pool, a thread."""


def _engine_frame(filename: str) -> bool:
    """Whether a frame of ``filename`` is the engine's own or the standard library's that calls a handler."""
    if filename.startswith(_STDLIB_CALLERS) or filename.startswith(_ENGINE_DIR):
        return True
    # the compiled engine's frames name their .pyx source (a path relative to where it was built)
    return filename.endswith(".pyx") and "runnerq_fast/engine/" in filename.replace("\\", "/")


def _strip(te: traceback.TracebackException, seen: set[int]) -> None:
    """Drop the engine's frames above the first frame of the handler, in ``te`` and the exceptions it chains."""
    if id(te) in seen:
        return
    seen.add(id(te))
    stack = te.stack
    first = 0
    while first < len(stack) and _engine_frame(stack[first].filename):
        first += 1
    del stack[:first]  # the engine's frames alone (a timeout's own): none left, its error line stays
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _strip(chained, seen)
    for inner in te.exceptions or ():  # an ExceptionGroup's members
        _strip(inner, seen)


def format_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` as it is stored with the failed attempt: bounded, from the handler's frame down.

    Formatted as Python prints it (chained exceptions, ``__cause__`` and
    ``__context__``, included), with the frames above the handler's (the
    engine's, :mod:`asyncio`'s, the thread pool's) left out. At most
    :data:`_MAX_TRACEBACK_CHARS` characters (16,000): a longer one keeps its
    first 2,000 and its last (the innermost frames and the error line),
    with a line saying how many characters were cut between them. Never
    raises; no NUL; valid UTF-8. Called on the failure path only.

    Parameters
    ----------
    exc : BaseException
        What the handler raised (its ``__traceback__`` still attached).

    Returns
    -------
    str
        The traceback's text, ending with ``"Type: message"``.
    """
    try:
        te = traceback.TracebackException.from_exception(exc, limit=-_MAX_FRAMES)
        _strip(te, set())
        text = "".join(te.format())
    except Exception:  # a traceback that cannot be read: the error line alone
        text = describe_error(exc) + "\n"
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > _MAX_TRACEBACK_CHARS:
        head = text[:_TRACEBACK_HEAD_CHARS]
        head = head[: head.rfind("\n") + 1] or head
        room = _MAX_TRACEBACK_CHARS - len(head) - 60
        tail = text[-room:]
        cut_at = tail.find("\n") + 1
        tail = tail[cut_at:] if 0 < cut_at < len(tail) else tail
        cut = len(text) - len(head) - len(tail)
        text = f"{head}  ... ({cut} characters of the traceback cut) ...\n{tail}"
    return text
