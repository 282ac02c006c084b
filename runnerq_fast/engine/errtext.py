"""Error text safe to store in a backend."""

from __future__ import annotations

__all__ = ["describe_error"]

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
