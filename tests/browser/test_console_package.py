"""The console ships in the package: a build from a clean copy of the tree holds its static files, and so
does the sdist (pyproject's package-data and MANIFEST.in; an in-tree egg-info would hide a missing entry)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from runnerq_fast.web.console import STATIC_DIR
from tests.acceptance.helpers import REPO, subprocess_env

SHIPPED = sorted(p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*") if p.is_file())


def _clean_copy(dest: Path) -> Path:
    """The files a build reads, without build products (egg-info, .so, generated C)."""
    skip = shutil.ignore_patterns("*.so", "*.c", "__pycache__", "*.egg-info")
    for folder in ("runnerq_fast", "src_pyx"):
        shutil.copytree(REPO / folder, dest / folder, ignore=skip)
    for name in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    return dest


def _setup(tree: Path, *args: str) -> None:
    # RUNNERQ_NO_EXTENSIONS: nothing to compile for what is checked here
    subprocess.run([sys.executable, "setup.py", "-q", *args], cwd=tree, check=True, capture_output=True,
                   timeout=120, env=subprocess_env(RUNNERQ_NO_EXTENSIONS="1"))


def test_a_built_package_and_the_sdist_hold_every_console_file(tmp_path: Path) -> None:
    assert {"index.html", "console.css", "js/main.js", "js/live-worker.js"} <= set(SHIPPED)
    tree = _clean_copy(tmp_path / "tree")
    # build_py is what a wheel (pip install without -e) copies: the modules and their package data
    _setup(tree, "build_py", "-d", str(tmp_path / "build"))
    built = tmp_path / "build" / "runnerq_fast" / "web" / "console" / "static"
    assert built.is_dir(), "the build has no console files"
    assert sorted(p.relative_to(built).as_posix() for p in built.rglob("*") if p.is_file()) == SHIPPED
    _setup(_clean_copy(tmp_path / "tree2"), "sdist", "-d", str(tmp_path / "dist"))
    [archive] = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {f"runnerq_fast/web/console/static/{f}" for f in SHIPPED} <= names
