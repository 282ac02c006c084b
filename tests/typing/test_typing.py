"""Typing tests: mypy --strict on the public API's typing cases, and on the README's examples.

``cases/public_api.py`` states on each line what mypy must say about it
(``# N:`` a ``reveal_type`` note, ``# E:`` an error); the test runs mypy on
it and compares. Every ```` ```python ```` block of README.md that imports
``runnerq_fast`` is type-checked the same way and must have no error (a
short fragment that awaits at top level, as in ``python -m asyncio``, is
checked as the body of an ``async def``). Both run mypy in a subprocess with
the project's configuration and cache, so after CI's own ``mypy`` run only
these files are checked.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
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
    path = CASES / "public_api.py"
    expected: dict[int, tuple[str, str]] = {}
    for n, text in enumerate(path.read_text().splitlines(), 1):
        m = _EXPECT.search(text)
        if m:
            expected[n] = ("note" if m[1] == "N" else "error", m[2])
    assert len(expected) >= 15
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


def _checkable(code: str) -> str:
    """``code``, or, if it awaits at top level, ``code`` as the body of an ``async def``."""
    try:
        compile(code, "<readme>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        if "outside" not in str(exc):  # 'await' / 'async for' / 'async with' outside (async) function
            raise
        return "async def _readme_example() -> None:\n" + textwrap.indent(code, "    ")
    return code


def readme_snippets() -> list[str]:
    """The README's python blocks that use runnerq_fast, in order."""
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    return [b for b in blocks if "runnerq_fast" in b]


def test_readme_examples_pass_mypy_strict(tmp_path: Path) -> None:
    snippets = readme_snippets()
    assert len(snippets) >= 5
    paths = []
    for i, code in enumerate(snippets):
        p = tmp_path / f"readme_{i:02d}.py"
        p.write_text(_checkable(code))
        paths.append(str(p))
    found = _mypy(*paths)
    errors = [f"{Path(f).name}:{line}: {text}" for f, line, kind, text in found if kind == "error"]
    listing = "\n".join(f"--- readme_{i:02d}.py\n{code}" for i, code in enumerate(snippets))
    assert not errors, "\n".join(errors) + "\n" + listing


def test_worker_settings_name_every_worker_config_field_with_its_type() -> None:
    """``WorkerSettings`` (the typed keyword arguments) and ``WorkerConfig`` (the defaults) never drift apart."""
    import typing

    import runnerq_fast as rq

    settings = typing.get_type_hints(rq.WorkerSettings)
    config = typing.get_type_hints(rq.WorkerConfig)
    assert list(settings) == list(rq.WorkerConfig.__struct_fields__)
    assert settings == {name: config[name] for name in settings}
