"""Every request the workloads made, with its outcome, and the checks over them.

An outcome is what the client can know, as in Jepsen: `ok` (acknowledged), `failed` (the
server said it did not happen, or the request never left), `unknown` (a timeout, a lost
connection, an error that does not say). The checks are pure functions of the history and
of what the members hold after healing, so a test can hand them a made-up history.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from replicaset.iproto.constants import ErrorCode

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"

# Error replies that say the write did not happen (docs/design/README.md §4.5: an aborted transaction
# consumes nothing; a conflict, a deadline or a member not taking writes aborts it).
FAILED_CODES = frozenset({ErrorCode.READONLY, ErrorCode.TRANSACTION_CONFLICT, ErrorCode.SYNC_QUORUM_TIMEOUT,
                          ErrorCode.SYNC_ROLLBACK, ErrorCode.QUORUM_WAIT, ErrorCode.TXN_ROLLBACK, ErrorCode.LOADING,
                          ErrorCode.SQL_EXECUTE, ErrorCode.NOT_LEADER})


def outcome_of_error(code: int, message: str) -> str:
    """ER_TIMEOUT on a write that says "committed" (fewer members than the level confirmed
    it) is a decided commit: it must stay, so it counts as acknowledged."""
    if code == ErrorCode.TIMEOUT and "committed" in message:
        return OK
    return FAILED if code in FAILED_CODES else UNKNOWN


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    workload: str
    worker: int
    member: int
    kind: str  # transfer, read, insert, write
    value: Any
    outcome: str
    start_s: float
    end_s: float
    error: str | None = None
    result: Any = None


@dataclass
class History:
    """Appended to by every worker thread; times are seconds since `started`."""

    started: float = field(default_factory=time.monotonic)
    ops: list[Op] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.started

    def add(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)

    def of(self, workload: str) -> list[Op]:
        with self._lock:
            return [op for op in self.ops if op.workload == workload]

    def counts(self) -> dict[str, dict[str, int]]:
        """Operations by workload, then `kind:outcome`."""
        found: dict[str, Counter[str]] = {}
        with self._lock:
            for op in self.ops:
                found.setdefault(op.workload, Counter())[f"{op.kind}:{op.outcome}"] += 1
        return {w: dict(sorted(c.items())) for w, c in sorted(found.items())}

    def as_json(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(op) for op in self.ops]


@dataclass
class Check:
    """One workload's verdict: `problems` empty means it passed; figures for the report."""

    workload: str
    problems: list[str] = field(default_factory=list)
    lost: int = 0  # acknowledged writes missing at the end
    duplicates: int = 0
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


PROBLEMS_SHOWN_MAX = 10


def check_bank(ops: list[Op], finals: dict[int, list[list[Any]]], *, accounts: int, total: int) -> Check:
    """Every read, and each member's final table (`finals`: member -> rows `[id, bal]`): the
    total is `total`, no balance is negative, every account is there (a transfer moves all
    of its amount or nothing)."""
    check = Check("bank")
    reads = [op for op in ops if op.kind == "read" and op.outcome == OK]
    seen = [(f"a read on member {op.member} at {op.end_s:.2f} s", op.result) for op in reads]
    seen += [(f"member {n}'s final table", rows) for n, rows in sorted(finals.items())]
    for where, rows in seen:
        balances = {row[0]: row[1] for row in rows}
        if sorted(balances) != list(range(1, accounts + 1)):
            check.problems.append(f"{where} holds accounts {sorted(balances)}")
        if sum(balances.values()) != total:
            check.problems.append(f"{where} totals {sum(balances.values())}, not {total}")
        negative = {a: b for a, b in balances.items() if b < 0}
        if negative:
            check.problems.append(f"{where} has negative balances {negative}")
    transfers = Counter(op.outcome for op in ops if op.kind == "transfer")
    moved = sum(1 for op in ops if op.kind == "transfer" and op.outcome == OK and op.result == 2)
    check.figures = {"transfers": dict(transfers), "moved": moved, "reads": len(reads),
                     "bad_reads_and_tables": len(check.problems)}
    check.problems = check.problems[:PROBLEMS_SHOWN_MAX]
    return check


def check_set(ops: list[Op], final_values: list[Any]) -> Check:
    """Every acknowledged insert present exactly once, none that definitely failed present,
    nothing present that was never inserted; an unknown one either way."""
    check = Check("set")
    present = Counter(final_values)
    inserts = [op for op in ops if op.kind == "insert"]
    by_outcome = {outcome: {op.value for op in inserts if op.outcome == outcome} for outcome in (OK, FAILED, UNKNOWN)}
    lost = sorted(by_outcome[OK] - set(present))
    duplicates = sorted(v for v, n in present.items() if n > 1)
    revived = sorted(by_outcome[FAILED] & set(present))
    invented = sorted(set(present) - {op.value for op in inserts})
    check.lost, check.duplicates = len(lost), len(duplicates)
    for what, values in (("acknowledged inserts lost", lost), ("values present more than once", duplicates),
                         ("failed inserts present", revived), ("values never inserted present", invented)):
        if values:
            check.problems.append(f"{len(values)} {what}: {values[:PROBLEMS_SHOWN_MAX]}")
    unknown_present = len(by_outcome[UNKNOWN] & set(present))
    check.figures = {"acknowledged": len(by_outcome[OK]), "failed": len(by_outcome[FAILED]),
                     "unknown": len(by_outcome[UNKNOWN]), "unknown_present": unknown_present,
                     "present": sum(present.values())}
    return check


def check_registers(ops: list[Op], finals: list[list[list[Any]]], *, initial: int) -> Check:
    """Every member holds the same registers (`finals`: each member's rows `[k, v]`), and each
    register's value is its initial one or one a write that did not definitely fail wrote."""
    check = Check("registers")
    views = [{k: v for k, v in rows} for rows in finals]
    if any(view != views[0] for view in views):
        differing = sorted(k for k in set().union(*views) if len({view.get(k) for view in views}) > 1)
        check.problems.append(f"members disagree on registers {differing[:PROBLEMS_SHOWN_MAX]}")
    writes = [op for op in ops if op.kind == "write"]
    possible: dict[int, set[Any]] = {}
    for op in writes:
        if op.outcome != FAILED:
            possible.setdefault(op.value[0], set()).add(op.value[1])
    for k, v in sorted(views[0].items() if views else ()):
        if v != initial and v not in possible.get(k, set()):
            check.problems.append(f"register {k} holds {v}, which no write that may have happened wrote")
    acknowledged = [op for op in writes if op.outcome == OK]
    check.figures = {"writes": dict(Counter(op.outcome for op in writes)), "registers": len(views[0]) if views else 0,
                     "acknowledged": len(acknowledged)}
    check.problems = check.problems[:PROBLEMS_SHOWN_MAX]
    return check


def check_ledger(ops: list[Op], accounts: list[list[Any]], ledger: list[list[Any]], *, opening: int) -> Check:
    """One member's final `accounts` (rows `[id, bal]`) and `ledger` (rows `[id, src, dst,
    amount]`): every balance is its opening one plus what the ledger's transfers moved (a
    transfer lost in part, or a lost update, shows here), none is negative, every
    acknowledged transfer is in the ledger once, and none that definitely failed or was
    never asked for is."""
    check = Check("streams")
    transfers = [op for op in ops if op.kind == "transfer"]
    asked = {op.value[0]: tuple(op.value[1:]) for op in transfers}
    by_outcome = {outcome: {op.value[0] for op in transfers if op.outcome == outcome} for outcome in (OK, FAILED, UNKNOWN)}
    expected = {row[0]: opening for row in accounts}
    logged: set[Any] = set()
    for transfer, src, dst, amount in ledger:
        if asked.get(transfer) != (src, dst, amount):
            check.problems.append(f"ledger holds transfer {transfer} {[src, dst, amount]}, which nobody asked for")
        logged.add(transfer)
        expected[src] = expected.get(src, 0) - amount
        expected[dst] = expected.get(dst, 0) + amount
    balances = {row[0]: row[1] for row in accounts}
    if balances != expected:
        wrong = {a: (balances.get(a), expected.get(a)) for a in sorted(set(balances) | set(expected))
                 if balances.get(a) != expected.get(a)}
        check.problems.append(f"balances (held, what the ledger explains) differ: {wrong}")
    negative = {a: b for a, b in balances.items() if b < 0}
    if negative:
        check.problems.append(f"negative balances {negative}")
    lost = sorted(by_outcome[OK] - logged)
    revived = sorted(by_outcome[FAILED] & logged)
    check.lost = len(lost)
    for what, found in (("acknowledged transfers missing from the ledger", lost),
                        ("failed transfers in the ledger", revived)):
        if found:
            check.problems.append(f"{len(found)} {what}: {found[:PROBLEMS_SHOWN_MAX]}")
    check.figures = {"transfers": dict(Counter(op.outcome for op in transfers)), "ledger": len(ledger)}
    check.problems = check.problems[:PROBLEMS_SHOWN_MAX]
    return check


def divergent_rows(views: list[dict[str, list[list[Any]]]]) -> dict[str, int]:
    """Per table, the rows (by first column, the key) not identical on every member."""
    found: dict[str, int] = {}
    tables = sorted(set().union(*(v.keys() for v in views))) if views else []
    for table in tables:
        per_member = [{repr(row[0]): row for row in view.get(table, [])} for view in views]
        keys = set().union(*per_member)
        differing = sum(1 for k in keys if any(m.get(k) != per_member[0].get(k) for m in per_member))
        if differing:
            found[table] = differing
    return found
