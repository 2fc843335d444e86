"""`[debug] trace_file`: a server's member driver traces what it does, under the names of
the spec's actions, as the simulator's drivers do."""

from __future__ import annotations

import json
from pathlib import Path

TRACE = "trace.jsonl"


def trace_of(data_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (data_dir / TRACE).read_text().splitlines()]


def test_two_members_trace_their_writes_flushes_syncs_and_the_rows_they_take(replicaset_factory):
    rs = replicaset_factory(f'debug.trace_file = "{TRACE}"\n')
    first = rs.bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    second = rs.join(first)
    rs.wait_converged()
    for server, keys in ((first, range(1, 4)), (second, range(10, 12))):
        with server.client() as client:
            for k in keys:
                client.execute("INSERT INTO kv(k, v) VALUES (?, ?)", [k, f"v{k}"])
    vclock = rs.wait_converged()
    for server in (first, second):
        assert server.stop() == 0

    lines = {1: trace_of(first.data_dir), 2: trace_of(second.data_dir)}
    for member, trace in lines.items():
        assert {line["member"] for line in trace} == {member}, "each server traces its own member"
        clocks = [line["clock_ns"] for line in trace]
        assert clocks == sorted(clocks), "one clock for every process on the host, in the order traced"
        written = [line["lsn"] for line in trace if line["event"] == "LocalWrite"]
        assert written == sorted(set(written)) and written[-1] == vclock[member], f"member {member}: {written}"
        assert any(line["event"] == "WalFlush" and line["vclock"][str(member)] == vclock[member] for line in trace)
        assert any(line["event"] == "WalSync" for line in trace), "own rows are relayed once synced"
        peer = 3 - member
        taken = [line["lsn"] for line in trace if line["event"] == "ApplierReceive" and line["origin"] == peer]
        sent = [line["lsn"] for line in trace if line["event"] == "RelaySend" and line["origin"] == peer]
        assert taken == sent and taken == sorted(set(taken)) and taken[-1] == vclock[peer], f"member {member}: {taken}"
    kv_writes = [line for line in lines[2] if line["event"] == "ApplierReceive" and line["origin"] == 1]
    assert [op[0] for line in kv_writes[-3:] for op in line["ops"]] == ["kv:1", "kv:2", "kv:3"]
