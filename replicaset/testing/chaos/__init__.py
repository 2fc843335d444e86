"""A Jepsen-style fault harness over real members (issue 14, `tools/chaos.py`, `make chaos`).

- `proxy`: one fault-injecting proxy per ordered pair of members, TCP and UDP on one port.
- `cluster`: the members on 127.0.0.1, each dialing its peers through the proxies.
- `schedule`: the seeded fault schedule (a pure function of the seed) and the nemesis.
- `faults`: faults on one member: clock skew, a torn WAL tail, a full disk, DDL under load.
- `workloads`: bank, append-only set and last-writer-wins registers, every request recorded.
- `history`: the history of requests and outcomes, and the checks over it.
- `report`: the JSON report, the verdict line, the Spark audit of the WALs.
- `run`: one run from start to verdict.
"""
