"""Type stub of the compiled activity context (``src_pyx/runnerq_fast/engine/_context.pyx``).

The compiled ``ActivityContext`` has the API of the pure twin's, so the stub
names that class: both selector branches then have one type.
"""

from runnerq_fast.engine._context_py import ActivityContext as ActivityContext

__all__ = ["ActivityContext"]
