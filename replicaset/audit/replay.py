"""Check 5, convergence: a checkpoint plus the merged rows, replayed with the engine's own
last-writer-wins code (`Engine.apply`), must give the member's final tables.

For each member with `db.sqlite`: the base is its newest checkpoint that its WAL continues
(WAL start <= checkpoint vclock <= WAL end), else an empty database. The rows are the member's
WAL rows above the base, preceded, when its WAL starts above the base (a joined member whose
join checkpoint, kept in `snap/`, was replaced by `checkpoint_count` newer ones), by the rows between the base
and its WAL start taken from another member's WAL in that member's order (check 3 vouches that
every copy of an (origin, lsn) is the same): the first of these donors that can be read and holds
every one of those rows. Replay stops at the member's final vclock (the `_rs_vclock` of
`db.sqlite`). Both sides are compared with `checkpoint.digest`, local tables excluded. Each member is one Spark task; the function itself is plain Python.

WALs are read as recovery reads them (`replicaset.restore.logs.read_wal`): a torn record at the
end of the last segment (a crash mid-write) ends the log, as recovery cuts it there; the audit
reports it as a warning.

The base is chosen, and the engine opened on a scratch directory at the base vclock, as
`replicaset restore` does it (`replicaset.restore.base`), which replays the same way up to a
bound instead of up to `db.sqlite`'s vclock.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPLAY_FLUSH_ROWS = 1000
TABLES_LISTED_MAX = 20


def _db_state(db_path: Path, exclude: list[str]) -> tuple[dict[str, int], dict[int, int]]:
    """Digest and vclock of a database, read from a copy (auditing never touches a member)."""
    import apsw

    from replicaset.storage import checkpoint as checkpoints

    with tempfile.TemporaryDirectory(prefix="audit-db-") as tmp:
        copy = Path(tmp) / "db.sqlite"
        shutil.copyfile(db_path, copy)
        for suffix in ("-wal",):
            side = Path(str(db_path) + suffix)
            if side.exists():
                shutil.copyfile(side, Path(str(copy) + suffix))
        conn = apsw.Connection(str(copy))
        try:
            vclock = dict(conn.execute("SELECT origin, lsn FROM _rs_vclock").fetchall())
            return checkpoints.digest(conn, exclude), vclock
        finally:
            conn.close()


def _rows_from(wal_dir: str, low: dict[int, int], high: dict[int, int]) -> list[Any]:
    """Records of a WAL with low[o] < lsn <= high[o], in log order, each (origin, lsn) once.

    A torn tail of the last segment ends the log (recovery cuts it off: no row of it was
    acknowledged); a torn record anywhere else, or any other damage, raises `WalError`.
    """
    from replicaset.restore.logs import read_wal

    out, seen = [], set()
    for _, _, record in read_wal(Path(wal_dir)):
        o, lsn = record.origin, record.lsn
        if low.get(o, 0) < lsn <= high.get(o, 0) and (o, lsn) not in seen:
            seen.add((o, lsn))
            out.append(record)
    return out


def _covers(rows: list[Any], low: dict[int, int], high: dict[int, int]) -> bool:
    """Whether `rows` (from `_rows_from` with the same bounds) hold every LSN between the bounds:
    a donor whose WAL starts above `low` holds the top of the range but not all of it."""
    per_origin = Counter(r.origin for r in rows)
    return all(per_origin[o] == lsn - low.get(o, 0) for o, lsn in high.items() if lsn > low.get(o, 0))


def _rows_from_donors(donors: list[str], low: dict[int, int], high: dict[int, int]) -> tuple[list[Any] | None, list[str]]:
    """The rows between the bounds from the first donor WAL that can be read and holds them all
    (None when none does), and why each donor before it was passed over."""
    from wal.errors import WalError

    passed_over: list[str] = []
    for donor in donors:
        try:
            rows = _rows_from(donor, low, high)
        except WalError as exc:
            passed_over.append(f"{donor}: {exc}")
            continue
        if _covers(rows, low, high):
            return rows, passed_over
        passed_over.append(f"{donor}: does not hold every row from {low} to {high}")
    return None, passed_over


def replay_member(spec: dict[str, Any]) -> dict[str, Any]:
    """Replay one member; returns {member, ok, detail, tables, base, rows_applied, ...}."""
    from replicaset.restore.base import newest_base, open_engine_at
    from replicaset.storage.errors import ApplyError, GapError, SchemaPending
    from wal import VClock
    from wal.errors import WalError

    name = spec["member"]
    exclude = list(spec["local_tables"])
    started = time.monotonic()
    result: dict[str, Any] = {"member": name, "ok": False, "tables": [], "rows_applied": 0}
    try:
        final_digest, final_vclock = _db_state(Path(spec["db_path"]), exclude)
    except Exception as exc:
        result["detail"] = f"{name}: cannot read db.sqlite: {exc}"
        result["error"] = True
        return result
    final = {o: lsn for o, lsn in final_vclock.items()}
    wal_start = VClock(spec["wal_start"])
    wal_end = VClock(spec["wal_end"])
    base_path, base = newest_base([(Path(path), VClock(vclock)) for path, vclock in spec["checkpoints"]],
                                  wal_start, wal_end, within=lambda vc: vc <= VClock(final))
    result["base"] = str(base_path) if base_path else "empty database"
    result["base_vclock"] = base.to_dict()
    result["final_vclock"] = final
    rows: list[Any] = []
    if not wal_start <= base:
        prefix, passed_over = _rows_from_donors(spec["donors"], base.to_dict(), wal_start.to_dict())
        result["donors_passed_over"] = passed_over
        if prefix is None:
            result["detail"] = (f"{name}: no checkpoint and its WAL starts at {wal_start.to_dict()}; "
                                f"no other member holds the rows from {base.to_dict()} to there"
                                + "".join(f"; {reason}" for reason in passed_over))
            result["error"] = True
            return result
        rows.extend(prefix)
    try:
        rows.extend(_rows_from(spec["wal_dir"], base.to_dict(), final))
    except WalError as exc:
        result["detail"] = f"{name}: cannot read the rows to replay: {exc}"
        result["error"] = True
        return result
    with tempfile.TemporaryDirectory(prefix="audit-replay-") as tmp:
        engine = open_engine_at(Path(tmp), base_path, base, instance_id=spec["instance_id"] or 31,
                                local_tables=frozenset(exclude))
        applied = 0
        try:
            for record in rows:
                try:
                    if engine.apply(record, own_allowed=True):
                        applied += 1
                except (GapError, SchemaPending, ApplyError) as exc:
                    result["detail"] = f"{name}: replay stopped at {record.origin}:{record.lsn}: {exc}"
                    result["rows"] = [{"member": name, "origin": record.origin, "lsn": record.lsn}]
                    result["rows_applied"] = applied
                    return result
                if applied % REPLAY_FLUSH_ROWS == 0:
                    engine.flush()
            engine.flush()
            replayed = engine.table_digest()
            replayed_vclock = engine.vclock.to_dict()
        finally:
            engine.close()
    result["rows_applied"] = applied
    result["seconds"] = round(time.monotonic() - started, 3)
    differing = sorted(t for t in set(final_digest) | set(replayed)
                       if final_digest.get(t) != replayed.get(t))
    result["tables"] = differing[:TABLES_LISTED_MAX]
    result["digest"] = {t: f"{d:016x}" for t, d in sorted(final_digest.items())}
    vclock_differs = {o: lsn for o, lsn in final.items() if o != 0} != {
        o: lsn for o, lsn in replayed_vclock.items() if o != 0}
    if differing:
        result["detail"] = (f"{name}: the replay gives different tables than db.sqlite: "
                            + ", ".join(f"{t} (db {final_digest.get(t, 0):016x}, replay "
                                        f"{replayed.get(t, 0):016x})" for t in differing[:TABLES_LISTED_MAX]))
    elif vclock_differs:
        result["detail"] = (f"{name}: the replay reaches vclock {replayed_vclock}, "
                            f"db.sqlite holds {final}")
    else:
        result["ok"] = True
        result["detail"] = f"{name}: {applied} rows from {result['base']} give db.sqlite's tables"
    return result
