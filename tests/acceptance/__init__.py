"""Acceptance tests: the ``runnerq-fast`` CLI and the examples, run as real subprocesses."""
