"""The CLI answers hostile or broken input with one line and exit 2 (bad input) or 1 (failure), never a
traceback, and never prints a credential (issue 11, items 13 and 14)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.acceptance.helpers import WorkerProcess, run_cli

SECRET = "s3cr3t-Pw"


def _one_clean_line(res: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """Assert exit ``code``, no traceback, and an ``error:`` line on stderr naming every needle."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, res.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


# ------------------------------------------------------------------ item 13: one-line errors
def test_payload_nested_100k_deep_is_bad_input(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    res = run_cli("enqueue", "t", "--payload", f"@{deep}", "--backend", "memory://")
    _one_clean_line(res, 2, "--payload", "nested too deeply")


@pytest.mark.parametrize("command", [["stats"], ["migrate"], ["inspect", "abc"], ["enqueue", "t"]])
def test_unparsable_backend_url_is_bad_input(command: list[str]) -> None:
    res = run_cli(*command, "--backend", "postgresql://[::1/x")
    _one_clean_line(res, 2, "malformed backend URL", "Invalid IPv6 URL")


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "rq_raises.py").write_text('raise RuntimeError("boom at import")\n')
    (tmp_path / "rq_syntax.py").write_text("def f(:\n    pass\n")
    (tmp_path / "rq_factory.py").write_text(
        "def make():\n    raise RuntimeError('factory boom')\n\n"
        "def needs_args(x):\n    return x\n\n"
        "def gives_none():\n    return None\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    ("spec", "code", "needles"),
    [
        ("json:dumps", 2, ["json:dumps", "needs arguments", "zero-argument factory"]),
        ("rq_factory:needs_args", 2, ["rq_factory:needs_args", "needs arguments", "zero-argument factory"]),
        ("rq_factory:gives_none", 2, ["returned a NoneType, not a runnerq_fast.WorkerEngine"]),
        ("rq_syntax:engine", 2, ["cannot import module 'rq_syntax'", "SyntaxError", "rq_syntax.py", "line 1"]),
        ("rq_raises:engine", 1, ["importing module 'rq_raises' failed", "RuntimeError: boom at import",
                                 "rq_raises.py", "line 1"]),
        ("rq_factory:make", 1, ["rq_factory:make", "RuntimeError: factory boom", "rq_factory.py", "line 2"]),
        ("sys:exit", 1, ["sys:exit", "SystemExit"]),
    ],
)
def test_worker_spec_that_is_no_engine_exits_cleanly(app_dir: Path, spec: str, code: int,
                                                      needles: list[str]) -> None:
    res = run_cli("worker", spec, "--backend", "memory://", cwd=app_dir)
    _one_clean_line(res, code, *needles)


# ------------------------------------------------------------------ item 14: credentials
@pytest.mark.parametrize("command", [["stats"], ["migrate"], ["inspect", "abc"], ["enqueue", "t"]])
@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://postgres@127.0.0.1:1/x?password={SECRET}",
        f"postgresql://postgres:{SECRET}@127.0.0.1:1/x",
        f"postgresql://postgres@127.0.0.1:1/x?sslmode=disable&password={SECRET}",
        f"redis://127.0.0.1:1/0?password={SECRET}",
        f"redis://:{SECRET}@127.0.0.1:1/0",
    ],
    ids=["pg-query", "pg-userinfo", "pg-query-second", "redis-query", "redis-userinfo"],
)
def test_failure_messages_never_print_the_password(command: list[str], url: str) -> None:
    res = run_cli(*command, "--backend", url, "--log-level", "debug")
    line = _one_clean_line(res, 1, "***")
    assert SECRET not in res.stderr + res.stdout, line


def test_migrate_success_hides_a_query_password(fresh_pg_url: str) -> None:
    res = run_cli("migrate", "--backend", f"{fresh_pg_url}?password={SECRET}")  # trust auth ignores it
    assert res.returncode == 0, res.stderr
    assert "migrations applied" in res.stderr and "password=***" in res.stderr
    assert SECRET not in res.stderr + res.stdout


def test_bench_title_hides_a_query_password(fresh_pg_url: str) -> None:
    res = run_cli("bench", "--backend", f"{fresh_pg_url}?password={SECRET}", "-n", "200", "--idle-samples", "5",
                  timeout=60)
    assert res.returncode == 0, res.stderr
    assert "password=***" in res.stdout
    assert SECRET not in res.stderr + res.stdout


# ------------------------------------------------------------------ item 6: KeyboardInterrupt in a handler
_INTERRUPTING_APP = '''
import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="ki", retry_delay=0.05, max_retry_delay=0.05, poll_interval=0.05)


@engine.activity("ki_async")
async def ki_async(payload, ctx):
    if ctx.retry_count == 0:
        raise KeyboardInterrupt("from a handler")
    return {"retry_count": ctx.retry_count}


@engine.activity("ki_plain")
def ki_plain(payload, ctx):
    if ctx.retry_count == 0:
        raise KeyboardInterrupt("from a thread")
    return {"retry_count": ctx.retry_count}
'''


def test_a_handler_raising_keyboard_interrupt_fails_the_attempt_and_sigint_still_stops_gracefully(
    tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    (tmp_path / "interrupting_app.py").write_text(_INTERRUPTING_APP)
    url = f"sqlite:///{tmp_path / 'ki.db'}"
    w = start_worker("interrupting_app:engine", "--backend", url, cwd=tmp_path)
    w.wait_for_log("started on sqlite queue='ki'")
    for activity_type in ("ki_async", "ki_plain"):
        res = run_cli("enqueue", activity_type, "--queue", "ki", "--max-retries", "1", "--wait", "15",
                      "--backend", url)
        assert res.returncode == 0, (res.stderr, w.log())
        assert res.stdout.splitlines()[-1] == '{"retry_count":1}'
    assert w.proc.poll() is None, w.log()  # the worker lived through both
    assert "KeyboardInterrupt: from a handler" in w.log() and "KeyboardInterrupt: from a thread" in w.log()
    w.signal(signal.SIGINT)
    assert w.wait() == 0, w.log()
    assert "received SIGINT; stopping gracefully" in w.log()


@pytest.mark.parametrize("url", [
    "postgresql://postgres:s3cr/et@127.0.0.1:5432/nodb",
    "postgresql://postgres:s3cr#et@127.0.0.1:5432/nodb",
    "postgresql://postgres:s3cr[/x]et@127.0.0.1:5432/nodb",
    "redis://:s3cr/et@127.0.0.1:6379/0",
    "redis://:s3cr?et@127.0.0.1:6379/0",
])
def test_a_password_with_an_unencoded_delimiter_is_never_shown(url: str) -> None:
    """Drivers split such a URL at the "/", "?" or "#" and quoted a piece of the password; so did the redaction."""
    for args in (("stats", "--backend", url), ("migrate", "--backend", url)):
        res = run_cli(*args)
        assert res.returncode == 2, res.stderr
        assert "s3cr" not in res.stderr and "et@" not in res.stderr, res.stderr
        assert "***" in res.stderr and "percent-encode" in res.stderr, res.stderr
    res = run_cli("enqueue", "t", RUNNERQ_BACKEND=url)
    assert res.returncode == 2 and "s3cr" not in res.stderr, res.stderr


def test_bench_output_json_in_a_missing_directory_is_refused_before_the_run(tmp_path: Path) -> None:
    """It ran the whole benchmark, then died with a FileNotFoundError traceback and lost the figures."""
    target = tmp_path / "missing" / "bench.json"
    res = run_cli("bench", "-n", "100", "--backend", "memory://", "--idle-samples", "0", "--typed-samples", "0",
                  "--due-samples", "0", "--output-json", str(target))
    err_line = _one_clean_line(res, 2, "--output-json", "does not exist")
    assert str(target.parent) in err_line
    assert "drain" not in res.stdout  # refused before anything ran
