"""Which implementation is active: RUNNERQ_NO_EXTENSIONS, a failed import, ``speedups.enabled``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from runnerq_fast import _codec_py, _ids_py, codec, ids, speedups
from runnerq_fast.backends.postgres import _rows_py, rows
from runnerq_fast.backends.redis import _scoring_py, scoring
from runnerq_fast.engine import _backoff_py, backoff


def _run(code: str, **env: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if k != "RUNNERQ_NO_EXTENSIONS"}
    full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-W", "default", "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=full_env, timeout=30, check=True,
    )
    return proc.stdout.strip() + "|" + proc.stderr.strip()


_REPORT = """
import runnerq_fast.speedups as s, runnerq_fast.codec as c, runnerq_fast.backends.redis.scoring as sc
import runnerq_fast.engine.backoff as b, runnerq_fast.backends.postgres.rows as r
mods = {f.__module__ for f in (c.encode_json, sc.encode_score, b.backoff_seconds, r.ack_params)}
print(s.enabled, s.disabled_by_env, sorted(mods))
"""


def test_selectors_follow_the_flag() -> None:
    pure = (
        _codec_py.encode_json, _scoring_py.encode_score, _backoff_py.backoff_seconds, _rows_py.ack_params,
        _ids_py.new_activity_ids,
    )
    active = (codec.encode_json, scoring.encode_score, backoff.backoff_seconds, rows.ack_params, ids.new_activity_ids)
    if speedups.enabled:
        assert all(a is not p for a, p in zip(active, pure, strict=True))
    else:
        assert active == pure


@pytest.mark.parametrize("value", ["1", "yes"])
def test_env_var_selects_the_pure_twins(value: str) -> None:
    out = _run(_REPORT, RUNNERQ_NO_EXTENSIONS=value)
    assert out.startswith("False True ['runnerq_fast._codec_py', 'runnerq_fast.backends.postgres._rows_py', "
                          "'runnerq_fast.backends.redis._scoring_py', 'runnerq_fast.engine._backoff_py']")
    assert "Warning" not in out


def test_compiled_modules_are_selected_when_built() -> None:
    if not speedups.enabled and not speedups.disabled_by_env:
        pytest.skip("extensions not built")
    out = _run(_REPORT, RUNNERQ_NO_EXTENSIONS="0")
    assert out.startswith("True False ['runnerq_fast._codec', 'runnerq_fast.backends.postgres._rows', "
                          "'runnerq_fast.backends.redis._scoring', 'runnerq_fast.engine._backoff']"), out


def test_failed_import_falls_back_with_one_warning() -> None:
    out = _run(
        textwrap.dedent(
            """
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name in ("runnerq_fast._codec", "runnerq_fast.backends.postgres._rows"):
                    raise ImportError(f"blocked {name}")
                return None
        sys.meta_path.insert(0, Block())
        """
        ).lstrip()
        + _REPORT
    )
    stdout, _, stderr = out.partition("|")
    assert stdout.startswith("False False ['runnerq_fast._codec_py', 'runnerq_fast.backends.postgres._rows_py', "
                             "'runnerq_fast.backends.redis._scoring_py', 'runnerq_fast.engine._backoff_py']"), out
    assert stderr.count("RuntimeWarning") == 1 and "compiled hot paths unavailable" in stderr, stderr
    assert "reinstall with a C compiler" in stderr, stderr


def test_a_missing_dependency_is_named_not_blamed_on_the_compiler() -> None:
    """A third-party package missing under a compiled module's package: no compiler would help."""
    out = _run(
        textwrap.dedent(
            """
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "asyncpg":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None
        sys.meta_path.insert(0, Block())
        import runnerq_fast.speedups as s
        print(s.enabled)
        """
        ).lstrip()
    )
    stdout, _, stderr = out.partition("|")
    assert stdout == "False", out
    assert stderr.count("RuntimeWarning") == 1, stderr
    assert "a dependency is not installed: install 'asyncpg'" in stderr, stderr
    assert "C compiler" not in stderr, stderr


def test_a_missing_module_inside_a_package_selects_every_pure_twin() -> None:
    """The compiled worker path is imported last, after the engine package chose compiled twins on the way."""
    out = _run(
        textwrap.dedent(
            """
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "runnerq_fast.engine._worker":
                    raise ImportError(f"blocked {name}")
                return None
        sys.meta_path.insert(0, Block())
        import runnerq_fast.engine.deadline as d, runnerq_fast.engine.worker as w, runnerq_fast.backends.memory as m
        print(d.Deadlines.__module__, w.worker_loop.__module__, m.StoreCore.__module__)
        """
        ).lstrip()
        + _REPORT
    )
    stdout, _, stderr = out.partition("|")
    assert stdout.splitlines()[0] == (
        "runnerq_fast.engine._deadline_py runnerq_fast.engine._worker_py runnerq_fast.backends._memstore_py"
    ), out
    assert stdout.splitlines()[1].startswith("False False ['runnerq_fast._codec_py'"), out
    assert stderr.count("RuntimeWarning") == 1 and "blocked runnerq_fast.engine._worker" in stderr, stderr
