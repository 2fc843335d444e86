"""What the audit reads: each DIR is a member's data directory or a bare WAL directory.

A data directory holds `wal/`, and may hold `instance.toml` (the member's id), `snap/`
(checkpoints) and `db.sqlite` (the final tables); with `db.sqlite` every check runs, without it
checks 1-4. A bare WAL directory holds `%020d.wal` segments and gets checks 1-4.
Everything here runs on the driver and reads only segment headers and checkpoint vclocks.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from wal import VClock, WalError
from wal.segment import list_segments, map_segment, read_segment_header


class AuditInputError(Exception):
    """A DIR that is not a data directory or a WAL directory, or whose headers cannot be read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    path: Path
    index: int
    start_vclock: dict[int, int]
    size_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    path: Path
    vclock: dict[int, int]


@dataclass(slots=True, kw_only=True)
class MemberInput:
    name: str
    directory: Path
    wal_dir: Path
    kind: str
    """`member` (data directory with db.sqlite: all checks) or `wal` (checks 1-4)."""
    instance_id: int | None
    segments: list[Segment]
    checkpoints: list[Checkpoint] = field(default_factory=list)
    db_path: Path | None = None
    local_tables: tuple[str, ...] = ()
    header_errors: list[str] = field(default_factory=list)

    @property
    def wal_start(self) -> dict[int, int]:
        """The GC horizon: the start vclock of the first segment (empty for an empty log)."""
        return dict(self.segments[0].start_vclock) if self.segments else {}

    @property
    def horizon(self) -> dict[int, int]:
        """Per origin, the LSN below which rows may be absent: the WAL start or a checkpoint."""
        merged = VClock(self.wal_start)
        for checkpoint in self.checkpoints:
            merged = merged.merge(VClock(checkpoint.vclock))
        return merged.to_dict()


def _read_instance_id(directory: Path) -> int | None:
    path = directory / "instance.toml"
    if not path.exists():
        return None
    try:
        return int(tomllib.loads(path.read_text())["instance_id"])
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError) as exc:
        raise AuditInputError(f"{path} is unreadable: {exc}") from exc


def _read_local_tables(directory: Path) -> tuple[str, ...]:
    path = directory / "config.toml"
    if not path.exists():
        return ()
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return ()
    tables = doc.get("local_tables") or doc.get("sql", {}).get("local_tables") or []
    return tuple(str(t) for t in tables)


def _read_segments(wal_dir: Path, errors: list[str]) -> list[Segment]:
    segments = []
    for index, path in enumerate(list_segments(wal_dir)):
        start: dict[int, int] = {}
        try:
            with map_segment(path) as buf:
                vclock, _ = read_segment_header(buf)
            start = vclock.to_dict()
        except WalError as exc:
            errors.append(f"{path}: bad segment header: {exc}")
        segments.append(
            Segment(path=path, index=index, start_vclock=start, size_bytes=path.stat().st_size)
        )
    return segments


def _read_checkpoints(snap_dir: Path) -> list[Checkpoint]:
    if not snap_dir.is_dir():
        return []
    from replicaset.storage import checkpoint as checkpoints  # apsw only where needed

    try:
        return [Checkpoint(path=p, vclock=vc.to_dict()) for p, vc in checkpoints.listing(snap_dir)]
    except Exception as exc:  # apsw raises its own hierarchy for a damaged file
        raise AuditInputError(f"cannot read the checkpoints in {snap_dir}: {exc}") from exc


def discover(directories: list[Path]) -> list[MemberInput]:
    """One `MemberInput` per DIR, named after the directory (made unique when names repeat)."""
    members: list[MemberInput] = []
    names: set[str] = set()
    for directory in directories:
        directory = Path(directory).resolve()
        if not directory.is_dir():
            raise AuditInputError(f"{directory} is not a directory")
        name = (directory.parent.name if directory.name == "wal" else directory.name) or str(directory)
        while name in names:
            name = f"{name}'"
        names.add(name)
        errors: list[str] = []
        if (directory / "wal").is_dir():
            db = directory / "db.sqlite"
            members.append(
                MemberInput(
                    name=name,
                    directory=directory,
                    wal_dir=directory / "wal",
                    kind="member" if db.exists() else "wal",
                    instance_id=_read_instance_id(directory),
                    segments=_read_segments(directory / "wal", errors),
                    checkpoints=_read_checkpoints(directory / "snap"),
                    db_path=db if db.exists() else None,
                    local_tables=_read_local_tables(directory),
                    header_errors=errors,
                )
            )
        elif list_segments(directory):
            members.append(
                MemberInput(
                    name=name,
                    directory=directory,
                    wal_dir=directory,
                    kind="wal",
                    instance_id=_read_instance_id(directory.parent)
                    if directory.name == "wal"
                    else None,
                    segments=_read_segments(directory, errors),
                    header_errors=errors,
                )
            )
        else:
            raise AuditInputError(
                f"{directory} is neither a data directory (with wal/) nor a WAL directory "
                "(with %020d.wal segments)"
            )
    return members
