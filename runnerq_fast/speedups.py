"""Which implementation of the hot paths is active.

The hot paths each exist twice: a Cython module built from ``src_pyx/`` and a
pure-Python twin (the same name with ``_py``) beside it, in the folder of the
concept it serves:

==================================  ===========================================
compiled module                     serves
==================================  ===========================================
``runnerq_fast._codec``             the payload codec (a core module)
``runnerq_fast._ids``               activity ids (UUIDv7)
``backends._memstore``              the memory backend's store core
``backends.postgres._rows``         claimed-row decoding, batch parameter arrays
``backends.redis._scoring``         the Redis ready-set score
``engine._backoff``                 retry backoff
``engine._context``                 the activity context handlers receive
``engine._deadline``                handler deadlines
``engine._worker``                  the engine's per-activity path
==================================  ===========================================

Each has one selector module (``codec``, ``backends.postgres.rows``, …) that
re-exports the implementation this module chose, once, at import:

* ``RUNNERQ_NO_EXTENSIONS=1`` (any value but empty or ``0``) selects the
  pure twins (and, at build time, skips compiling the extensions);
* otherwise the compiled modules are imported; if one fails to import, the
  pure twins are used for all of them and one :class:`RuntimeWarning` says why
  (a compiled module that was not built: reinstall with a C compiler; a
  third-party package that is not installed: its name).

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
import sys
import warnings

__all__ = ["COMPILED_MODULES", "disabled_by_env", "enabled", "import_error"]

#: The compiled modules (relative to ``runnerq_fast``), each with a pure twin named ``<module>_py``.
COMPILED_MODULES: tuple[str, ...] = (
    "_codec",
    "_ids",
    "backends._memstore",
    "backends.postgres._rows",
    "backends.redis._scoring",
    "engine._backoff",
    "engine._context",
    "engine._deadline",
    "engine._worker",
)

disabled_by_env: bool = os.environ.get("RUNNERQ_NO_EXTENSIONS", "") not in ("", "0")

import_error: str | None = None

#: Provisional while the compiled modules are tried: importing one imports its package
#: (``runnerq_fast.engine`` and the backends), whose selectors read this flag.
enabled: bool = not disabled_by_env


def _try_import() -> bool:
    """Import every compiled module; on failure undo what the attempt imported.

    A compiled module lives inside the package it serves, so importing it runs
    that package's ``__init__``, and with it selectors that chose the compiled
    twins on the provisional :data:`enabled`. If any compiled module is
    missing, every ``runnerq_fast`` module imported during the attempt is
    forgotten, so it is imported again, now selecting the pure twins: never a
    mix of the two.
    """
    global import_error
    if disabled_by_env:
        return False
    before = set(sys.modules)
    try:
        for name in COMPILED_MODULES:
            importlib.import_module(f"runnerq_fast.{name}")
    except ImportError as exc:
        import_error = f"{type(exc).__name__}: {exc}"
        for name in set(sys.modules) - before:
            if name.startswith("runnerq_fast.") and name != __name__:
                del sys.modules[name]
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if missing is not None and missing.split(".")[0] != "runnerq_fast":
            # a package a compiled module's package imports is not installed: no compiler helps
            advice = (f"a dependency is not installed: install {missing.split('.')[0]!r} "
                      "(pip install runnerq-fast installs every dependency)")
        else:
            advice = "reinstall with a C compiler, or set RUNNERQ_NO_EXTENSIONS=1 to silence this"
        warnings.warn(
            f"runnerq_fast: compiled hot paths unavailable ({import_error}); using the pure-Python twins ({advice})",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    return True


enabled = _try_import()
