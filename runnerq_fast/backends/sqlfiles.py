"""Loading SQL from a backend package's ``.sql`` files (shared by the SQL backends).

A queries file is a header comment followed by named blocks::

    -- name: claim
    -- optional comment lines documenting the block
    WITH picked AS (...) SELECT ...;

The parser keeps each block's statement text (documentation comments before
the statement are dropped, the trailing ``;`` is kept) so asyncpg prepares it
verbatim. Nothing here builds SQL from Python values. Each SQL backend keeps
its ``queries.sql`` and ``migrations/NNNN_name.sql`` in its own package and
passes that package's name to :func:`load_queries` and :func:`load_migrations`;
both report a migration run through :func:`migration_report`, which warns
about versions a newer release recorded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from importlib import resources

from runnerq_fast.models import MigrationReport

__all__ = [
    "UNKNOWN_MIGRATIONS",
    "Migration",
    "load_migrations",
    "load_queries",
    "migration_report",
    "parse_queries",
]

UNKNOWN_MIGRATIONS = "runnerq_unknown_migrations"
"""Attribute of the log record :func:`migration_report` warns with (the unknown versions, a tuple of int).

``runnerq-fast migrate`` prints the same facts itself and filters that record out.
"""

_NAME = re.compile(r"^--\s*name:\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*$")
_MIGRATION_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")


def parse_queries(text: str) -> dict[str, str]:
    """Split a queries file into its named statements.

    Parameters
    ----------
    text : str
        The file's content: a header of comment lines (required, at least
        one), then blocks each opened by a ``-- name: <identifier>`` line.

    Returns
    -------
    dict of str to str
        Statement text by name, in file order.

    Raises
    ------
    ValueError
        If the header is missing, SQL appears before the first name, a name
        repeats, or a block holds no statement.
    """
    queries: dict[str, str] = {}
    name: str | None = None
    body: list[str] = []
    saw_header = False

    def finish() -> None:
        if name is None:
            return
        statement = "\n".join(body).strip()
        if not statement:
            raise ValueError(f"SQL block {name!r} holds no statement")
        queries[name] = statement

    for lineno, line in enumerate(text.splitlines(), 1):
        match = _NAME.match(line.strip())
        if match is not None:
            finish()
            name = match["name"]
            if name in queries:
                raise ValueError(f"SQL block {name!r} is defined twice (line {lineno})")
            body = []
            continue
        stripped = line.strip()
        if name is None:
            if stripped.startswith("--"):
                saw_header = True
            elif stripped:
                raise ValueError(f"SQL outside a named block at line {lineno}: {stripped[:40]!r}")
            continue
        if not body and (not stripped or stripped.startswith("--")):
            continue  # the block's documentation comment
        body.append(line.rstrip())
    finish()
    if not saw_header:
        raise ValueError("SQL file has no header comment")
    return queries


def load_queries(package: str, resource: str = "queries.sql") -> dict[str, str]:
    """Read and parse a queries file shipped in ``package``.

    Parameters
    ----------
    package : str
        Dotted name of the package holding the file, e.g.
        ``"runnerq_fast.backends.sqlite"``.
    resource : str
        File name inside ``package``. Default ``"queries.sql"``.

    Returns
    -------
    dict of str to str
        See :func:`parse_queries`.
    """
    return parse_queries(resources.files(package).joinpath(resource).read_text(encoding="utf-8"))


class Migration:
    """One numbered schema migration.

    Attributes
    ----------
    version : int
        The file's 4-digit number; applied in increasing order.
    name : str
        The rest of the file name, without ``.sql``.
    sql : str
        The script, run inside one transaction (how is up to the backend).
    """

    __slots__ = ("name", "sql", "version")

    def __init__(self, version: int, name: str, sql: str) -> None:
        self.version = version
        self.name = name
        self.sql = sql

    def __repr__(self) -> str:
        return f"Migration({self.version:04d}, {self.name!r})"


def load_migrations(package: str) -> list[Migration]:
    """The migrations in ``package``'s ``migrations/`` folder, ordered by version.

    Parameters
    ----------
    package : str
        Dotted name of the backend package.

    Raises
    ------
    ValueError
        If two files share a version, or there is no 0001. A gap is allowed:
        numbers are reserved per feature, so a later one may be present
        before an earlier one is written; each applies once, in order, and
        one added later below an applied one is still applied.
    """
    found: dict[int, Migration] = {}
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match is None:
            continue
        version = int(match["version"])
        if version in found:
            raise ValueError(f"two migrations share version {version:04d}")
        found[version] = Migration(version, match["name"], entry.read_text(encoding="utf-8"))
    versions = sorted(found)
    if versions and versions[0] != 1:
        raise ValueError(f"migration versions must start at 0001, got {versions}")
    return [found[v] for v in versions]


def migration_report(
    log: logging.Logger,
    store: str,
    migrations: Sequence[Migration],
    recorded: Iterable[int],
    applied: Sequence[int],
) -> MigrationReport:
    """Report one migration run, warning once about versions this release does not ship.

    A store migrated by a newer runnerq-fast records versions this release
    has no file for. It is opened and used all the same (refusing would
    make rolling an application back after an upgrade impossible), but the
    warning says it may not be read or written correctly.

    Parameters
    ----------
    log : logging.Logger
        The backend's logger; it gets the warning (with the unknown versions
        in the record's :data:`UNKNOWN_MIGRATIONS` attribute).
    store : str
        Names the store in the warning, e.g. ``"SQLite database '/srv/q.db'"``
        (no password: it is logged).
    migrations : sequence of Migration
        The migrations this release ships (:func:`load_migrations`).
    recorded : iterable of int
        The versions the store's migrations table held before this run.
    applied : sequence of int
        The versions this run applied, in order.

    Returns
    -------
    MigrationReport
    """
    shipped = {m.version for m in migrations}
    report = MigrationReport(
        applied=tuple(applied),
        latest=max(shipped, default=None),
        unknown=tuple(sorted(set(recorded) - shipped)),
    )
    if report.warning is not None:
        log.warning("%s: %s", store, report.warning, extra={UNKNOWN_MIGRATIONS: report.unknown})
    return report
