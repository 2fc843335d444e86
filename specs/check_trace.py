#!/usr/bin/env python3
"""Check a trace of the member driver against `VClockReplication` (the replication cores),
`QuorumCommit` (the quorum transaction cores) or `Swim` (the SWIM core) with TLC.

    python specs/check_trace.py [--spec VClockReplication|QuorumCommit|Swim] TRACE.jsonl [...]
    python specs/check_trace.py --simulate SEED [--wal-mode write|fsync] [--quorum N]
                                [--faults none|links|all] [--writes N] [--save TRACE.jsonl]
                                [--spec Swim [--pause AT:MEMBER:SECONDS ...]]

A trace is what `replicaset.sim.Simulation(trace=...)` logs, one JSON object a line: an
`Init` line with the members and the `wal_mode`, then one line per step, named after the
spec's action that it is (`LocalWrite`, `WalFlush`, `WalSync`, `RelaySend`, `ApplierReceive`,
`RecoveryAnswer`, `RecoveryGiveUp`, `RecoveryFinish`, `Crash`, `Restart`), then an `End` line
with the number of steps the simulator logged. `RecoveryAnswer` and `RecoveryGiveUp` name
the `peer` that answered member `member`'s recovery fetch, or that `member` stopped waiting
for (its link failed before it answered; once per peer and recovery); like every line, they
may carry the simulated time `t`, which the check ignores. The script writes the trace as a
TLA+ module holding it as a sequence literal, beside `VClockReplicationTrace.tla` (which
says what matching a line means), and runs TLC: the trace is accepted when a behaviour of
the spec takes every line, with the spec's invariants holding throughout. Otherwise it
names the first line no behaviour could take. A trace without steps, without its `End`
line, or with fewer or more steps than its `End` line says is rejected without running TLC:
an empty or cut trace proves nothing.

Values: a change is `[key, value]`, the value an id of the image the row wrote (null for a
delete); `LocalWrite` and `ApplierReceive` carry the changes of their row, `LocalWrite` the
HLC stamp it took, and `WalFlush` and `Restart` the member's table, `{key: [value, stamp,
origin]}` for every key with a version. Stamps become their rank among the trace's stamps
(LWW uses their order only, and TLC's integers are 32-bit). The key `"schema"` is the one a
DDL row changes; no table lists it.

`QuorumCommit` (`--spec QuorumCommit`, and the default with `--quorum N`) checks the lines
of that spec in the same trace, beside `QuorumCommitTrace.tla`: `Begin` (the coordinator
`member`, the `txn` id, the version `reads` of its one key), `Prepare`, `DecideCommit` (the
row's `lsn` and stamp `hlc`), `DecideAbort`, `QueryDecision` (the asking `member`),
`ParticipantAbort`, `ApplierReceive`, `Crash` and `Restart`; a `LocalWrite` is the spec's
`WriteOne` (its one key, LSN and stamp), and the replication-only lines (`WalFlush`,
`WalSync`, `RelaySend`, the recovery lines) are left out. Txn ids become names `t1`,
`t2`, ... in order of appearance; the spec's transactions and ONE rows write one key each.

`Swim` (`--spec Swim`) checks the SWIM lines, beside `SwimTrace.tla` (which says what
matching means), one line per datagram: `TickPing`, `PingReceived` and the simulator's
`Lose` become one line per update the message carried (`[member, state, incarnation]`),
each `PingReceived` followed by `LoseAck` (the spec's own answer to a datagram, dropped:
the implementation's acks are messages of their own); `TickProbeFailed` and `TickDead`
name the `peer` and the incarnation; a `Crash` is the spec's `Pause` (a member stopped
until its `Restart`); a line that carries the member's `view` (`{member: [state,
incarnation]}`) is followed by a `View` line comparing it with the spec's. Every line
keeps `line`, the number of the trace line it came from.

`--simulate` runs the deterministic simulator with that seed and checks its trace (the
`replicaset` package must be importable: use the project's `.venv/bin/python`); with
`--quorum N` the run adds N single-key QUORUM transactions (`replicaset.sim.KvQuorum`) and
crashes only processes; with `--spec Swim` the members run SWIM (`replicaset.sim.SwimConfig`,
losing 5% of the datagrams until the heal) and `--pause` stops a member for a while.
Exit code: 0 accepted, 1 rejected, 2 when TLC cannot run or the trace cannot be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPECS_DIR = Path(__file__).resolve().parent
if str(SPECS_DIR) not in sys.path:
    sys.path.insert(0, str(SPECS_DIR))

import run_tlc  # noqa: E402  (a sibling script, not a package)

VCLOCK = "VClockReplication"
QUORUM = "QuorumCommit"
SWIM = "Swim"
SWIM_INVARIANTS = ("TypeOK", "OwnViewAlive", "OnlySelfRaises", "NoStaleRevival", "RemovedByOperator")
SWIM_PROPERTIES = ("IncarnationsGrow", "RemovedFinal")
SPEC_MODULES = ("VClockReplication", "VClockReplicationTrace")
QUORUM_INVARIANTS = ("TypeOK", "NoLostUpdate", "QuorumOnTotal", "NoSplitDecision", "LsnOrderIsHlcOrder",
                     "AbortsTakeNoLsn")
INVARIANTS = (
    "NoDoubleApply", "PerOriginOrder", "Agreement", "EqualVClocksEqualTables",
    "TableIsWalReplay", "NoAckedWriteLost", "VersionsBelowClock", "HlcFollowsLsn",
)
TIMEOUT_S = 300
_MATCHED = re.compile(r'^<<"matched", (\d+)>>$', re.M)


class TraceError(ValueError):
    """The trace file is not a trace the simulator writes."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    accepted: bool
    lines: int
    matched: int
    """How many lines the furthest behaviour took."""
    reason: str
    seconds: float
    output: str

    def line(self) -> str:
        if self.accepted:
            return f"ACCEPTED  {self.lines} lines  {self.seconds:.1f} s"
        return f"REJECTED  {self.reason}  ({self.seconds:.1f} s)"


def read_trace(path: Path) -> list[dict[str, Any]]:
    try:
        events = [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: {exc}") from exc
    return events


def tla_value(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        if value < 0:
            raise TraceError(f"negative number {value} in a trace")
        return str(value)
    if isinstance(value, str):
        if '"' in value or "\\" in value:
            raise TraceError(f"string {value!r} cannot be a TLA+ string literal")
        return f'"{value}"'
    raise TraceError(f"no TLA+ form for {value!r}")


def _record(fields: dict[str, str]) -> str:
    return "[" + ", ".join(f"{name} |-> {text}" for name, text in fields.items()) + "]"


def _clock(clock: dict[Any, int], members: Sequence[int]) -> str:
    """A vclock as a function on every member (JSON makes its keys strings)."""
    lsns = {int(origin): int(lsn) for origin, lsn in clock.items()}
    return "(" + " @@ ".join(f"{m} :> {tla_value(lsns.get(m, 0))}" for m in members) + ")"


SCHEMA_KEY = "schema"
TABLED_EVENTS = ("WalFlush", "Restart")


def _value(value: Any) -> str:
    """A value id as a TLA+ string; null is a delete, which writes the tombstone."""
    if value is None:
        return "DELETE"
    if not isinstance(value, str):
        raise TraceError(f"{value!r} is not a value id")
    return tla_value(value)


def _ops(ops: list[list[Any]]) -> str:
    """`[key, value]` pairs as the spec's ops."""
    return "{" + ", ".join(_record({"key": tla_value(key), "val": _value(value)}) for key, value in ops) + "}"


def _table(table: dict[str, list[Any]], keys: Sequence[str], ranks: dict[int, int]) -> str:
    """A member's table as a function on every key; a key it does not list has no version."""
    unknown = set(table) - set(keys)
    if unknown:
        raise TraceError(f"a table lists keys no row wrote: {sorted(unknown)}")
    entries = []
    for key in keys:
        if key in table:
            value, stamp, origin = table[key]
            entry = {"val": _value(value), "hlc": tla_value(ranks[int(stamp)]), "origin": tla_value(int(origin))}
        else:
            entry = {"val": '"none"', "hlc": "0", "origin": "0"}
        entries.append(f"{tla_value(key)} :> {_record(entry)}")
    return "(" + " @@ ".join(entries) + ")" if entries else "<<>>"


def _line(event: dict[str, Any], members: Sequence[int], keys: Sequence[str], ranks: dict[int, int]) -> str:
    fields = {"event": tla_value(event["event"])}
    for name in ("member", "peer", "origin", "lsn"):
        if name in event:
            fields[name] = tla_value(int(event[name]))
    if event["event"] == "LocalWrite":
        fields["hlc"] = tla_value(ranks[int(event["hlc"])])
    if "vclock" in event:
        fields["vclock"] = _clock(event["vclock"], members)
    if "ops" in event:
        fields["ops"] = _ops(event["ops"])
    if event["event"] in TABLED_EVENTS:
        fields["table"] = _table(event["table"], keys, ranks)
    return _record(fields)


def steps_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step lines: between the Init line and the End line (when there is one)."""
    if not events or events[0].get("event") != "Init":
        raise TraceError("a trace starts with its Init line")
    return events[1:-1] if events[-1].get("event") == "End" else events[1:]


def incomplete(events: list[dict[str, Any]]) -> str | None:
    """Why a trace cannot count as a whole run (None when it can): any spec accepts a
    trace of no step, and a trace cut short hides what came after the cut."""
    steps = steps_of(events)
    if events[-1].get("event") != "End":
        return "the trace has no End line: it was cut short"
    if not steps:
        return "the trace holds no step"
    reported = events[-1].get("steps")
    if reported != len(steps):
        return f"the trace holds {len(steps)} steps, its End line says {reported}"
    return None


def to_module(events: list[dict[str, Any]], name: str) -> tuple[str, str]:
    """The TLA+ module holding the trace, and its TLC configuration."""
    init, steps = events[0] if events else {}, steps_of(events)
    try:
        members = sorted(int(m) for m in init["members"])
        wal_mode = init["wal_mode"]
        keys = sorted({key for e in steps for key, _ in e.get("ops", [])})
        values = sorted({value for e in steps for _, value in e.get("ops", []) if value is not None})
        stamps = {int(e["hlc"]) for e in steps if e["event"] == "LocalWrite"}
        stamps |= {int(entry[1]) for e in steps if e["event"] in TABLED_EVENTS for entry in e["table"].values()}
        ranks = {stamp: rank for rank, stamp in enumerate(sorted(stamps), start=1)}
        tabled = [k for k in keys if k != SCHEMA_KEY]
        body = ",\n    ".join(_line(e, members, tabled, ranks) for e in steps)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TraceError(f"malformed trace line: {exc!r}") from exc
    writes = sum(e["event"] == "LocalWrite" for e in steps)
    crashes = sum(e["event"] == "Crash" for e in steps)
    member_set = "{" + ", ".join(map(str, members)) + "}"
    module = f"""---- MODULE {name} ----
EXTENDS VClockReplicationTrace

TraceMembers == {member_set}
TraceKeys == {{{", ".join(map(tla_value, keys))}}}
TraceValues == {{{", ".join(map(tla_value, values or ["v"]))}}}
TraceWalMode == {tla_value(wal_mode)}
TraceWrites == {writes}
TraceCrashes == {crashes}
Log == <<
    {body}
>>
====
"""
    cfg = f"""CONSTANTS
    Members <- TraceMembers
    Writers <- TraceMembers
    Crashable <- TraceMembers
    Keys <- TraceKeys
    Values <- TraceValues
    WalMode <- TraceWalMode
    MaxWrites <- TraceWrites
    MaxCrashes <- TraceCrashes
    TraceLog <- Log
    Symmetry <- TraceSymmetry
    Fenced <- TraceNoFence
    ApplyQueued = TRUE
    ShipDurableOnly = TRUE
INIT TraceInit
NEXT TraceNext
INVARIANTS
    {chr(10).join("    " + i for i in INVARIANTS).strip()}
"""
    return module, cfg


QUORUM_EVENTS = ("Begin", "Prepare", "DecideCommit", "DecideAbort", "QueryDecision", "ParticipantAbort",
                 "ApplierReceive", "Crash", "Restart")


def quorum_steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of `QuorumCommit` in a trace, a LocalWrite becoming the WriteOne it is."""
    steps = []
    for event in steps_of(events):
        if event["event"] == "LocalWrite":
            if len(event["ops"]) != 1:
                raise TraceError(f"a ONE row of QuorumCommit writes one key: {event}")
            steps.append({"event": "WriteOne", "member": event["member"], "key": event["ops"][0][0],
                          "lsn": event["lsn"], "hlc": event["hlc"]})
        elif event["event"] in QUORUM_EVENTS:
            steps.append(event)
    return steps


def quorum_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace as QuorumCommit sees it: its Init line, its steps, an End line counting them."""
    steps = quorum_steps(events)
    return [events[0], *steps, {"event": "End", "steps": len(steps)}]


def _read_version(event: dict[str, Any]) -> tuple[str, int, int]:
    reads = event["reads"]
    if len(reads) != 1:
        raise TraceError(f"a transaction of QuorumCommit writes one key: {event}")
    (key, (stamp, origin)), = reads.items()
    return key, int(stamp), int(origin)


def to_quorum_module(events: list[dict[str, Any]], name: str) -> tuple[str, str]:
    """The TLA+ module holding a trace's QuorumCommit lines, and its TLC configuration."""
    steps = steps_of(events)
    try:
        members = sorted(int(m) for m in events[0]["members"])
        txns: dict[int, str] = {}
        for e in steps:
            if "txn" in e:
                txns.setdefault(int(e["txn"]), f"t{len(txns) + 1}")
        stamps = {int(e["hlc"]) for e in steps if e["event"] in ("WriteOne", "DecideCommit")}
        stamps |= {_read_version(e)[1] for e in steps if e["event"] == "Begin"}
        ranks = {stamp: rank for rank, stamp in enumerate(sorted(stamps - {0}), start=1)} | {0: 0}
        keys = sorted({e["key"] for e in steps if e["event"] == "WriteOne"}
                      | {_read_version(e)[0] for e in steps if e["event"] == "Begin"})
        lines = []
        for e in steps:
            fields = {"event": tla_value(e["event"])}
            for field in ("member", "origin", "lsn"):
                if field in e:
                    fields[field] = tla_value(int(e[field]))
            if "txn" in e:
                fields["txn"] = tla_value(txns[int(e["txn"])])
            if e["event"] in ("WriteOne", "DecideCommit"):
                fields["hlc"] = tla_value(ranks[int(e["hlc"])])
            if e["event"] == "WriteOne":
                fields["key"] = tla_value(e["key"])
            if e["event"] == "Begin":
                key, stamp, origin = _read_version(e)
                fields |= {"key": tla_value(key), "hlc": tla_value(ranks[stamp]), "origin": tla_value(origin)}
            lines.append(_record(fields))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TraceError(f"malformed trace line: {exc!r}") from exc
    as_set = lambda values: "{" + ", ".join(values) + "}"  # noqa: E731
    module = f"""---- MODULE {name} ----
EXTENDS QuorumCommitTrace

TraceMembers == {as_set(map(str, members))}
TraceKeys == {as_set(map(tla_value, keys))}
TraceTxns == {as_set(map(tla_value, txns.values()))}
TraceOnes == {sum(e["event"] == "WriteOne" for e in steps)}
TraceCrashes == {sum(e["event"] == "Crash" for e in steps)}
Log == <<
    {(","+chr(10)+"    ").join(lines)}
>>
====
"""
    cfg = f"""CONSTANTS
    Members <- TraceMembers
    Keys <- TraceKeys
    Txns <- TraceTxns
    Coordinators <- TraceMembers
    OneWriters <- TraceMembers
    MaxOne <- TraceOnes
    MaxCrashes <- TraceCrashes
    TraceLog <- Log
INIT TraceInit
NEXT TraceNext
INVARIANTS
    {chr(10).join("    " + i for i in QUORUM_INVARIANTS).strip()}
"""
    return module, cfg


# The trace lines of Swim, by the name the spec's line takes.
SWIM_EVENTS = {"TickPing": "TickPing", "PingReceived": "PingReceived", "Lose": "Lose",
               "TickProbeFailed": "TickProbeFailed", "TickDead": "TickDead", "Pause": "Pause", "Crash": "Pause",
               "Resume": "Resume", "Restart": "Restart"}
DATAGRAM_EVENTS = ("TickPing", "PingReceived", "Lose")


def swim_steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of `Swim` in a trace, one per datagram (see the module's docstring)."""
    steps: list[dict[str, Any]] = []
    for number, event in enumerate(steps_of(events), start=1):
        name = SWIM_EVENTS.get(event["event"])
        if name is None:
            continue
        if name in DATAGRAM_EVENTS:
            for about, state, incarnation in event["updates"]:
                steps.append({"event": name, "member": event["member"], "peer": event["peer"], "about": about,
                              "st": state, "inc": incarnation, "line": number})
                if name == "PingReceived":
                    steps.append({"event": "LoseAck", "line": number})
        else:
            steps.append({"event": name, "member": event["member"], "line": number}
                         | {k: event[k] for k in ("peer", "inc") if k in event})
        if "view" in event:
            steps.append({"event": "View", "member": event["member"], "view": event["view"], "line": number})
    return steps


def swim_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace as Swim sees it: its Init line, its steps, an End line counting them."""
    steps = swim_steps(events)
    return [events[0], *steps, {"event": "End", "steps": len(steps)}]


def _swim_view(view: dict[Any, list[Any]], members: Sequence[int]) -> str:
    entries = {int(member): entry for member, entry in view.items()}
    if sorted(entries) != list(members):
        raise TraceError(f"a view holds members {sorted(entries)}, not {list(members)}")
    return "(" + " @@ ".join(
        f"{m} :> {_record({'st': tla_value(entries[m][0]), 'inc': tla_value(int(entries[m][1]))})}"
        for m in members) + ")"


def to_swim_module(events: list[dict[str, Any]], name: str) -> tuple[str, str]:
    """The TLA+ module holding a trace's Swim lines, and its TLC configuration."""
    steps = steps_of(events)
    try:
        members = sorted(int(m) for m in events[0]["members"])
        lines = []
        for e in steps:
            fields = {"event": tla_value(e["event"])}
            for field in ("member", "peer", "about", "inc"):
                if field in e:
                    fields[field] = tla_value(int(e[field]))
            if "st" in e:
                fields["st"] = tla_value(e["st"])
            if "view" in e:
                fields["view"] = _swim_view(e["view"], members)
            lines.append(_record(fields))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise TraceError(f"malformed trace line: {exc!r}") from exc
    count = lambda event: sum(e["event"] == event for e in steps)  # noqa: E731
    module = f"""---- MODULE {name} ----
EXTENDS SwimTrace

TraceMembers == {{{", ".join(map(str, members))}}}
NoJoiners == {{}}
TraceMsgs == {count("TickPing") + 1}
TraceFalses == {count("TickProbeFailed")}
TracePauses == {count("Pause")}
Log == <<
    {(","+chr(10)+"    ").join(lines)}
>>
====
"""
    cfg = f"""CONSTANTS
    Members <- TraceMembers
    Subjects <- TraceMembers
    Joiners <- NoJoiners
    MaxMsgs <- TraceMsgs
    MaxFalse <- TraceFalses
    MaxPauses <- TracePauses
    MaxRemovals = 0
    TraceLog <- Log
INIT TraceInit
NEXT TraceNext
INVARIANTS
    {chr(10).join("    " + i for i in SWIM_INVARIANTS).strip()}
PROPERTIES
    {chr(10).join("    " + p for p in SWIM_PROPERTIES).strip()}
"""
    return module, cfg


SPECS = {
    VCLOCK: (SPEC_MODULES, to_module),
    QUORUM: (("QuorumCommit", "QuorumCommitTrace"), to_quorum_module),
    SWIM: (("Swim", "SwimTrace"), to_swim_module),
}


def check(events: list[dict[str, Any]], *, spec: str = VCLOCK, timeout_s: float = TIMEOUT_S,
          keep: Path | None = None) -> Verdict:
    """Run TLC on the trace against `spec`; `keep` receives the generated module and TLC's
    output. A QuorumCommit verdict counts the lines of that spec (`quorum_steps`), a Swim
    verdict those of Swim (`swim_steps`)."""
    name = "TraceRun"
    why = incomplete(events)
    if spec == QUORUM:
        events = quorum_events(events)
    elif spec == SWIM:
        events = swim_events(events)
    modules, build = SPECS[spec]
    module, cfg = build(events, name)
    if why is not None:
        return Verdict(accepted=False, lines=len(steps_of(events)), matched=0, reason=why, seconds=0.0, output="")
    with tempfile.TemporaryDirectory(prefix="trace-") as tmp:
        work = Path(tmp)
        for spec_module in modules:
            shutil.copy(SPECS_DIR / f"{spec_module}.tla", work)
        (work / f"{name}.tla").write_text(module)
        (work / f"{name}.cfg").write_text(cfg)
        # -deadlock: a trace's last state has no successor; that is its end, not an error.
        output, seconds, timed_out = run_tlc.invoke(
            work, f"{name}.tla", f"{name}.cfg", workers=1, timeout_s=timeout_s, options=("-deadlock",)
        )
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for path in work.glob(f"{name}.*"):
                shutil.copy(path, keep)
            (keep / "tlc.out").write_text(output)
    return judge(events, output, seconds, timed_out)


def judge(events: list[dict[str, Any]], output: str, seconds: float, timed_out: bool) -> Verdict:
    steps = steps_of(events)
    matched = max((int(n) for n in _MATCHED.findall(output)), default=0)
    invariant = re.search(r"^Error: Invariant (\w+) is violated", output, re.M)
    completed = "Model checking completed. No error has been found." in output
    if timed_out:
        reason = "TLC did not finish in time"
    elif invariant:
        reason = f"invariant {invariant.group(1)} is violated after line {matched} of {len(steps)}"
    elif not completed:
        reason = "TLC failed: " + (output.strip().splitlines() or ["no output"])[-1]
    elif matched < len(steps):
        culprit = json.dumps(steps[matched]) if steps else ""
        reason = f"line {matched + 1} of {len(steps)} is no step of the spec: {culprit}"
    else:
        return Verdict(accepted=True, lines=len(steps), matched=matched, reason="", seconds=seconds, output=output)
    return Verdict(accepted=False, lines=len(steps), matched=matched, reason=reason, seconds=seconds, output=output)


def simulate(seed: int, *, wal_mode: str, faults: str, writes: int, quorum: int = 0, swim: bool = False,
             pauses: Sequence[tuple[float, int, float]] = (), members: int = 3) -> list[dict[str, Any]]:
    """Run the simulator and return its trace (it must also pass its own end checks);
    `quorum` single-key QUORUM transactions beside the writes, when not 0; with `swim`,
    SWIM on every member, losing 5% of its datagrams until the heal, and `pauses`
    `(at_s, member, seconds)`."""
    from replicaset.sim import NO_FAULTS, Faults, KvQuorum, Simulation, SwimConfig

    chosen = {"none": NO_FAULTS, "links": Faults(crash_per_s=0), "all": Faults()}[faults]
    events: list[dict[str, Any]] = []
    script = [(at_s, lambda s, m=member, d=seconds: s.pause(m, d)) for at_s, member, seconds in pauses]
    with tempfile.TemporaryDirectory(prefix="sim-") as tmp:
        sim = Simulation(Path(tmp), seed=seed, faults=chosen, wal_mode=wal_mode, writes=writes, trace=events.append,
                         quorum=KvQuorum(transactions=quorum) if quorum else None, members=members,
                         swim=SwimConfig(drop_p=0.05) if swim else None, script=script)
        try:
            sim.run()
            sim.check()
        finally:
            sim.close()
    return events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", type=Path, metavar="TRACE.jsonl")
    parser.add_argument("--simulate", type=int, metavar="SEED", help="check the simulator's trace for SEED")
    parser.add_argument("--wal-mode", choices=("write", "fsync"), default="fsync")
    parser.add_argument("--faults", choices=("none", "links", "all"), default="all",
                        help="links: delays, cuts, partitions, duplicates, reorders; all: crashes too")
    parser.add_argument("--writes", type=int, default=30)
    parser.add_argument("--quorum", type=int, default=0, metavar="N",
                        help="add N single-key QUORUM transactions to the simulated run")
    parser.add_argument("--spec", choices=tuple(SPECS), help="the spec to check against (default: QuorumCommit "
                                                              "with --quorum, else VClockReplication)")
    parser.add_argument("--pause", action="append", default=[], metavar="AT:MEMBER:SECONDS",
                        help="with --spec Swim: stop MEMBER at AT seconds for SECONDS")
    parser.add_argument("--save", type=Path, metavar="TRACE.jsonl", help="write the simulated trace here")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the generated module and TLC's output")
    args = parser.parse_args(argv)
    if bool(args.traces) == (args.simulate is not None):
        parser.error("give trace files or --simulate SEED")
    missing = run_tlc.tools_available()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    if args.simulate is not None:
        try:
            pauses = [(float(at), int(member), float(seconds))
                      for at, member, seconds in (text.split(":") for text in args.pause)]
        except ValueError:
            parser.error(f"--pause takes AT:MEMBER:SECONDS, not {args.pause}")
        events = simulate(args.simulate, wal_mode=args.wal_mode, faults=args.faults, writes=args.writes,
                          quorum=args.quorum, swim=args.spec == SWIM, pauses=pauses)
        if args.save:
            args.save.write_text("".join(json.dumps(e) + "\n" for e in events))
        runs = [(f"seed {args.simulate} ({args.wal_mode}, faults {args.faults})", events)]
    else:
        try:
            runs = [(str(path), read_trace(path)) for path in args.traces]
        except TraceError as exc:
            print(exc, file=sys.stderr)
            return 2
    rejected = 0
    for label, events in runs:
        try:
            verdict = check(events, spec=args.spec or (QUORUM if args.quorum else VCLOCK), keep=args.keep)
        except TraceError as exc:
            print(f"{label}: {exc}", file=sys.stderr)
            return 2
        print(f"{verdict.line()}  {label}", flush=True)
        rejected += not verdict.accepted
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main())
