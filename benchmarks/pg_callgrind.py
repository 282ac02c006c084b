"""PostgreSQL server instructions per activity of the hot-path statements, under callgrind, beside the bare loop.

::

    .venv/bin/python benchmarks/pg_callgrind.py -n 4000
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/pg_callgrind.py -n 4000

Creates a private PostgreSQL cluster (``initdb`` into a temporary directory,
run as the ``postgres`` user when started as root) and starts its
``postgres`` under ``valgrind --tool=callgrind`` on a free port: every
backend process it forks is counted. Then, for runnerq-fast (the real
``PostgresBackend``, migrated from scratch) and for the bare loop of
``benchmarks/peers/bare_pg.py``: enqueues ``-n`` no-op activities in batches
of 500, claims them ``--claim-batch`` at a time (default 256, a default
drain's claim) and acks them completed ``--ack-batch`` at a time (default
1,024, about a drain's ack flush), without a result, as the benchmarks'
no-op handler returns ``None``. Around each phase the counters of every
process of the server are zeroed and dumped (``callgrind_control``), and the
instructions (Ir) of the phase, all processes together (the backends, the
WAL writer, the checkpointer...), are printed per activity. Instruction
counts do not depend on the machine's load, so two checkouts compare
exactly whatever else runs. ``--keep DIR`` keeps the dumps there for
``callgrind_annotate`` (``cg.<pid>.<n>``; the largest of a phase is the
backend that ran it). Autovacuum is off in the private cluster, so no
vacuum lands inside a phase; ``fsync`` is on, as a default server runs (its
waits are not instructions). A run of 4,000 takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
from _services import free_port

import runnerq_fast as rq
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import Ack, AckOutcome, ClaimedActivity, NewActivity

sys.path.insert(0, str(Path(__file__).parent / "peers"))
import bare_pg


def _pg_bin() -> Path:
    """The directory of this machine's PostgreSQL server programs."""
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
        if out and (Path(out) / "postgres").exists():
            return Path(out)
    # the newest version: "15" after "9", so by number, not as text
    versions = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    for cand in sorted(versions, key=lambda p: int(p.parent.name), reverse=True):
        if (cand / "postgres").exists():
            return cand
    raise SystemExit("no PostgreSQL server programs found (pg_config --bindir, /usr/lib/postgresql/*/bin)")


class Grind:
    """A private PostgreSQL cluster under callgrind and the dumps of its phases."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.port = free_port()
        self.bindir = _pg_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="rq-pgcg-"))
        self.data = self.dir / "data"
        self.proc: subprocess.Popen[bytes] | None = None
        self._as: list[str] = []  # the command prefix that runs a server program as its user
        try:
            self._start()
        except BaseException:  # a failed start, Ctrl-C or SIGTERM while waiting: leave no server behind
            self.stop()
            raise

    def _start(self) -> None:
        # callgrind writes its files here (the server's user must reach it; --keep may be a private
        # directory): dump() moves each phase's files to out
        self.cg = self.dir / "cg"
        self.cg.mkdir()
        if os.geteuid() == 0:  # the server refuses to run as root
            user = pwd.getpwnam("postgres")
            for p in (self.dir, self.cg):
                os.chown(p, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        made = subprocess.run([*self._as, str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                               "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"],
                              capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise SystemExit(f"initdb failed: {made.stderr.strip()}")
        self.log = self.dir / "server.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [*self._as, "valgrind", "--tool=callgrind", f"--callgrind-out-file={self.cg}/cg.%p",
                 "--dump-before=pg_sleep",
                 str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.dir),
                 "-c", "listen_addresses=127.0.0.1", "-c", "autovacuum=off", "-c", "shared_buffers=128MB"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        deadline = time.monotonic() + 300
        while True:
            try:
                asyncio.run(self._ping())
                break
            except (OSError, asyncpg.PostgresError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
                    raise SystemExit("the private PostgreSQL under callgrind did not start:\n"
                                     + "\n".join(tail)) from None
                time.sleep(0.5)

    async def _ping(self) -> None:
        conn = await asyncpg.connect(self.url, timeout=5)
        await conn.close()

    async def mark(self, conns: Sequence[Any]) -> None:
        """Start a phase on ``conns``: each of their server processes dumps its counters (``pg_sleep``)."""
        for c in conns:
            await c.execute("SELECT pg_sleep(0)")

    async def dump(self, name: str, conns: Sequence[Any]) -> int:
        """End the phase :meth:`mark` began on ``conns``; returns their instructions since then, added up."""
        before = set(self.cg.glob("cg.*"))
        await self.mark(conns)
        total = 0
        for _ in range(100):  # callgrind writes the part as pg_sleep is entered, before it answers
            new = set(self.cg.glob("cg.*")) - before
            if len(new) >= len(conns):
                break
            await asyncio.sleep(0.05)
        else:  # a missing part would make the phase look cheaper than it was
            raise RuntimeError(f"{name}: callgrind wrote {len(new)} of {len(conns)} dumps within 5 s")
        for path in sorted(new):
            text = path.read_text(errors="replace")
            m = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
            if m:
                total += int(m.group(1))
            shutil.move(path, self.out / f"{name}.{path.name}")
        return total

    def stop(self) -> None:
        """Shut the server down (a fast shutdown: open sessions are ended) and remove its directory."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            pg_ctl = [*self._as, str(self.bindir / "pg_ctl"), "-D", str(self.data), "stop", "-t", "120"]
            if (self.data / "postmaster.pid").exists():
                subprocess.run([*pg_ctl, "-m", "fast"], capture_output=True, check=False)
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()  # runuser passes it on to the postmaster
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                subprocess.run([*pg_ctl, "-m", "immediate"], capture_output=True, check=False)
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


async def _runnerq(g: Grind, n: int, claim_batch: int, ack_batch: int, setup: str | None) -> dict[str, int]:
    # claims on one backend's connection and acks on another's, so each is counted alone while they
    # interleave as in a drain (at most about claim_batch + ack_batch activities processing at a time)
    claimer = await rq.connect(g.url, min_size=1, max_size=1)
    acker = await rq.connect(g.url, min_size=1, max_size=1)
    queue = f"cg{uuid.uuid4().hex[:8]}"
    items = [NewActivity(id=new_activity_id(), activity_type="noop", payload=b"null") for _ in range(n)]
    out: dict[str, int] = {}
    a, b = [claimer._pool], [acker._pool]  # type: ignore[attr-defined]  # their one connection each
    try:
        if setup:
            try:
                await claimer._pool.execute(setup)  # type: ignore[attr-defined]
            except asyncpg.PostgresError as exc:
                raise SystemExit(f"--setup-sql failed: {type(exc).__name__}: {exc}") from None
        await g.mark(a)
        for i in range(0, n, 500):
            await claimer.enqueue(queue, items[i : i + 500])
        out["enqueue"] = await g.dump("rq-enqueue", a)
        await g.mark(a)
        await g.mark(b)
        held: list[ClaimedActivity] = []
        drained = 0
        while drained < n:
            got = await claimer.claim(queue, "w", claim_batch, ["noop"], 30_000)
            held += got
            if len(held) >= ack_batch or not got:
                if not held:
                    raise RuntimeError(f"claimed {drained} of {n}")
                acks = [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, None) for c in held[:ack_batch]]
                del held[:ack_batch]
                if await acker.ack(queue, acks):
                    raise RuntimeError("acks rejected")
                drained += len(acks)
        out["claim"] = await g.dump("rq-claim", a)
        out["ack"] = await g.dump("rq-ack", b)
    finally:
        await claimer.close()
        await acker.close()
    return out


async def _bare(g: Grind, n: int, claim_batch: int, ack_batch: int) -> dict[str, int]:
    from datetime import UTC, datetime

    conn = await asyncpg.connect(g.url)
    conn2 = await asyncpg.connect(g.url)
    table = bare_pg.TABLE
    out: dict[str, int] = {}
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.execute(bare_pg.SCHEMA)
        await g.mark([conn])
        for start in range(0, n, 500):
            now = datetime.now(UTC)
            records = [(uuid.uuid4(), "bench", "noop", "null", 2, "pending", now)
                       for _ in range(min(500, n - start))]
            await conn.copy_records_to_table(
                table, records=records,
                columns=["id", "queue", "activity_type", "payload", "priority", "status", "created_at"])
        out["enqueue"] = await g.dump("bare-enqueue", [conn])
        claim = await conn.prepare(bare_pg.CLAIM)
        ack = await conn2.prepare(bare_pg.ACK)
        await g.mark([conn])
        await g.mark([conn2])
        while True:  # the bare loop acks each claim's ids in one statement (one claim token each)
            token = uuid.uuid4()
            rows = await claim.fetch("bench", claim_batch, token)
            if not rows:
                break
            await ack.fetch([r[0] for r in rows], token)
        out["claim"] = await g.dump("bare-claim", [conn])
        out["ack"] = await g.dump("bare-ack", [conn2])
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.close()
        await conn2.close()
    return out


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=_positive, default=4000, help="activities (default 4,000)")
    parser.add_argument("--claim-batch", type=_positive, default=256, help="activities per claim (default 256)")
    parser.add_argument("--ack-batch", type=_positive, default=1024,
                        help="acks per runnerq-fast ack (default 1,024)")
    parser.add_argument("--keep", type=Path, help="keep the callgrind dumps in this directory")
    parser.add_argument("--setup-sql", type=Path, metavar="FILE",
                        help="SQL run once after runnerq-fast's migrations, before its phases: a schema change to "
                             "try before writing its migration")
    parser.add_argument("--no-bare", action="store_true", help="leave the bare loop out")
    args = parser.parse_args()
    if args.keep is not None and args.keep.exists() and not args.keep.is_dir():
        parser.error(f"--keep {args.keep}: not a directory")
    setup = None
    if args.setup_sql is not None:
        try:
            setup = args.setup_sql.read_text()
        except OSError as exc:
            parser.error(f"--setup-sql {args.setup_sql}: {exc.strerror or exc}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    # SIGTERM ends the run as Ctrl-C does, through the finally below: no server is left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    out = args.keep or Path(tempfile.mkdtemp(prefix="rq-pgcallgrind-"))
    out.mkdir(parents=True, exist_ok=True)
    done = False
    try:
        g = Grind(out)
        try:
            rows = {"runnerq": asyncio.run(_runnerq(g, args.n, args.claim_batch, args.ack_batch, setup))}
            if not args.no_bare:
                rows["bare"] = asyncio.run(_bare(g, args.n, args.claim_batch, args.ack_batch))
        finally:
            g.stop()
        done = True
    finally:
        if not done and args.keep is None:
            shutil.rmtree(out, ignore_errors=True)  # a failed run's partial dumps, in a directory of its own
    print(f"PostgreSQL server instructions per activity (n = {args.n}, claims of {args.claim_batch}, "
          f"runnerq-fast acks of {args.ack_batch}; dumps in {out})")
    for name, phases in rows.items():
        per = {k: v / args.n for k, v in phases.items()}
        print(f"{name:8} enqueue {per['enqueue']:9.0f}  claim {per['claim']:9.0f}  ack {per['ack']:9.0f}  "
              f"claim+ack {per['claim'] + per['ack']:9.0f}")


if __name__ == "__main__":
    main()
