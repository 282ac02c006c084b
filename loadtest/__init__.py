"""The load-test harness's user-facing folder: ``locustfile.py`` (the users) and ``run.py`` (``runnerq-fast loadtest``).

The library behind them is :mod:`runnerq_fast.loadtest`.
"""
