"""Build the Cython extensions in src_pyx/ (metadata lives in pyproject.toml).

Each ``src_pyx/runnerq_fast/<path>.pyx`` becomes the module ``runnerq_fast.<path>``
(``src_pyx/`` mirrors the package); its pure-Python twin is
``runnerq_fast/<path>_py.py``, beside its selector. ``RUNNERQ_NO_EXTENSIONS=1``
skips the build (the package then runs on the twins).
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import Extension, setup

MODULES = (
    "_codec",
    "backends._memstore",
    "backends.postgres._rows",
    "backends.redis._scoring",
    "engine._backoff",
    "engine._context",
    "engine._deadline",
    "engine._worker",
)


def extensions() -> list[Extension]:
    if os.environ.get("RUNNERQ_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    from Cython.Build import cythonize

    src = Path("src_pyx") / "runnerq_fast"
    exts = [Extension(f"runnerq_fast.{name}", [str(src / (name.replace(".", "/") + ".pyx"))]) for name in MODULES]
    return cythonize(exts, compiler_directives={"language_level": "3"}, include_path=["src_pyx"], quiet=True)


setup(ext_modules=extensions())
