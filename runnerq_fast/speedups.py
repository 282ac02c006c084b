"""Which implementation of the hot paths is active.

The hot paths (payload codec, Redis ready-set score, retry backoff, claimed-row
decoding and batch parameter arrays) each exist twice: a Cython module built
from ``src_pyx/`` and a pure-Python twin (``runnerq_fast._*_py``) with the same
behaviour. This module decides once, at import, which set the selector
modules (:mod:`runnerq_fast.codec`, :mod:`runnerq_fast.scoring`,
:mod:`runnerq_fast.backoff`, :mod:`runnerq_fast.rows`) re-export:

* ``RUNNERQ_NO_EXTENSIONS=1`` (any value but empty or ``0``) selects the
  pure twins (and, at build time, skips compiling the extensions);
* otherwise the compiled modules are imported; if one fails to import, the
  pure twins are used and one :class:`RuntimeWarning` says why.

Attributes
----------
enabled : bool
    ``True`` when the compiled modules are in use.
disabled_by_env : bool
    ``True`` when ``RUNNERQ_NO_EXTENSIONS`` asked for the pure twins.
import_error : str or None
    Why the compiled modules could not be imported (``None`` if they were, or
    were not tried).
"""

from __future__ import annotations

import importlib
import os
import warnings

__all__ = ["COMPILED_MODULES", "disabled_by_env", "enabled", "import_error"]

#: The compiled modules, each with a pure twin named ``<module>_py``.
COMPILED_MODULES: tuple[str, ...] = (
    "_codec", "_scoring", "_backoff", "_rows", "_deadline", "backends._memstore", "_worker",
)

disabled_by_env: bool = os.environ.get("RUNNERQ_NO_EXTENSIONS", "") not in ("", "0")

import_error: str | None = None


def _try_import() -> bool:
    global import_error
    if disabled_by_env:
        return False
    try:
        for name in COMPILED_MODULES:
            importlib.import_module(f"runnerq_fast.{name}")
    except ImportError as exc:
        import_error = f"{type(exc).__name__}: {exc}"
        warnings.warn(
            f"runnerq_fast: compiled hot paths unavailable ({import_error}); using the pure-Python twins "
            "(reinstall with a C compiler, or set RUNNERQ_NO_EXTENSIONS=1 to silence this)",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    return True


enabled: bool = _try_import()
