"""What tests, the simulator, benchmarks and tools hold the server against (trio keeps its
test kit in `trio.testing`; this is ours). Nothing here is used by the server itself.

- `replicaset.testing.lww`: an independent reference model of last-writer-wins (docs/design/README.md §4.2),
  computed from captured WAL rows without the engine's apply code.
- `replicaset.testing.processes`: real server processes on 127.0.0.1, started and stopped.
- `replicaset.testing.chaos`: the fault harness (proxies, faults, workloads, checks).
"""
