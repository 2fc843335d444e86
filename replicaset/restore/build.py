"""`replicaset restore`: a new data directory holding a checkpoint plus the WAL rows after it up
to a bound, replayed with the engine's own apply (docs/restore.md).

Theory of operation.
1. Read every WAL given into one history (logs.py): the `--from` data directory's own first,
   then each `--wal` in the order given, each (origin, lsn) once.
2. Resolve the bound to a commit stamp and cut the history there (bound.py): per origin, the
   rows before its first row past the stamp. A bound the WALs do not reach fails here, before
   anything is written.
3. Take the base: the checkpoint given as `--from`, or the newest checkpoint of the `--from`
   data directory that its WAL continues and that holds no row past the bound (base.py, shared
   with the audit), else an empty database. The history must hold every row from the base to
   the cut: a gap is never papered over.
4. Replay into a scratch directory beside NEW_DIR, in commit order, flushing every
   `REPLAY_FLUSH_ROWS` rows. A row that cannot be applied stops the replay, or with
   `skip_failed` is held without its changes (`Engine.skip`, as `replication_skip_conflict`
   does) and named. A gap or a row whose schema is not there is never skipped.
5. Give the copy its own identity (isolation.py), then rename the scratch directory to NEW_DIR:
   NEW_DIR holds a whole copy or nothing. The sources are only read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import apsw

from replicaset import config as configuration
from replicaset.core.quorum import CLUSTER_TABLE
from replicaset.identity import Identity, IdentityError
from replicaset.restore.base import newest_base, open_engine_at
from replicaset.restore.bound import Bound, stamp_time
from replicaset.restore.errors import ReplayStopped, RestoreError
from replicaset.restore.isolation import CONFIG_FILE, copy_instance_id, new_identity, write_copy_files
from replicaset.restore.logs import History, RowReader
from replicaset.storage import ApplyError, Engine, GapError
from replicaset.storage import checkpoint as checkpoints
from replicaset.storage.errors import CheckpointError
from wal import VClock, WalError, fsync_path
from wal.segment import list_segments

REPLAY_FLUSH_ROWS = 1000
PROGRESS_ROWS = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedRow:
    """A row `--skip-failed` held without its changes, and why it could not be applied."""

    origin: int
    lsn: int
    txn_id: int
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}:{self.lsn} (txn {self.txn_id}): {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoreResult:
    target: Path
    base: str
    base_vclock: dict[int, int]
    bound: str
    vclock: dict[int, int]
    applied: int
    held: int
    """Rows read that the copy held already: in the base, or read again from another WAL."""
    after_bound: int
    failed: tuple[FailedRow, ...]
    warnings: tuple[str, ...]
    identity: Identity
    digest: dict[str, int]
    """`checkpoint.digest` of the copy, local tables excluded, to compare with other replays."""

    def summary(self) -> str:
        me = self.identity
        lines = [
            f"restored {self.target} from {self.base} at vclock {self.base_vclock}",
            f"bound: {self.bound}",
            f"vclock reached: {self.vclock}",
            f"rows: {self.applied} applied, {self.held} held already, {self.after_bound} after the bound, "
            f"{len(self.failed)} failed and skipped",
            *(f"skipped {row}" for row in self.failed),
            *(f"warning: {warning}" for warning in self.warnings),
            f"the copy is replica set {me.replicaset_uuid}, instance {me.instance_uuid}, id {me.instance_id}: "
            "a set of its own, following no member",
            f"serve it with: replicaset serve --data-dir {self.target} --read-only --listen HOST:PORT",
        ]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Source:
    """What `--from` gives: a data directory's WAL and checkpoints, or one checkpoint file."""

    path: Path
    wal_dir: Path | None
    checkpoints: list[tuple[Path, VClock]]
    checkpoint_given: bool
    local_tables: frozenset[str]


def _quiet(line: str) -> None:
    """The default progress callback: a library call prints nothing."""


def restore(
    source: Path,
    target: Path,
    *,
    wals: Sequence[Path] = (),
    bound: Bound | None = None,
    skip_failed: bool = False,
    progress: Callable[[str], None] = _quiet,
) -> RestoreResult:
    """Build `target` (NEW_DIR) from `source` (a data directory or a checkpoint file) and the
    WALs in `wals` (WAL or data directories), up to `bound` (every row the WALs hold when None).
    Raises `RestoreError` when the inputs cannot give the copy, and its subclasses
    `BoundNotReached` and `ReplayStopped`; NEW_DIR is then left as it was."""
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RestoreError(f"--to {target} exists and is not an empty directory: restore builds a new data directory")
    src = _read_source(Path(source))
    wal_dirs = [_wal_dir(Path(directory)) for directory in wals]
    history = History()
    own_span = _read_wal(history, src.wal_dir, local_rows=True, progress=progress) if src.wal_dir else None
    for wal_dir in wal_dirs:
        _read_wal(history, wal_dir, local_rows=False, progress=progress)
    stamp: int | None = None
    cut: dict[int, int] = {}
    bound_text = "none: every row the WALs hold"
    if bound is not None:
        stamp = bound.stamp(history)
        cut = history.cut(stamp)
        bound_text = f"{bound} (commit stamp {stamp}, {stamp_time(stamp)})"
    base_path, base_vclock = _choose_base(src, own_span, cut)
    reached = history.reach(base_vclock, cut)
    gaps = history.missing(base_vclock, reached)
    if gaps:
        raise RestoreError(
            f"the WALs given lack rows between the base ({base_path or 'an empty database'} at {base_vclock}) "
            f"and the bound: {', '.join(f'{o}:{first}..{o}:{last}' for o, first, last in gaps)}; a gap is never "
            "papered over: give a WAL that holds them (--wal), or a checkpoint that does (--from)")
    warnings = list(history.warnings)
    if stamp is not None and base_path is not None:
        warnings.extend(_unplaced(history, base_vclock, stamp))
    origins = history.origins() | {o for o, _ in base_vclock.items()}
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.restore-", dir=target.parent))
    try:
        # The engine's id marks nothing it stores; the copy's own is chosen once its
        # `_cluster` is known.
        engine = open_engine_at(scratch, base_path, base_vclock, instance_id=copy_instance_id(origins),
                                local_tables=src.local_tables)
        try:
            applied, failed = _replay(engine, history, base_vclock, reached, skip_failed=skip_failed,
                                      progress=progress)
            vclock = engine.vclock.to_dict()
            identity = new_identity(copy_instance_id(origins | _cluster_ids(engine)))
            digest = engine.table_digest()
            engine.wal.sync()
        finally:
            engine.close()
        below_base = history.count(VClock(), base_vclock)
        result = RestoreResult(
            target=target, base=str(base_path or "an empty database"), base_vclock=base_vclock.to_dict(),
            bound=bound_text, vclock=vclock, applied=applied, held=below_base + history.copies,
            after_bound=history.size() - below_base - history.count(base_vclock, reached),
            failed=tuple(failed), warnings=tuple(warnings), identity=identity, digest=digest)
        write_copy_files(scratch, identity, local_tables=src.local_tables,
                         provenance=_provenance(src, wal_dirs, result))
        if target.exists():
            target.rmdir()
        os.rename(scratch, target)
        fsync_path(target.parent)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return result


def _read_source(path: Path) -> _Source:
    if path.is_file():
        try:
            vclock = checkpoints.vclock_of(path)
        except CheckpointError as exc:
            raise RestoreError(f"--from {path} is not a checkpoint (a SQLite file whose _rs_vclock table is its "
                               f"vclock): {exc}") from exc
        return _Source(path=path, wal_dir=None, checkpoints=[(path, vclock)], checkpoint_given=True,
                       local_tables=frozenset())
    if not (path / "wal").is_dir():
        raise RestoreError(f"--from {path} is neither a data directory (with wal/) nor a checkpoint file")
    try:
        listing = checkpoints.listing(path / "snap")
        config = path / CONFIG_FILE
        local_tables = frozenset(configuration.load(config).local_tables) if config.exists() else frozenset()
    except (apsw.Error, CheckpointError, configuration.ConfigError) as exc:
        raise RestoreError(f"--from {path}: {exc}") from exc
    return _Source(path=path, wal_dir=path / "wal", checkpoints=listing, checkpoint_given=False,
                   local_tables=local_tables)


def _wal_dir(directory: Path) -> Path:
    if (directory / "wal").is_dir():
        return directory / "wal"
    if directory.is_dir() and list_segments(directory):
        return directory
    raise RestoreError(f"--wal {directory} is neither a data directory (with wal/) nor a WAL directory "
                       "(with %020d.wal segments)")


def _read_wal(history: History, wal_dir: Path, *, local_rows: bool,
              progress: Callable[[str], None]) -> tuple[VClock, VClock]:
    """Read one WAL into the history, refusing damage as recovery does."""
    try:
        start, end = history.add_wal(wal_dir, local_rows=local_rows)
    except WalError as exc:
        raise RestoreError(f"cannot read the WAL in {wal_dir}: {exc}") from exc
    progress(f"read {wal_dir}: vclock {start} to {end}")
    return start, end


def _choose_base(src: _Source, own_span: tuple[VClock, VClock] | None,
                 cut: Mapping[int, int]) -> tuple[Path | None, VClock]:
    """The checkpoint given, or the data directory's newest one its WAL continues, holding no
    row past the bound; an empty database when it has none."""

    def within(vclock: VClock) -> bool:
        return all(vclock.get(origin) <= lsn for origin, lsn in cut.items())

    if src.checkpoint_given:
        path, vclock = src.checkpoints[0]
        past = [f"{o}:{lsn + 1}" for o, lsn in sorted(cut.items()) if vclock.get(o) > lsn]
        if past:
            raise RestoreError(f"checkpoint {path} (vclock {vclock}) already holds rows committed after the bound "
                               f"(from {', '.join(past)}): give an older checkpoint, or a later bound")
        return path, vclock
    assert own_span is not None, "a data directory has a WAL"
    return newest_base(src.checkpoints, *own_span, within=within)


def _unplaced(history: History, base: VClock, stamp: int) -> list[str]:
    """The base's rows whose commit the WALs do not show, so that nothing says whether they
    come before the bound: they are taken as before it, and the operator is told."""
    warnings = []
    for origin, lsn in base.items():
        following = history.stamp_at(origin, lsn + 1)
        if history.stamp_at(origin, lsn) is None and (following is None or following > stamp):
            warnings.append(f"the base holds origin {origin} up to {origin}:{lsn}, which no WAL given holds: "
                            "nothing shows when those rows were committed, they are taken as before the bound")
    return warnings


def _replay(engine: Engine, history: History, low: VClock, high: VClock, *, skip_failed: bool,
            progress: Callable[[str], None]) -> tuple[int, list[FailedRow]]:
    total = history.count(low, high)
    progress(f"replaying {total} rows from {low} to {high}")
    applied, failed = 0, []
    with RowReader() as reader:
        for done, row in enumerate(history.commit_order(low, high), 1):
            record = reader.record(row)
            where = f"row {row.origin}:{row.lsn} (txn {row.txn_id})"
            try:
                applied += engine.apply(record, own_allowed=True)
            except GapError as exc:
                raise ReplayStopped(f"replay stopped at {where}: {exc}; a gap is never papered over",
                                    origin=row.origin, lsn=row.lsn, txn_id=row.txn_id) from exc
            except ApplyError as exc:
                if not skip_failed:
                    raise ReplayStopped(f"replay stopped at {where}, which cannot be applied: {exc}; "
                                        "--skip-failed skips it and goes on",
                                        origin=row.origin, lsn=row.lsn, txn_id=row.txn_id) from exc
                engine.skip(record)
                failed.append(FailedRow(origin=row.origin, lsn=row.lsn, txn_id=row.txn_id, reason=str(exc)))
                progress(f"skipped {failed[-1]}")
            if done % REPLAY_FLUSH_ROWS == 0:
                engine.flush()
            if done % PROGRESS_ROWS == 0:
                progress(f"{done}/{total} rows replayed, at vclock {engine.pending_vclock}")
    engine.flush()
    return applied, failed


def _cluster_ids(engine: Engine) -> set[int]:
    """The ids of the copy's `_cluster`: the members of the original set."""
    found = engine.query("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (CLUSTER_TABLE,))
    assert found is not None, "a SELECT never writes"
    if not found.rows:
        return set()
    listing = engine.query(f"SELECT id FROM {CLUSTER_TABLE}")
    assert listing is not None, "a SELECT never writes"
    return {int(instance_id) for (instance_id,) in listing.rows}


def _provenance(src: _Source, wal_dirs: list[Path], result: RestoreResult) -> dict[str, str | list[str] | dict[int, int]]:
    provenance: dict[str, str | list[str] | dict[int, int]] = {
        "source": str(src.path.resolve()),
        "wals": [str(w.resolve()) for w in wal_dirs],
        "base": result.base,
        "base_vclock": result.base_vclock,
        "bound": result.bound,
        "vclock": result.vclock,
        "skipped_rows": [str(row) for row in result.failed],
        "restored_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    try:
        provenance["source_replicaset_uuid"] = Identity.load(src.path).replicaset_uuid
    except IdentityError:
        pass  # a checkpoint file, or a data directory without its identity: nothing to name
    return provenance
