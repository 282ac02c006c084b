"""The migration report: what ``Backend.migrate`` returns, and the warning about unknown versions."""

from __future__ import annotations

import logging

import pytest

import runnerq_fast as rq
from runnerq_fast.backends.sqlfiles import UNKNOWN_MIGRATIONS, Migration, migration_report

LOG = logging.getLogger("tests.migration_report")
SHIPPED = [Migration(v, f"m{v}", "SELECT 1;") for v in (1, 2, 4, 5)]  # 0003 is a reserved gap


def test_no_warning_when_every_recorded_version_is_shipped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, LOG.name):
        report = migration_report(LOG, "store s", SHIPPED, {1, 2}, [4, 5])
    assert report == rq.MigrationReport(applied=(4, 5), latest=5, unknown=())
    assert report.warning is None
    assert caplog.records == []


def test_versions_a_newer_release_recorded_are_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, LOG.name):
        report = migration_report(LOG, "store s", SHIPPED, [1, 2, 3, 4, 5, 7, 6], [])
    # 0003 is below the latest shipped version but this release has no file for it: a newer one wrote it too
    assert report == rq.MigrationReport(applied=(), latest=5, unknown=(3, 6, 7))
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert getattr(record, UNKNOWN_MIGRATIONS) == (3, 6, 7)
    message = record.getMessage()
    assert message == f"store s: {report.warning}"
    for fact in ("0003, 0006, 0007", "up to 0005", "newer runnerq-fast", "may not read or write it correctly",
                 "upgrade runnerq-fast", "roll back only to releases that know"):
        assert fact in message, fact


def test_warning_wording() -> None:
    assert rq.MigrationReport(unknown=(12,), latest=11).warning == (
        "the store holds migration 0012, unknown to this runnerq-fast release (it knows migrations up to 0011): "
        "a newer runnerq-fast migrated it, and this release may not read or write it correctly; upgrade "
        "runnerq-fast, or roll back only to releases that know 0012"
    )
    assert "it knows no migration" in (rq.MigrationReport(unknown=(1,)).warning or "")


async def test_a_schemaless_backend_reports_nothing_applied() -> None:
    backend = rq.MemoryBackend()
    try:
        assert await backend.migrate() == rq.MigrationReport()
    finally:
        await backend.close()
