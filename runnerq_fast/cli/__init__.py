"""The ``runnerq-fast`` command line: the click group and the commands it gathers.

Every command that touches a backend takes ``--backend URL`` or reads the
``RUNNERQ_BACKEND`` environment variable (``memory://``,
``sqlite:///file.db``, ``postgresql://user@host:port/db``)::

    runnerq-fast migrate --backend postgresql://postgres@127.0.0.1/app
    runnerq-fast worker examples.shop.app:engine --concurrency 32
    runnerq-fast serve --backend sqlite:///app.db --port 8080
    runnerq-fast enqueue send_email --payload '{"to": "a@b.c"}' --priority high --wait 10
    runnerq-fast stats --queue default --json
    runnerq-fast queues
    runnerq-fast prune --queue default --older-than 24h --status completed
    runnerq-fast workers --queue default     # live engines (the worker registry)
    runnerq-fast inspect 3f2a...
    runnerq-fast retry --status dead_letter --type send_email
    runnerq-fast cancel 3f2a... 41bc...
    runnerq-fast schedules myapp.tasks:engine --next 5
    runnerq-fast bench --backend memory:// -n 100000 --output-json bench.json
    runnerq-fast demo                        # mixed workload on ./runnerq-demo.db (SQLite)
    runnerq-fast demo-shop --orders 5        # from the repository root

Exit codes: 0 success; 1 the operation failed (activity failed, timeout,
backend unreachable); 2 bad usage or input (nothing was stored).

One module per group of commands, sharing :mod:`runnerq_fast.cli._common`
(options, opening a backend, exit codes):

* :mod:`~runnerq_fast.cli.running`: ``worker``
* :mod:`~runnerq_fast.cli.serving`: ``serve`` (the HTTP service)
* :mod:`~runnerq_fast.cli.activities`: ``enqueue``, ``inspect``, and the actions ``cancel``,
  ``retry``, ``run-now``, ``set-priority``, ``delete``
* :mod:`~runnerq_fast.cli.store`: ``migrate``, ``stats``, ``queues``
* :mod:`~runnerq_fast.cli.retention`: ``prune``
* :mod:`~runnerq_fast.cli.workers`: ``workers``
* :mod:`~runnerq_fast.cli.schedules`: ``schedules``
* :mod:`~runnerq_fast.cli.tools`: ``bench``, ``demo``, ``demo-shop``
* :mod:`~runnerq_fast.cli.loadtest`: ``loadtest`` (the locust harness)

A new command is a ``@click.command()`` function in the module of its group,
added to :func:`cli` below.
"""

from __future__ import annotations

from typing import NoReturn

import click

import runnerq_fast as rq
from runnerq_fast.cli import activities, loadtest, retention, running, schedules, serving, store, tools, workers
from runnerq_fast.cli.running import load_engine

__all__ = ["cli", "load_engine", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(rq.__version__, prog_name="runnerq-fast")
def cli() -> None:
    """runnerq-fast: a durable background-activity queue.

    The backend comes from --backend URL or the RUNNERQ_BACKEND environment variable.
    """


for _command in (
    running.worker,
    serving.serve,
    activities.enqueue,
    activities.inspect,
    activities.cancel,
    activities.retry,
    activities.run_now,
    activities.set_priority,
    activities.delete,
    store.migrate,
    store.stats,
    store.queues,
    retention.prune,
    workers.workers,
    schedules.schedules,
    tools.bench,
    tools.demo,
    tools.demo_shop,
    loadtest.loadtest,
):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> NoReturn:
    """Console-script entry point (``runnerq-fast``)."""
    cli.main(args=argv, prog_name="runnerq-fast")
    raise SystemExit(0)  # pragma: no cover - cli.main always exits
