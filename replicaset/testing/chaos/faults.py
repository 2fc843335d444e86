"""Faults on one member beyond a signal or a cut link: a skewed clock, a torn WAL tail, a full
disk, DDL under load. Each handler injects its fault and returns what heals it; the nemesis
(`schedule.Nemesis`) calls them at the schedule's times.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from replicaset.identity import Joining
from replicaset.iproto.errors import ServerError
from replicaset.testing.chaos.cluster import Cluster
from replicaset.testing.chaos.schedule import Fault, Handler, Injected
from wal.segment import list_segments, read_segment_header

FILL_CHUNK_BYTES = 1024 * 1024
FILL_BYTES_MAX = 1024 * 1024 * 1024
TMPFS_SIZE = "64m"
REMOVE_WAIT_S = 15.0  # SWIM declares a silent member dead within suspect + dead timeouts (3 s here)
REMOVE_POLL_S = 0.5
# A join is refused while SWIM on the registrar holds a voter dead (a false one too, on a
# loaded machine, with the harness's 1 s suspect timeout) or the registrar is not running:
# joined again, as an operator would, until this long after the first try.
REJOIN_WAIT_S = 30.0


def clock_skew(cluster: Cluster, fault: Fault, record: Injected) -> Callable[[], None]:
    """Restart the member with its HLC reading a clock `skew_ms` off; restart it with the
    true clock at the end."""
    member = cluster.member(fault.members[0])
    cluster.kill(member)
    member.extra_config = f"debug.clock_skew_ms = {fault.param('skew_ms')}"
    cluster.restart(member)

    def heal() -> None:
        member.extra_config = ""
        if member.running:
            cluster.kill(member)
        try:
            cluster.restart(member)
        except RuntimeError as exc:
            record.notes.append(f"member {member.n} did not restart: {exc}")
    return heal


def torn_tail(cluster: Cluster, fault: Fault, record: Injected) -> Callable[[], None]:
    """kill -9, then cut up to `cut_bytes` off the end of the last WAL segment (never into
    its header), as a write torn by a crash would leave it; restart at the end."""
    member = cluster.member(fault.members[0])
    cluster.kill(member)
    record.notes.append(cut_wal_tail(member.data_dir / "wal", fault.param("cut_bytes")))

    def heal() -> None:
        try:
            cluster.restart(member)
        except RuntimeError as exc:
            record.notes.append(f"member {member.n} did not restart after its WAL tail was cut: {exc}")
    return heal


def cut_wal_tail(wal_dir: Path, cut_bytes: int) -> str:
    """Cut the last segment's end; what was done, for the report."""
    segments = list_segments(wal_dir)
    if not segments:
        return "no WAL segment to cut"
    last = segments[-1]
    data = last.read_bytes()
    _, header_end = read_segment_header(data)
    cut = min(cut_bytes, len(data) - header_end)
    if cut <= 0:
        return f"{last.name} holds no record: nothing cut"
    with open(last, "r+b") as f:
        f.truncate(len(data) - cut)
    return f"cut {cut} of {len(data)} bytes off {last.name}"


def ddl(cluster: Cluster, fault: Fault, record: Injected) -> Callable[[], None]:
    """One DDL statement through the member while the workloads write: it takes the
    set-wide DDL lock through the quorum path (docs/design/README.md §4.6)."""
    member = cluster.member(fault.members[0])
    tables = set(cluster.tables(member))
    suffix = int(fault.at_s * 1000)
    statements = [f"CREATE TABLE chaos_ddl_{suffix}(id INTEGER PRIMARY KEY, x TEXT)"]
    if "chaos_set" in tables:
        statements.append(f"CREATE INDEX chaos_set_v_{suffix} ON chaos_set(v)")
    for table in sorted(tables & {"acct", "reg", "chaos_set"}):
        statements.append(f"ALTER TABLE {table} ADD COLUMN note_{suffix} TEXT")
    sql = statements[fault.param("choice") % len(statements)]
    try:
        with member.client(timeout_s=30.0) as client:
            client.execute(sql)
        record.notes.append(f"ok: {sql}")
    except (ServerError, OSError, ConnectionError) as exc:
        record.notes.append(f"{sql}: {type(exc).__name__}: {exc}")
    return lambda: None


def mount_tmpfs(path: Path, size: str = TMPFS_SIZE) -> str | None:
    """A small tmpfs at `path` for a member's data directory; None if mounted, else why not
    (not root, no mount in this container: the full-disk fault is skipped)."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"mount exited with {done.returncode}")


def unmount(path: Path, keep_as: Path | None) -> str | None:
    """Unmount the member's tmpfs, copying its content to `keep_as` first when given."""
    if keep_as is not None:
        shutil.copytree(path, keep_as, dirs_exist_ok=True)
    done = subprocess.run(["umount", str(path)], capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else done.stderr.strip()


def full_disk(cluster: Cluster, fault: Fault, record: Injected) -> Callable[[], None]:
    """Fill the member's data directory's file system (a tmpfs the run mounted) to the last
    byte; free it at the end."""
    member = cluster.member(fault.members[0])
    if not member.on_tmpfs:
        record.notes.append("skipped: the member's data directory is not on a tmpfs of its own")
        return lambda: None
    filler = member.data_dir / "chaos.filler"
    written = 0
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        chunk = b"\0" * FILL_CHUNK_BYTES
        while written < FILL_BYTES_MAX:
            written += os.write(fd, chunk)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    record.notes.append(f"filled with {written} bytes")

    def heal() -> None:
        filler.unlink(missing_ok=True)
    return heal


def remove_rejoin(cluster: Cluster, fault: Fault, record: Injected) -> Callable[[], None]:
    """Once every other member runs (a joiner still catching up from an earlier fault votes
    for nothing), kill -9 the member, wait until SWIM on another member holds it dead,
    `box.remove(ID)` it there (a QUORUM write shrinking the set); at the end wipe its data
    directory and join it again, as a new instance."""
    member = cluster.member(fault.members[0])
    behind = cluster.not_running(besides=member, timeout_s=REMOVE_WAIT_S)
    if behind:
        record.notes.append(f"members {behind} were not running after {REMOVE_WAIT_S:.0f} s; removing anyway")
    cluster.kill(member)
    through = cluster.running_member(besides=member, timeout_s=REMOVE_WAIT_S)
    if through is None:
        record.notes.append(f"member {member.n} not removed: no other member was running")
    deadline = time.monotonic() + REMOVE_WAIT_S
    removed = False
    while through is not None and not removed:
        try:
            with through.client() as client:
                answer = client.eval(f"box.remove({member.n})")[0]
            record.notes.append(f"removed through member {through.n}: {answer}")
            removed = True
        except ServerError as exc:
            # A removal committed but not confirmed by a quorum in time is answered with
            # ER_TIMEOUT, and every later attempt with "not registered": the `_cluster`
            # row says whether it went.
            if not cluster.registered(through, member.n):
                record.notes.append(f"removed through member {through.n}, answered: {exc}")
                removed = True
            elif time.monotonic() > deadline:
                record.notes.append(f"box.remove({member.n}) refused until the deadline: {exc}")
                break
            else:
                time.sleep(REMOVE_POLL_S)

    def heal() -> None:
        if not removed:
            try:
                cluster.restart(member)
            except RuntimeError as exc:
                record.notes.append(f"member {member.n} did not restart: {exc}")
            return
        if member.on_tmpfs:
            record.notes.append("not re-joined: its data directory is a tmpfs mount")
            return
        deadline = time.monotonic() + REJOIN_WAIT_S
        shutil.rmtree(member.data_dir, ignore_errors=True)
        while True:
            registrar = cluster.running_member(besides=member, timeout_s=REMOVE_WAIT_S) or through
            assert registrar is not None, "removed through a member"
            # A join that failed after its JOIN went out may have registered the instance
            # (its registration committed, not yet confirmed by a majority): as its advice
            # says, it is resumed under the same UUID. Joined afresh instead, each attempt
            # would register one more member that never comes, and the quorum on the total
            # membership would soon be out of reach.
            resuming = Joining.load(member.data_dir) is not None
            try:
                if resuming:
                    cluster.restart(member)
                    instance_id = int(cluster.info(member)["id"])
                else:
                    shutil.rmtree(member.data_dir, ignore_errors=True)
                    instance_id = cluster.join(member, registrar)
            except RuntimeError as exc:
                if time.monotonic() > deadline:
                    record.notes.append(f"member {member.n} did not restart: the re-join failed: {exc}")
                    return
                again = "resuming it" if Joining.load(member.data_dir) is not None else "joining again"
                record.notes.append(f"a re-join through member {registrar.n} failed, {again}: {exc}")
                time.sleep(REMOVE_POLL_S)
                continue
            how = "re-joined by resuming its join" if resuming else f"re-joined through member {registrar.n}"
            record.notes.append(f"{how} as instance {instance_id}")
            return
    return heal


HANDLERS: dict[str, Handler] = {"clock-skew": clock_skew, "torn-tail": torn_tail, "ddl": ddl, "full-disk": full_disk,
                                "remove-rejoin": remove_rejoin}
