"""The recipe of docs/guide/limits.md, run as written: its module and its two worker commands, as real processes.

The page's ``app.py`` block is written to a fresh directory and each line of its ``bash`` block is started
there (``runnerq-fast`` being this interpreter's CLI), on the page's own SQLite URL. Then thumbnails,
resizes and uploads are enqueued, and the store's events tell whether more than 4 thumbnails ever ran at
once across the two processes.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
from collections.abc import Callable
from pathlib import Path

import runnerq_fast as rq
from tests.acceptance.helpers import REPO, WorkerProcess, eventually

PAGE = REPO / "docs" / "guide" / "limits.md"
LIMIT = 4
THUMBNAILS = 12


def recipe() -> tuple[str, list[list[str]]]:
    """The page's module (the block that starts with ``# app.py``) and its worker commands, as argv lists."""
    text = PAGE.read_text()
    (module,) = [b for b in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
                 if b.startswith("# app.py")]
    (commands,) = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    argvs = [shlex.split(line.split("#", 1)[0]) for line in commands.splitlines() if line.strip()]
    return module, argvs


def test_the_limit_across_processes_recipe_runs_and_holds(
    tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    module, argvs = recipe()
    assert f"limits={{\"thumbnail\": {LIMIT}}}" in module and len(argvs) == 2
    (tmp_path / "app.py").write_text(module)
    workers = []
    for argv in argvs:
        assert argv[:2] == ["runnerq-fast", "worker"], argv
        workers.append(start_worker(*argv[2:], cwd=tmp_path))
    for w in workers:
        w.wait_for_log("started", timeout=30)  # exits (with the ConfigError) instead when the recipe fails

    async def run() -> list[int]:
        backend = await rq.connect(f"sqlite:///{tmp_path / 'app.db'}")
        try:
            insp = rq.QueueInspector(backend, "media")
            types = sorted(tuple(w.activity_types) for w in await insp.workers())
            assert types == [("resize", "upload"), ("thumbnail",)], types
            ex = rq.ActivityExecutor(backend, "media")
            await ex.enqueue_many([("thumbnail", {"n": i}) for i in range(THUMBNAILS)]
                                  + [(t, {"n": i}) for i in range(10) for t in ("resize", "upload")])

            async def drained() -> bool:
                return (await insp.stats()).completed == THUMBNAILS + 20

            await eventually(drained, 30, "every activity completed")
            page = await insp.query(rq.ActivityFilter(activity_types=("thumbnail",)), limit=THUMBNAILS)
            assert len(page.items) == THUMBNAILS
            claims = []
            for a in page.items:
                claims += [e.at_ms for e in await insp.events(a.id) if e.event_type == "claimed"]
            return sorted(claims)
        finally:
            await backend.close()

    claims = asyncio.run(run())
    assert len(claims) == THUMBNAILS  # each ran once
    # a thumbnail sleeps 200 ms: with at most 4 running, the claim 4 places later waited for one to end
    gaps = [later - earlier for earlier, later in zip(claims, claims[LIMIT:], strict=False)]
    assert min(gaps) >= 150, (gaps, claims)
    # and the limit is used, not just respected: 4 thumbnails were claimed together
    assert any(claims[i + LIMIT - 1] - claims[i] < 150 for i in range(THUMBNAILS - LIMIT + 1)), claims
    for w in workers:
        w.signal(signal.SIGTERM)
    assert [w.wait(20) for w in workers] == [0, 0], [w.log() for w in workers]
