"""Run a load test: the same as ``runnerq-fast loadtest`` (same options), e.g. 30 s on the embedded SQLite file::

    .venv/bin/python loadtest/run.py --duration 30
    .venv/bin/python loadtest/run.py --backend postgresql://postgres@127.0.0.1/app --rate 0 --workers 2

See ``--help``, and README's "Load testing" section for what it measures and writes.
"""

from runnerq_fast.cli.loadtest import loadtest

if __name__ == "__main__":
    loadtest(prog_name="loadtest/run.py")
