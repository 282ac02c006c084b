"""Loading the PostgreSQL backend's SQL files.

The parser lives in :mod:`runnerq_fast.backends.sqlfiles` (shared with the
SQLite backend); this module binds it to this package's ``queries.sql`` and
``migrations/``. Migrations run as one simple-protocol batch inside a
transaction.
"""

from __future__ import annotations

from runnerq_fast.backends import sqlfiles
from runnerq_fast.backends.sqlfiles import Migration, parse_queries

__all__ = ["Migration", "load_migrations", "load_queries", "parse_queries"]

_PACKAGE = __name__.rpartition(".")[0]


def load_queries(resource: str = "queries.sql") -> dict[str, str]:
    """Read and parse a queries file of :mod:`runnerq_fast.backends.postgres`.

    Parameters
    ----------
    resource : str
        File name inside the package. Default ``"queries.sql"``.

    Returns
    -------
    dict of str to str
        See :func:`~runnerq_fast.backends.sqlfiles.parse_queries`.
    """
    return sqlfiles.load_queries(_PACKAGE, resource)


def load_migrations() -> list[Migration]:
    """The PostgreSQL migrations, ordered by version.

    Raises
    ------
    ValueError
        If two files share a version or there is no 0001 (see
        :func:`runnerq_fast.backends.sqlfiles.load_migrations`).
    """
    return sqlfiles.load_migrations(_PACKAGE)
