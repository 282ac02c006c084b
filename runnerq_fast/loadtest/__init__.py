"""The load-test harness's library: what ``runnerq-fast loadtest`` and ``loadtest/`` share.

The user-facing folder is ``loadtest/`` at the repository root (the
locustfile and ``run.py``); this package holds the parts the CLI imports and
the unit tests cover, none of which imports locust or gevent (locust runs in
subprocesses of its own):

* :mod:`~runnerq_fast.loadtest.histogram`: a latency histogram with
  microsecond resolution and percentiles;
* :mod:`~runnerq_fast.loadtest.mix`: the mix of activity types, payload sizes,
  priorities, delays and idempotency keys the load generators send, and the
  step / spike load shapes as plain functions of time;
* :mod:`~runnerq_fast.loadtest.records`: the files the processes of a run
  write (accepted ids from the load generators, one line per handler run
  from the workers) and how they are read back;
* :mod:`~runnerq_fast.loadtest.app`: the load app the workers run;
* :mod:`~runnerq_fast.loadtest.agent`: the process that enqueues through the
  Python API on behalf of locust's API users;
* :mod:`~runnerq_fast.loadtest.summary`: lost / duplicate counting, latency
  percentiles, time series and the pass/fail thresholds;
* :mod:`~runnerq_fast.loadtest.verdict`: PASSED / FAILED / INCONCLUSIVE in one
  line, and the exit code (a run locust could not drive at the rate asked);
* :mod:`~runnerq_fast.loadtest.capacity`: ``--capacity``, the step load judged
  step by step, and the highest rate sustained;
* :mod:`~runnerq_fast.loadtest.report`: the summary JSON, the PNG chart and the
  terminal table;
* :mod:`~runnerq_fast.loadtest.runner`: starts ``serve``, the workers and
  locust, samples the backlog and CPU, waits for the drain.
"""
