"""Typing tests: mypy --strict on the public API's typing cases (the docs' examples: tests/docs/).

``cases/public_api.py`` states on each line what mypy must say about it
(``# N:`` a ``reveal_type`` note, ``# E:`` an error); the test runs mypy on
it and compares. mypy runs in a subprocess with the project's configuration
and cache, so after CI's own ``mypy`` run only these files are checked;
``tests/docs/`` checks every example of README.md and docs/ with the same
``_mypy``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).parent / "cases"
_EXPECT = re.compile(r"#\s*([NE]):\s*(.+?)\s*$")
_OUTPUT = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")


def _mypy(*args: str) -> list[tuple[str, int, str, str]]:
    """Run mypy --strict on ``args``; (file, line, "error" or "note", text) for each message."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--no-pretty", "--show-absolute-path",
         *args],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 2 would be a crash or a usage error
    found = []
    for line in proc.stdout.splitlines():
        m = _OUTPUT.match(line)
        assert m is not None, f"unexpected mypy output: {line!r}"
        found.append((m["file"], int(m["line"]), m["kind"], m["text"]))
    return found


def test_public_api_types() -> None:
    _check_case(CASES / "public_api.py", 15)


def test_typed_payload_types() -> None:
    """A builder started from a handler takes the handler's payload type (issue 27 item 5)."""
    _check_case(CASES / "typed_payloads.py", 7)


def _check_case(path: Path, at_least: int) -> None:
    """mypy says on each marked line of ``path`` (``at_least`` or more) what its comment expects, no other error."""
    expected: dict[int, tuple[str, str]] = {}
    for n, text in enumerate(path.read_text().splitlines(), 1):
        m = _EXPECT.search(text)
        if m:
            expected[n] = ("note" if m[1] == "N" else "error", m[2])
    assert len(expected) >= at_least
    found = _mypy(str(path))
    problems = []
    for n, (kind, fragment) in sorted(expected.items()):
        texts = [t.replace("builtins.", "") for _, line, k, t in found if line == n and k == kind]
        if not any(fragment in t for t in texts):
            problems.append(f"line {n}: expected {kind} containing {fragment!r}, mypy said {texts}")
    for _, line, kind, text in found:
        if kind == "error" and expected.get(line, ("", ""))[0] != "error":
            problems.append(f"line {line}: unexpected error {text!r}")
    assert not problems, "\n".join(problems)


def test_worker_settings_name_every_worker_config_field_with_its_type() -> None:
    """``WorkerSettings`` (the typed keyword arguments) and ``WorkerConfig`` (the defaults) never drift apart."""
    import typing

    import runnerq_fast as rq

    settings = typing.get_type_hints(rq.WorkerSettings)
    config = typing.get_type_hints(rq.WorkerConfig)
    assert list(settings) == list(rq.WorkerConfig.__struct_fields__)
    assert settings == {name: config[name] for name in settings}
