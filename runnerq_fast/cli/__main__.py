"""``python -m runnerq_fast.cli``: the same as the ``runnerq-fast`` command."""

from runnerq_fast.cli import main

main()
