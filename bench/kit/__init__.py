"""What the benchmark scenarios share, so that a figure is measured and printed the same way
whichever script prints it. The server processes the tests also use come from
`replicaset.testing.processes`; what only benchmarks need is here.

- `report`: progress on stderr, number formats, percentiles, the run's facts and report lines.
- `procfs`: CPU time and memory of a process, read from /proc; CPU over a load's window.
- `procs`: processes the bench starts (our server, Tarantool, helpers), their logs, stop by pid.
- `tarantool`: finding Tarantool 2.6 and starting an instance from an init script.
- `client`: the PyPI `tarantool` connector and the write load of 1 or 16 connections (any
  operation on any client; stalls).
- `limits`: what the machine allows at best: fsyncs/s, loopback round trips/s.
- `sets`: a three-member set of ours (ONE or QUORUM) and a three-instance Tarantool mesh
  (asynchronous or synchronous), their vclocks, the rows the members disagree on.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout the bench measures
