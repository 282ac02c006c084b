"""Type stub of the compiled handler timeouts (``src_pyx/runnerq_fast/engine/_deadline.pyx``).

The compiled ``Deadlines`` has the API of the pure twin's, so the stub names
that class: both selector branches then have one type.
"""

from runnerq_fast.engine._deadline_py import Deadlines as Deadlines

__all__ = ["Deadlines"]
