"""The documentation: README.md and the docs site under docs/ (mkdocs.yml).

* the site builds with ``mkdocs build --strict`` (no broken link or anchor, every page in the nav, the
  CLI reference generated from click, the HTTP API from the app's OpenAPI document, the Python API from
  the docstrings);
* the README stays a README (at most 200 lines) and keeps the two set-up commands CI relies on;
* every ```` ```python ```` block of README.md and docs/**/*.md passes ``mypy --strict`` (a fragment that
  awaits at top level, as in ``python -m asyncio``, is checked as the body of an ``async def``);
* every ``runnerq-fast`` command of a ```` ```bash ```` block parses with the real click commands (a
  misspelt command or option, or a value click refuses, fails), and every ``benchmarks/``, ``scripts/``
  or ``loadtest/`` file a page names exists.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest

from runnerq_fast.cli import cli
from tests.typing.test_typing import _mypy

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
SOURCES = [REPO / "README.md", *PAGES]


def _blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def _checkable(code: str) -> str:
    """``code``, or, if it awaits at top level, ``code`` as the body of an ``async def``."""
    try:
        compile(code, "<docs>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        if "outside" not in str(exc):  # 'await' / 'async for' / 'async with' outside (async) function
            raise
        return "async def _docs_example() -> None:\n" + textwrap.indent(code, "    ")
    return code


def python_examples() -> list[tuple[str, str]]:
    """(where, code) of every python block of the README and the docs, in order."""
    return [(f"{path.relative_to(REPO)}#{i}", code)
            for path in SOURCES for i, code in enumerate(_blocks(path, "python"))]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(REPO / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = tmp_path / "site"
    cli_page = (site / "reference" / "cli" / "index.html").read_text()
    for name in cli.commands:  # the CLI reference is generated from the click group: every command is there
        assert f"runnerq-fast {name}" in cli_page, name
    api_page = (site / "reference" / "http-api" / "index.html").read_text()
    assert "/api/v1/queues/{queue}/activities" in api_page and "EnqueueRequest" in api_page
    assert (site / "reference" / "openapi.json").read_text().startswith("{")
    assert "lease_timeout" in (site / "reference" / "configuration" / "index.html").read_text()
    for png in ("console-dashboard.png", "console-activity.png", "console-activities.png", "peers.png"):
        assert (site / png).stat().st_size > 1000, png


def test_the_readme_is_short_and_keeps_its_set_up_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    bash = _blocks(REPO / "README.md", "bash")
    # the demo on the embedded SQLite file, and the test command .ci/run runs
    assert "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/runnerq-fast demo\n" in bash
    assert "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest\n" in bash
    assert ".venv/bin/python -m pytest\n" in (REPO / ".ci" / "run").read_text()
    # every page the README links to exists
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / link).is_file(), link


def test_every_python_example_passes_mypy_strict(tmp_path: Path) -> None:
    examples = python_examples()
    assert len(examples) >= 30
    paths = []
    for i, (_, code) in enumerate(examples):
        p = tmp_path / f"example_{i:03d}.py"
        p.write_text(_checkable(code))
        paths.append(str(p))
    found = _mypy(*paths)
    errors = [f"{examples[int(Path(f).stem[8:])][0]}:{line}: {text}" for f, line, kind, text in found
              if kind == "error"]
    assert not errors, "\n".join(errors)


def _commands(block: str) -> list[list[str]]:
    """The ``runnerq-fast`` invocations of a bash block, as argv lists after the program name."""
    joined = block.replace("\\\n", " ")
    found = []
    for line in joined.splitlines():
        if "runnerq-fast" not in line:
            continue
        lexer = shlex.shlex(re.sub(r"\$\{?\w+\}?", "1", line), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True  # a shell variable: 1 (any option takes it); '#' starts a comment
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token in ("&&", "||", "|", ";", "&"):
                while words and (re.fullmatch(r"\w+=.*", words[0]) or words[0] in ("do", "then", "else")):
                    words = words[1:]  # VAR=value, or a shell keyword, before the command
                if words and Path(words[0]).name == "runnerq-fast":
                    found.append(words[1:])
                words = []
            else:
                words.append(token)
    return found


def shown_commands() -> list[tuple[str, list[str]]]:
    return [(f"{path.relative_to(REPO)}: runnerq-fast {shlex.join(argv)}", argv)
            for path in SOURCES for block in _blocks(path, "bash") for argv in _commands(block)]


@pytest.mark.parametrize(("where", "argv"), shown_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_command_shown_parses(where: str, argv: list[str]) -> None:
    assert argv, where
    name, *rest = argv
    command = cli.commands.get(name)
    assert command is not None, f"{where}: no command {name!r}"
    with click.Context(cli, info_name="runnerq-fast") as parent:
        try:
            command.make_context(name, list(rest), parent=parent)
        except click.UsageError as exc:  # BadParameter, NoSuchOption, MissingParameter
            pytest.fail(f"{where}: {exc.format_message()}")


def test_the_pages_show_commands_and_the_files_they_name_exist() -> None:
    assert len(shown_commands()) >= 15
    missing = []
    for path in SOURCES:
        for name in set(re.findall(r"(?<![\w/])((?:benchmarks|scripts|loadtest|examples)/[\w/.-]+\.(?:py|toml|md))",
                                   path.read_text())):
            if not (REPO / name).exists():
                missing.append(f"{path.relative_to(REPO)}: {name}")
    assert not missing, missing
