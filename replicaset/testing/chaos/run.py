"""One chaos run, start to verdict: members behind proxies, workloads, the seeded faults, heal,
converge, check, audit, report. `tools/chaos.py` and `tests/chaos/` both call `run`.

Phases, each bounded: start (members joined, converged), faults (the schedule, while the
workloads write), heal (every link open, every member running and continued), converge
(equal vclocks and tables on every member, within `converge_timeout_s`), check (history and
tables), audit (Spark over the WALs, when asked). Every process started is stopped by pid
at the end; the data directories and logs stay when the run fails or `keep` is set.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from replicaset.testing.chaos.cluster import Cluster
from replicaset.testing.chaos.faults import HANDLERS, mount_tmpfs, unmount
from replicaset.testing.chaos.history import History, divergent_rows
from replicaset.testing.chaos.report import Audit, problems_of, run_audit, verdict, write_report
from replicaset.testing.chaos.schedule import (DEFAULT_KINDS, LINK_FAULTS, PARTITIONS, PROCESS_FAULTS, Nemesis,
                                               ScheduleOptions, make_schedule)
from replicaset.testing.chaos.tarantool import TarantoolCluster, find_tarantool
from replicaset.testing.chaos.workloads import WORKLOADS, Context, join_workers, start_workers

# Short timeouts so faults show quickly and healing is quick; QUORUM is the server's default
# and stays so. Invariants are checked after every event (TigerBeetle style).
BASE_CONFIG = """replication_timeout = 0.2
replication_connect_timeout = 10
replication.synchro_timeout_s = 2.0
debug.check_invariants = true
"""
TARANTOOL_WORKLOADS = ("bank", "set")
TARANTOOL_FAULTS = PROCESS_FAULTS + PARTITIONS + LINK_FAULTS
START_CONVERGE_S = 30.0
WORKER_STOP_S = 20.0
NEMESIS_STOP_S = 30.0
# A fault begun late (the one before it took longer to inject on a loaded machine, a kill
# or a re-join) still runs: the faults phase waits this long past its end for the schedule.
LATE_FAULTS_S = 60.0


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    seed: int
    size: int = 3
    duration_s: float = 60.0
    workloads: tuple[str, ...] = ("bank", "set", "registers")
    workers_each: int = 2
    kinds: tuple[str, ...] = DEFAULT_KINDS
    fault_s: tuple[float, float] = (2.0, 6.0)
    gap_s: tuple[float, float] = (1.5, 4.0)
    converge_timeout_s: float = 60.0
    request_timeout_s: float = 5.0
    audit: bool = True
    target: str = "ours"  # or "tarantool" (2.6, async) / "tarantool-sync" (is_sync spaces, synchro quorum)
    root: Path = field(default_factory=lambda: Path("/tmp") / f"chaos-{int(time.time())}")
    keep: bool = False

    def schedule_options(self) -> ScheduleOptions:
        return ScheduleOptions(size=self.size, duration_s=self.duration_s, kinds=self.kinds, fault_s=self.fault_s,
                               gap_s=self.gap_s)


def run(options: RunOptions, out: TextIO | None = None) -> dict[str, Any]:
    """The run's report (also written to `root/report.json`); progress lines go to `out`."""
    def say(line: str) -> None:
        if out is not None:
            print(line, file=out, flush=True)

    schedule = make_schedule(options.seed, options.schedule_options())
    say(f"chaos: seed {options.seed}, {options.target}, {options.size} members, {options.duration_s:g} s, "
        f"{len(schedule)} faults, workloads {','.join(options.workloads)}; data in {options.root}")
    workloads = [WORKLOADS[name]() for name in options.workloads]
    cluster = _cluster(options, workloads, schedule)
    mounted, notes = _mount_for_full_disk(cluster, schedule)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    stop = threading.Event()
    nemesis: Nemesis | None = None
    threads: list[threading.Thread] = []
    report: dict[str, Any] = {"seed": options.seed, "options": {k: str(v) if isinstance(v, Path) else v
                                                               for k, v in asdict(options).items()},
                              "started_at": started_at, "schedule": [f.describe() for f in schedule], "notes": notes}
    try:
        cluster.start([sql for w in workloads for sql in w.setup()])
        tables = sorted({t for w in workloads for t in w.tables})
        took, _ = cluster.wait_converged(tables, START_CONVERGE_S)
        if took is None:
            raise RuntimeError(f"the members did not converge within {START_CONVERGE_S} s of starting")
        say(f"chaos: {options.size} members up on ports {[m.port for m in cluster.members]}; faults begin")
        history = History()
        ctx = Context(cluster=cluster, history=history, stop=stop, request_timeout_s=options.request_timeout_s)
        threads = start_workers(ctx, workloads, options.workers_each, options.seed)
        nemesis = Nemesis(cluster, schedule, history.now, HANDLERS)
        nemesis.start()
        stop.wait(options.duration_s)
        nemesis.finish(LATE_FAULTS_S)
        nemesis.stop(NEMESIS_STOP_S)
        heal_notes = _heal(cluster)
        stop.set()
        stuck = join_workers(threads, WORKER_STOP_S)
        healed_at = history.now()
        say(f"chaos: healed at {healed_at:.1f} s, {len(history.ops)} operations; waiting for convergence")
        tables = _tables(cluster, fallback=tables)
        converge_s, views = cluster.wait_converged(tables, options.converge_timeout_s)
        # A member that does not answer is reported; the others are checked and compared.
        silent = [m.n for m, v in zip(cluster.members, views) if v is None]
        table_views = {m.n: v[1] for m, v in zip(cluster.members, views) if v is not None}
        checks = [w.check(history, table_views) for w in workloads] if table_views else []
        divergent = divergent_rows(list(table_views.values()))
        faults = [i.describe() for i in nemesis.injected]
        report.update({
            "faults": faults,
            "heal_notes": heal_notes,
            "healed_at_s": round(healed_at, 3),
            "operations": history.counts(),
            "operations_total": len(history.ops),
            "checks": {c.workload: {"ok": c.ok, "lost": c.lost, "duplicates": c.duplicates, "problems": c.problems,
                                    **c.figures} for c in checks},
            "acknowledged_writes_lost": sum(c.lost for c in checks),
            "duplicates": sum(c.duplicates for c in checks),
            "divergent_rows": divergent,
            "divergent_rows_total": sum(divergent.values()),
            "converge_s": None if converge_s is None else round(converge_s, 3),
            "final_vclocks": [v[0] if v is not None else None for v in views],
            "silent_members": silent,
            "proxies": cluster.network.stats(),
            "log_errors": _log_errors(cluster),
        })
    except BaseException:
        _stop(cluster, nemesis, stop, threads, report)
        for member in mounted:
            unmount(member.data_dir, options.root / f"{member.data_dir.name}.kept")
        say(f"chaos: the run broke off; seed {options.seed}; data directories and logs kept in {options.root}")
        raise
    _stop(cluster, nemesis, stop, threads, report)
    audit = Audit(ran=False, note="not asked for" if options.target == "ours" else "our WAL format only")
    if options.audit and options.target == "ours":
        say("chaos: running the Spark audit over the members' WALs")
        audit = run_audit([m.data_dir for m in cluster.members], options.root / "audit.json")
    report["audit"] = audit.describe()
    report["problems"] = problems_of(checks, converge_s=converge_s, divergent=divergent, faults=faults, audit=audit,
                                     stuck_workers=stuck) + [n for n in heal_notes if "did not restart" in n]
    # Even on a full disk: a member that must stop says why and stops cleanly; one that
    # exited on its own is reported, with its log, for someone to read.
    report["problems"] += [f"{n}; see {cluster.member(int(n.split()[1])).log_path}" for n in heal_notes
                           if "stopped on its own" in n]
    report["problems"] += [f"member {n} did not answer after healing" for n in silent]
    report["problems"] += [f"member {n} exited with {code} when stopped at the end"
                           for n, code in enumerate(report["exit_codes"], start=1) if code not in (0, None)
                           and n not in silent]
    if not checks:
        report["problems"].append("no member answered after healing: nothing could be checked")
    report["verdict"] = verdict(report)
    failed = bool(report["problems"])
    for member in mounted:
        problem = unmount(member.data_dir, options.root / f"{member.data_dir.name}.kept" if failed or options.keep else None)
        if problem:
            report["notes"].append(f"unmount {member.data_dir}: {problem}")
    write_report(report, options.root / "report.json")
    if failed or options.keep:
        report["kept"] = str(options.root)
        say(f"chaos: data directories, logs and report.json kept in {options.root}")
    else:
        shutil.rmtree(options.root, ignore_errors=True)
    say(report["verdict"])
    return report


def _cluster(options: RunOptions, workloads: list[Any], schedule: list[Any]) -> Any:
    """Our members, or Tarantool 2.6's with only what it can run: the bank and set workloads,
    and faults of processes and links (the member faults restart our server with options of
    its own)."""
    if options.target == "ours":
        return Cluster(options.root, options.size, options.seed, config=BASE_CONFIG)
    if options.target not in ("tarantool", "tarantool-sync"):
        raise ValueError(f"unknown target {options.target!r}: ours, tarantool or tarantool-sync")
    binary = find_tarantool()
    if binary is None:
        raise RuntimeError("no tarantool binary on PATH (apt-get install tarantool)")
    refused = sorted({w.name for w in workloads} - set(TARANTOOL_WORKLOADS)) + sorted(
        {f.kind for f in schedule} - set(TARANTOOL_FAULTS))
    if refused:
        raise ValueError(f"not run against Tarantool: {refused}; workloads {TARANTOOL_WORKLOADS}, "
                         f"faults {TARANTOOL_FAULTS}")
    sync = options.target == "tarantool-sync"
    for workload in workloads:
        workload.tarantool, workload.leader_only = True, sync
    return TarantoolCluster(options.root, options.size, options.seed, binary,
                            synchro_quorum=options.size // 2 + 1 if sync else None)


def _stop(cluster: Cluster, nemesis: Nemesis | None, stop: threading.Event, threads: list[threading.Thread],
          report: dict[str, Any]) -> None:
    stop.set()
    if nemesis is not None:
        nemesis.stop(NEMESIS_STOP_S)
    report["exit_codes"] = cluster.stop()
    join_workers(threads, WORKER_STOP_S)


def _mount_for_full_disk(cluster: Cluster, schedule: list[Any]) -> tuple[list[Any], list[str]]:
    """A tmpfs data directory for every member a full-disk fault targets; where mount is not
    permitted the fault is skipped, and the report says so."""
    mounted, notes = [], []
    for n in sorted({f.members[0] for f in schedule if f.kind == "full-disk"}):
        member = cluster.member(n)
        problem = mount_tmpfs(member.data_dir)
        if problem is None:
            member.on_tmpfs = True
            mounted.append(member)
        else:
            notes.append(f"full-disk on member {n} skipped: cannot mount a tmpfs ({problem})")
    return mounted, notes


def _heal(cluster: Cluster) -> list[str]:
    """Every link open, every member continued, every member that is down started again.
    Every fault has healed by now, so a member that is down stopped on its own."""
    notes = []
    cluster.network.heal()
    for member in cluster.members:
        cluster.resume(member)
        if not member.running:
            code = member.proc.returncode if member.proc is not None else None
            try:
                cluster.restart(member)
                notes.append(f"member {member.n} had stopped on its own (exit code {code}); started again at the heal")
            except RuntimeError as exc:
                notes.append(f"member {member.n} did not restart: {exc}")
    return notes


def _tables(cluster: Cluster, fallback: list[str]) -> list[str]:
    """The replicated tables, DDL's included, as the first member that answers holds them."""
    for member in cluster.members:
        try:
            return cluster.tables(member)
        except (OSError, ConnectionError):
            continue
    return fallback


def _log_errors(cluster: Cluster) -> dict[str, int]:
    """Error-level lines in each member's log (our structlog JSON, Tarantool's ` E> `), for the report."""
    found = {}
    for member in cluster.members:
        try:
            found[member.log_path.name] = sum(1 for line in member.log_path.read_text().splitlines()
                                              if '"level": "error"' in line or " E> " in line)
        except OSError:
            found[member.log_path.name] = -1
    return found
