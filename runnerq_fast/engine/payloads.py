"""Typed payloads: the type a handler annotates its payload with, and the decoder into it.

A handler ``async def charge(payload: Order, ctx)`` gets its payload
decoded into ``Order`` (a msgspec Struct, a dataclass, ``datetime``,
``list[UUID]``, ``dict[str, Decimal]``, ``Order | None``...) by a
``msgspec.json.Decoder(Order)`` built once, at registration
(:func:`payload_decoder`); a payload that does not match is
dead-lettered with msgspec's message naming the field. A handler without an
annotation, or annotated ``Any`` or ``object``, gets the plain JSON value
as before (the engine's ``decode_json``, nothing added per activity).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import msgspec.inspect

from runnerq_fast.engine.errtext import describe_error
from runnerq_fast.errors import ConfigError

__all__ = ["UNTYPED", "payload_decoder", "payload_type", "undecodable"]

UNTYPED: tuple[Any, ...] = (inspect.Parameter.empty, Any, object)
"""Annotations that leave the payload a plain JSON value (no typed decoder), as does a TypeVar."""


def _untyped(annotation: Any) -> bool:
    return any(annotation is u for u in UNTYPED) or isinstance(annotation, TypeVar)

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _describe(handler: Callable[..., Any]) -> str:
    return getattr(handler, "__qualname__", type(handler).__name__)


def payload_type(handler: Callable[..., Any]) -> Any:
    """The annotation of ``handler``'s first positional parameter (the payload), resolved; ``None`` if untyped.

    String annotations (``from __future__ import annotations``) are evaluated
    in the handler's module, as :func:`typing.get_type_hints` does; this also
    reads through ``functools.partial``, bound methods and callable objects.

    Returns
    -------
    Any
        The type, or ``None`` for no annotation, ``Any``, ``object`` or a
        TypeVar, and for a callable without a readable signature.

    Raises
    ------
    ConfigError
        If the annotation cannot be evaluated (a name only imported under
        ``TYPE_CHECKING``, or defined inside a function).
    """
    try:
        sig = inspect.signature(handler)
    except (TypeError, ValueError):
        return None  # no signature to read (some builtins, C callables)
    first = next((p for p in sig.parameters.values() if p.kind in _POSITIONAL), None)
    if first is None or _untyped(first.annotation):
        return None
    annotation = first.annotation
    if isinstance(annotation, str):
        try:
            sig = inspect.signature(handler, eval_str=True)
        except Exception as exc:  # NameError, SyntaxError... from evaluating the text
            raise ConfigError(
                f"the payload annotation {annotation!r} of handler {_describe(handler)} cannot be evaluated "
                f"({type(exc).__name__}: {exc}): the engine decodes the payload into that type, so it must be "
                "importable at run time (not only under TYPE_CHECKING, nor defined inside a function); "
                "annotate Any to receive the plain JSON value"
            ) from None
        annotation = sig.parameters[first.name].annotation
        if _untyped(annotation):
            return None
    return annotation


def _custom_types(info: msgspec.inspect.Type) -> list[type]:
    """The classes msgspec would need a ``dec_hook`` for, anywhere in ``info`` (cycles of Structs followed once)."""
    found: list[type] = []
    seen: set[int] = set()
    stack: list[Any] = [info]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, msgspec.inspect.CustomType):
            found.append(node.cls)
        elif isinstance(node, tuple):
            stack.extend(node)
        elif isinstance(node, msgspec.inspect.Type | msgspec.inspect.Field):
            stack.extend(getattr(node, name) for name in node.__struct_fields__)
    return found


def payload_decoder(handler: Callable[..., Any], activity_type: str) -> tuple[Any, Callable[[bytes | str], Any] | None]:
    """The payload type of ``handler`` and the strict msgspec decoder into it; ``(None, None)`` when untyped.

    Parameters
    ----------
    handler : callable
        ``handler(payload, ctx)``.
    activity_type : str
        For error messages.

    Returns
    -------
    tuple
        ``(type, decode)`` where ``decode(json_bytes)`` returns the payload
        as that type and raises :class:`msgspec.ValidationError` (naming the
        field, ``$.lines[0].qty``) when it does not match.

    Raises
    ------
    ConfigError
        If the annotation cannot be evaluated or msgspec cannot decode into
        it (an arbitrary class, a union of untagged Structs).
    """
    tp = payload_type(handler)
    if tp is None:
        return None, None
    where = f"the payload annotation {tp!r} of handler {_describe(handler)} for activity type {activity_type!r}"
    try:
        decoder = msgspec.json.Decoder(tp)
        custom = _custom_types(msgspec.inspect.type_info(tp))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where} is not a type msgspec can decode into: {exc}; annotate Any to receive the "
                          "plain JSON value") from None
    if custom:
        names = ", ".join(sorted({c.__qualname__ for c in custom}))
        raise ConfigError(
            f"{where} holds {names}, which msgspec cannot decode into: use a msgspec Struct, a dataclass, a "
            "TypedDict, the JSON types, datetime/date/time/timedelta, UUID, Decimal or an enum, or annotate Any "
            "to receive the plain JSON value"
        )
    return tp, decoder.decode


def type_name(tp: Any) -> str:
    """``Order`` for a class, ``list[Order]`` (as ``repr`` spells it) otherwise."""
    return tp.__qualname__ if isinstance(tp, type) else repr(tp)


def undecodable(payload_type: Any, exc: BaseException) -> str:
    """The dead-letter error of a payload the handler cannot receive (the rare path of both worker twins).

    Parameters
    ----------
    payload_type : Any
        The handler's payload type, ``None`` when untyped.
    exc : BaseException
        What decoding raised (:class:`msgspec.ValidationError` names the field, e.g. ``$.lines[0].qty``).
    """
    if payload_type is not None and isinstance(exc, msgspec.ValidationError):
        return (f"payload does not match {type_name(payload_type)}, the handler's payload type: "
                f"{describe_error(exc, prefix=False)}")
    return f"payload could not be decoded: {describe_error(exc, prefix=False)}"
