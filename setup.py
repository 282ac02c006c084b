"""Build the Cython extensions in src_pyx/ (metadata lives in pyproject.toml).

No compiled module exists yet: every hot path runs as pure Python
(``runnerq_fast.speedups.enabled`` is ``False``). ``RUNNERQ_NO_EXTENSIONS=1``
will skip the build once there is one.
"""

from __future__ import annotations

from setuptools import setup

setup(ext_modules=[])
