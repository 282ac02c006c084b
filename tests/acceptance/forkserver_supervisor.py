"""The supervisor with the ``forkserver`` start method (not a CLI option): ``python forkserver_supervisor.py URL``.

Run from this directory: it supervises one child serving ``supervised_app:engine`` on the store at URL and
prints the :class:`~runnerq_fast.supervisor.SupervisorResult` when it ends.
"""

from __future__ import annotations

import logging
import sys

from runnerq_fast.cli.running import WorkerArgs, run_supervised_child
from runnerq_fast.supervisor import Supervisor, SupervisorConfig

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s [%(process)d] %(name)s: %(message)s")
    args = WorkerArgs("supervised_app:engine", sys.argv[1], None, None, None, None, None, "info")
    print(Supervisor(run_supervised_child, args, SupervisorConfig(processes=1, start_method="forkserver")).run())
