"""Batch sizes that adapt to a store that cancels slow statements (PostgreSQL ``statement_timeout``).

The engine's batched writes (the ack flush, the reaper, the pruner) each
keep an :class:`AdaptiveBatch`. When the store cancels a batch
(:class:`~runnerq_fast.errors.StoreBusyError`: nothing of it was applied),
the next try sends half as many items; every :data:`GROW_AFTER` batches in a
row that land double the size again, up to the configured one (so a size
just under the server's limit is not doubled straight back over it). A batch that still fails at size 1 is
retried later, never dropped: a cancelled statement says nothing about its
items. On a server without such a limit the size never leaves its ceiling.
"""

from __future__ import annotations

__all__ = ["GROW_AFTER", "AdaptiveBatch"]

GROW_AFTER = 4
"""Batches in a row that must land before a reduced size doubles."""


class AdaptiveBatch:
    """A batch size that halves when the store cancels a batch and doubles back after each success.

    Parameters
    ----------
    ceiling : int
        The configured (and largest) size, >= 1.

    Attributes
    ----------
    size : int
        Items to send in the next batch, in ``[1, ceiling]``.
    """

    __slots__ = ("_landed", "ceiling", "size")

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError(f"ceiling must be >= 1, got {ceiling!r}")
        self.ceiling = ceiling
        self.size = ceiling
        self._landed = 0

    def cancelled(self, sent: int) -> int:
        """A batch of ``sent`` items was cancelled: halve the size (at least 1); return the new size."""
        self.size = max(1, min(self.size, sent) // 2)
        self._landed = 0
        return self.size

    def succeeded(self) -> None:
        """A batch landed: after :data:`GROW_AFTER` in a row, double the size, at most :attr:`ceiling`."""
        if self.size < self.ceiling:
            self._landed += 1
            if self._landed >= GROW_AFTER:
                self._landed = 0
                self.size = min(self.ceiling, self.size * 2)

    @property
    def reduced(self) -> bool:
        """Whether the size is below the ceiling (a cancellation was seen and not yet grown out of)."""
        return self.size < self.ceiling
