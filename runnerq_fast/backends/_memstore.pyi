"""Type stub of the compiled memory-backend core (``src_pyx/runnerq_fast/backends/_memstore.pyx``).

Same API as the pure twin's classes, which the stub names so both selector
branches have one type.
"""

from runnerq_fast.backends._memstore_py import QueueState as QueueState
from runnerq_fast.backends._memstore_py import ReadyQueue as ReadyQueue
from runnerq_fast.backends._memstore_py import Row as Row
from runnerq_fast.backends._memstore_py import StoreCore as StoreCore

__all__ = ["QueueState", "ReadyQueue", "Row", "StoreCore"]
