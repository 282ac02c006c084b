"""Which implementation of the hot paths is active.

``enabled`` is ``True`` when the compiled (Cython) modules were imported and
``False`` when the pure-Python twins are in use, either because
``RUNNERQ_NO_EXTENSIONS=1`` is set or because the extensions are not built.
"""

from __future__ import annotations

import os

__all__ = ["disabled_by_env", "enabled"]

disabled_by_env: bool = os.environ.get("RUNNERQ_NO_EXTENSIONS", "") not in ("", "0")

# No compiled module exists yet; the Cython issue switches this on.
enabled: bool = False
