"""CLI acceptance tests that need no service (memory:// backend)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import runnerq_fast as rq
from runnerq_fast.backends.sqlfiles import load_migrations
from tests.acceptance.helpers import REPO, WorkerProcess, cli_command, run_cli, subprocess_env


def test_enqueue_bad_json_exits_2_with_a_clear_message() -> None:
    res = run_cli("enqueue", "send_email", "--payload", '{"to": ', "--backend", "memory://")
    assert res.returncode == 2
    assert "error: --payload is not valid JSON" in res.stderr
    assert res.stdout == ""


def test_enqueue_without_a_backend_names_the_option_and_the_env_var() -> None:
    res = run_cli("enqueue", "send_email", "--payload", "{}")
    assert res.returncode == 2
    assert "--backend" in res.stderr and "RUNNERQ_BACKEND" in res.stderr


def test_enqueue_rejects_bad_options_before_storing() -> None:
    bad_priority = run_cli("enqueue", "t", "--priority", "urgent", "--backend", "memory://")
    assert bad_priority.returncode == 2
    assert "low, normal, high, critical or 1-4" in bad_priority.stderr
    negative_delay = run_cli("enqueue", "t", "--delay", "-1", "--backend", "memory://")
    assert negative_delay.returncode == 2
    assert "delay must be within [0," in negative_delay.stderr
    nan_payload = run_cli("enqueue", "t", "--payload", "NaN", "--backend", "memory://")
    assert nan_payload.returncode == 2


def test_enqueue_prints_the_id() -> None:
    res = run_cli("enqueue", "t", "--payload", '{"x": 1}', "--priority", "critical", "--backend", "memory://")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.strip()) == 32


def test_unsupported_backend_scheme_is_a_usage_error() -> None:
    res = run_cli("stats", "--backend", "mysql://localhost/x")
    assert res.returncode == 2
    assert "unsupported backend URL scheme" in res.stderr


def test_bench_on_memory_writes_sane_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    res = run_cli("bench", "--backend", "memory://", "-n", "2000", "--idle-samples", "50",
                  "--typed-samples", "20", "--due-samples", "8", "--output-json", str(out))
    assert res.returncode == 0, res.stderr
    assert "drain (process)" in res.stdout
    data = json.loads(out.read_text())
    assert data["backend"] == "memory"
    assert data["n"] == 2000
    assert data["completed"] == 2000
    assert data["backend_stats"]["completed"] == 2000 + 50 + 20 + 8
    assert data["process_per_s"] > 0 and data["enqueue_per_s"] > 0
    assert data["backlog_latency"]["samples"] == 2000
    assert data["idle_latency"]["samples"] == 50 and data["idle_latency"]["missed"] == 0
    assert 0 < data["idle_latency"]["p50_ms"] <= data["idle_latency"]["p99_ms"]
    assert data["typed_idle_latency"]["samples"] == 20 and data["typed_idle_latency"]["missed"] == 0
    assert data["due_latency"]["samples"] == 8 and data["due_latency"]["missed"] == 0
    # from the due time, not the enqueue: far below the 30 ms shortest delay and the 1 s poll
    assert 0 <= data["due_latency"]["min_ms"] <= data["due_latency"]["p50_ms"] < 500
    assert "two type-disjoint engines" in res.stdout and "due→start" in res.stdout
    assert data["queue_name"].startswith("bench-")
    assert data["concurrency"] == data["engine_config"]["max_workers"] == rq.WorkerConfig().max_workers
    assert isinstance(data["speedups_enabled"], bool)
    assert data["python"] and data["platform"]


def test_worker_stops_cleanly_on_sigterm(start_worker: Callable[..., WorkerProcess]) -> None:
    w = start_worker("examples.shop.app:engine", "--backend", "memory://", "--concurrency", "4")
    w.wait_for_log("started on memory queue='shop' workers=4")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0, w.log()
    assert "stopped" in w.log()


def test_worker_applies_overrides(start_worker: Callable[..., WorkerProcess]) -> None:
    w = start_worker("examples.shop.app:engine", "--backend", "memory://", "--queue", "other",
                     "--activity-types", "send_email,fraud_check", "--log-level", "debug")
    w.wait_for_log(f"queue='other' workers={rq.WorkerConfig().max_workers} types=send_email,fraud_check")
    w.signal(signal.SIGINT)
    assert w.wait() == 0, w.log()


def test_worker_with_a_bad_target_exits_2() -> None:
    missing = run_cli("worker", "no_such_module:engine", "--backend", "memory://")
    assert missing.returncode == 2
    assert "cannot import module 'no_such_module'" in missing.stderr
    not_engine = run_cli("worker", "examples.shop.app:QUEUE", "--backend", "memory://")
    assert not_engine.returncode == 2
    assert "not a runnerq_fast.WorkerEngine" in not_engine.stderr
    undeclared = run_cli("worker", "examples.shop.app:engine", "--backend", "memory://", "--activity-types", "nope")
    assert undeclared.returncode == 2
    assert "nope" in undeclared.stderr


def test_demo_shop_runs_the_example_end_to_end_in_memory() -> None:
    res = run_cli("demo-shop", "--orders", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "shop: 2 orders x 8 activities" in res.stdout
    assert "│ completed   │    16 │" in res.stdout


def test_demo_shop_outside_the_repository_says_where_to_run_it(tmp_path: Path) -> None:
    res = run_cli("demo-shop", cwd=tmp_path)
    assert res.returncode == 2
    assert "run it from the repository root" in res.stderr


def test_example_enqueuer_refuses_to_run_without_a_backend() -> None:
    res = subprocess.run([sys.executable, "-m", "examples.shop.enqueue_orders"], cwd=REPO, env=subprocess_env(),
                         capture_output=True, text=True, timeout=20, check=False)
    assert res.returncode == 2
    assert "--backend" in res.stderr


def test_worker_without_a_backend_names_the_option_and_the_env_var() -> None:
    res = run_cli("worker", "examples.shop.app:engine")
    assert res.returncode == 2
    assert "--backend" in res.stderr and "RUNNERQ_BACKEND" in res.stderr


def test_enqueue_reads_the_payload_from_a_file_or_stdin(tmp_path: Path) -> None:
    good = tmp_path / "payload.json"
    good.write_text(json.dumps({"big": "x" * 300_000}))  # over the argument-length limit of a command line
    from_file = run_cli("enqueue", "t", "--payload", f"@{good}", "--backend", "memory://")
    assert from_file.returncode == 0, from_file.stderr
    assert len(from_file.stdout.strip()) == 32
    from_stdin = subprocess.run(
        [*cli_command(), "enqueue", "t", "--payload", "@-", "--backend", "memory://"],
        input='{"a": 1}', capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=20,
    )
    assert from_stdin.returncode == 0, from_stdin.stderr
    missing = run_cli("enqueue", "t", "--payload", f"@{tmp_path / 'nope.json'}", "--backend", "memory://")
    assert missing.returncode == 2 and "cannot read it" in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    broken = run_cli("enqueue", "t", "--payload", f"@{bad}", "--backend", "memory://")
    assert broken.returncode == 2 and "not valid JSON" in broken.stderr


def test_worker_log_lines_name_the_activity_they_were_logged_in(
    start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    enqueued = run_cli("enqueue", "chat", "--payload", "7", "--queue", "chatty", "--backend", url)
    assert enqueued.returncode == 0, enqueued.stderr
    activity_id = enqueued.stdout.strip()
    w = start_worker("tests.acceptance.logging_app:engine", "--backend", url)
    # the handler's own line (from its thread), on each attempt, and the engine's line about the retry
    w.wait_for_log(f"chatty.app: [chat {activity_id} #2] hello 7")
    log = w.log()
    assert f"chatty.app: [chat {activity_id} #1] hello 7" in log
    assert f"runnerq_fast.engine: [chat {activity_id} #1] activity {activity_id} (chat) attempt 1 failed" in log
    assert "runnerq_fast.engine: engine " in log  # a line outside any activity has no tag
    w.signal(signal.SIGTERM)
    assert w.wait() == 0, w.log()


def _sqlite_dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_migrate_says_what_it_applied_then_up_to_date_then_warns_about_a_newer_release(tmp_path: Path) -> None:
    target = tmp_path / "m.db"
    url = f"sqlite:///{target}"
    versions = [m.version for m in load_migrations("runnerq_fast.backends.sqlite")]
    first = run_cli("migrate", "--backend", url)
    assert first.returncode == 0, first.stderr
    assert f"migrations applied on sqlite backend {url}: 0001, " in first.stderr
    assert first.stderr.rstrip().endswith(f", {versions[-1]:04d}") and "up to date" not in first.stderr

    second = run_cli("migrate", "--backend", url)
    assert second.returncode == 0, second.stderr
    assert f"already up to date: nothing to migrate on sqlite backend {url}" in second.stderr
    assert f"up to {versions[-1]:04d}" in second.stderr
    assert "migrations applied" not in second.stderr and "newer runnerq-fast" not in second.stderr

    future = versions[-1] + 1
    conn = sqlite3.connect(target)
    with conn:
        conn.execute("INSERT INTO runnerq_migrations VALUES (?, 'from_the_future', 0)", (future,))
    conn.close()
    before = _sqlite_dump(target)
    third = run_cli("migrate", "--backend", url)
    assert third.returncode == 0, third.stderr
    assert "already up to date" in third.stderr
    assert f"\nwarning: the store holds migration {future:04d}, unknown to this runnerq-fast release" in third.stderr
    for fact in (f"up to {versions[-1]:04d}", "a newer runnerq-fast migrated it", "may not read or write it correctly",
                 "upgrade runnerq-fast", "roll back only to releases that know"):
        assert fact in third.stderr, fact
    assert third.stderr.count("newer runnerq-fast") == 1  # the command's own line, not the log's too
    assert _sqlite_dump(target) == before  # nothing stored changed

    enqueued = run_cli("enqueue", "t", "--payload", "{}", "--backend", url)  # any other command opens it with the log's
    assert enqueued.returncode == 0, enqueued.stderr
    assert "WARNING" in enqueued.stderr and f"{future:04d}" in enqueued.stderr
    assert "newer runnerq-fast" in enqueued.stderr


def test_migrate_on_memory_has_nothing_to_do() -> None:
    res = run_cli("migrate", "--backend", "memory://")
    assert res.returncode == 0, res.stderr
    assert "already up to date: nothing to migrate on memory backend memory://" in res.stderr


def test_user_text_with_brackets_is_printed_as_is_not_read_as_markup(tmp_path: Path) -> None:
    """A path, queue, type or error holding ``[...]`` is printed verbatim (rich markup is off for user data).

    Before, ``[x]`` vanished from the output and ``[/x]`` (a closing tag matching nothing) crashed the
    command with rich's MarkupError after the store was written.
    """
    folder = tmp_path / "a[" / "b]"  # the path reads ".../a[/b]/q.db": a closing markup tag
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder / 'q.db'}"
    migrate = run_cli("migrate", "--backend", url)
    assert migrate.returncode == 0, migrate.stderr
    assert "a[/b]/q.db" in migrate.stderr, migrate.stderr
    queue, kind = "orders[/x]", "[bold]send[/bold]"
    enq = run_cli("enqueue", kind, "--queue", queue, "--payload", "{}", "--backend", url)
    assert enq.returncode == 0, enq.stderr
    stats = run_cli("stats", "--backend", url, "--queue", queue)
    assert stats.returncode == 0, stats.stderr
    assert "pending" in stats.stdout
    listing = run_cli("stats", "--backend", url)
    assert listing.returncode == 0, listing.stderr
    assert queue in listing.stdout + listing.stderr, listing.stdout + listing.stderr
    shown = run_cli("inspect", enq.stdout.strip(), "--backend", url)
    assert shown.returncode == 0, shown.stderr
    assert kind in shown.stdout and queue in shown.stdout, shown.stdout


def test_stats_of_a_queue_the_store_lacks_names_the_queues_it_has(tmp_path: Path) -> None:
    """A misspelt --queue printed zeros and nothing else."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert run_cli("enqueue", "t", "--queue", "orders", "--payload", "{}", "--backend", url).returncode == 0
    typo = run_cli("stats", "--backend", url, "--queue", "ordres")
    assert typo.returncode == 0, typo.stderr
    assert "note: queue 'ordres' has no activities; this store's queues: 'orders'" in typo.stderr, typo.stderr
    right = run_cli("stats", "--backend", url, "--queue", "orders")
    assert right.returncode == 0 and "note:" not in right.stderr, right.stderr


def test_enqueue_and_stats_without_queue_agree_and_say_which_queue(tmp_path: Path) -> None:
    """``enqueue`` went to 'default' while ``stats`` showed the store's only queue: a stray activity sat pending
    for ever in a queue no worker served (issue 27 item 7a). One rule now, and the queue is named."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    first = run_cli("enqueue", "t", "--backend", url)  # an empty store: 'default'
    assert first.returncode == 0, first.stderr
    assert "queue 'default' (no queue in this store yet)" in first.stderr, first.stderr
    moved = run_cli("enqueue", "t", "--queue", "emails", "--backend", f"sqlite:///{tmp_path / 'e.db'}")
    assert moved.returncode == 0 and "queue 'emails'" in moved.stderr, moved.stderr
    url = f"sqlite:///{tmp_path / 'e.db'}"
    # the store's only queue is 'emails': enqueue and stats both take it
    second = run_cli("enqueue", "t", "--backend", url)
    assert second.returncode == 0, second.stderr
    assert "queue 'emails' (the only queue in this store)" in second.stderr, second.stderr
    stats = run_cli("stats", "--json", "--backend", url)
    doc = json.loads(stats.stdout)
    assert (doc["queue"], doc["pending"]) == ("emails", 2), doc
    assert "queue 'emails' (the only queue in this store)" in stats.stderr
    actions = run_cli("run-now", "--all", "--backend", url)
    assert actions.returncode == 0 and "queue 'emails' (the only queue" in actions.stderr, actions.stderr
    # several queues: enqueue does not guess, it names them
    assert run_cli("enqueue", "t", "--queue", "other", "--backend", url).returncode == 0
    several = run_cli("enqueue", "t", "--backend", url)
    assert several.returncode == 2, several.stderr
    assert "this store has 2 queues ('emails', 'other'): pass --queue NAME" in several.stderr, several.stderr
    counts = json.loads(run_cli("stats", "--json", "--backend", url).stdout)
    assert [(q["queue"], q["total"]) for q in counts["queues"]] == [("emails", 2), ("other", 1)]


def test_enqueue_into_an_empty_store_goes_to_the_queue_its_running_workers_serve(tmp_path: Path) -> None:
    """A fresh store with a worker on 'app': enqueue went to 'default', where no worker listens, and
    ``--wait`` timed out (found by a new user trying the queue rule)."""
    url = f"sqlite:///{tmp_path / 'q.db'}"

    async def register(store: str, *queues: str) -> None:
        backend = await rq.connect(store)
        try:
            for i, q in enumerate(queues):
                info = rq.WorkerInfo(worker_id=f"w{q}{i}", queue=q, host="h", pid=1, activity_types=("*",),
                                     in_flight=0, concurrency=1, started_at_ms=1, last_seen_ms=1)
                await backend.register_worker(info, 60_000)
        finally:
            await backend.close()

    asyncio.run(register(url, "app"))
    first = run_cli("enqueue", "t", "--backend", url)
    assert first.returncode == 0, first.stderr
    assert "queue 'app' (the only queue a running worker serves" in first.stderr, first.stderr
    other = f"sqlite:///{tmp_path / 'o.db'}"
    asyncio.run(register(other, "a", "b"))
    several = run_cli("enqueue", "t", "--backend", other)
    assert several.returncode == 2, several.stderr
    assert "running workers serve 2 queues ('a', 'b'): pass --queue NAME" in several.stderr, several.stderr


def test_piped_tables_show_long_names_whole(tmp_path: Path) -> None:
    """Piped output was 80 columns wide: a long queue name came out cut with an ellipsis, unusable by a script."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    queue = "orders-with-a-rather-long-queue-name-for-the-eu-west-region-" + "x" * 40
    assert run_cli("enqueue", "t", "--queue", queue, "--payload", "{}", "--backend", url).returncode == 0
    assert run_cli("enqueue", "t", "--queue", "other", "--payload", "{}", "--backend", url).returncode == 0
    listing = run_cli("queues", "--backend", url)
    assert listing.returncode == 0, listing.stderr
    assert queue in listing.stdout, listing.stdout
    narrow = run_cli("queues", "--backend", url, COLUMNS="60")  # a width the caller asks for is kept
    assert narrow.returncode == 0 and queue not in narrow.stdout, narrow.stdout
