"""A memory store whose completed results read back damaged, for the tests of what callers see then."""

from __future__ import annotations

import runnerq_fast as rq


class DamagedResults(rq.MemoryBackend):
    """A memory store whose stored results read back damaged (once ``damaged`` is set), as a row edited
    outside this library would."""

    damaged = False

    def _damaged(self, res: rq.ActivityResult | None) -> rq.ActivityResult | None:
        if not self.damaged or res is None or res.status != "completed":
            return res
        return rq.ActivityResult(res.activity_id, res.status, b'{"doubled": 4', res.error)

    async def get_result(self, activity_id: str) -> rq.ActivityResult | None:
        return self._damaged(await super().get_result(activity_id))

    async def wait_for_result(self, activity_id: str, timeout: float | None) -> rq.ActivityResult | None:
        return self._damaged(await super().wait_for_result(activity_id, timeout))
