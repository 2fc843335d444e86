"""`instance.toml`: who this data directory is (replica set, instance, id)."""

from __future__ import annotations

import os
import tomllib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from replicaset.core.replicaset import PendingRegistration
from wal import fsync_path

T = TypeVar("T")

FILE_NAME = "instance.toml"
# Kept from the join until a majority of members hold the joiner's `_cluster` row (docs/design/README.md §4.7).
PENDING_REGISTRATION_FILE = "registration.toml"
# The member a join went through and every member registered there when it served the
# join, each followed by its UUID until `_cluster` names it: the checkpoint the joiner got
# may be old enough that the members its `_cluster` names have been replaced since
# (`JoinUpstream`).
JOIN_UPSTREAM_FILE = "join_upstream.toml"
# Kept while a join is under way (`Joining`): a join started again after a crash registers
# the same instance UUID, and so gets the same id, instead of leaving behind an id no
# instance will ever use, which would count in every majority from then on.
JOINING_FILE = "joining.toml"


class IdentityError(ValueError):
    """The data directory's identity is missing, unreadable or contradicts a flag."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Identity:
    """`anonymous`: a read-only follower (`join --anonymous`), never registered: its
    instance id is 0, the number no member has."""

    replicaset_uuid: str
    instance_uuid: str
    instance_id: int
    anonymous: bool = False

    def save(self, data_dir: Path) -> None:
        write_durably(
            data_dir / FILE_NAME,
            f'replicaset_uuid = "{self.replicaset_uuid}"\n'
            f'instance_uuid = "{self.instance_uuid}"\n'
            f"instance_id = {self.instance_id}\n"
            + ("anonymous = true\n" if self.anonymous else ""),
        )

    @classmethod
    def load(cls, data_dir: Path) -> Identity:
        path = data_dir / FILE_NAME
        try:
            doc = tomllib.loads(path.read_text())
            identity = cls(
                replicaset_uuid=str(uuid.UUID(doc["replicaset_uuid"])),
                instance_uuid=str(uuid.UUID(doc["instance_uuid"])),
                instance_id=int(doc["instance_id"]),
                anonymous=doc.get("anonymous", False) is True,
            )
        except FileNotFoundError as exc:
            raise IdentityError(f"{path} does not exist: run `replicaset bootstrap` or `replicaset join` first") from exc
        except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError) as exc:
            raise IdentityError(f"{path} is unreadable: {exc}") from exc
        if identity.anonymous and identity.instance_id != 0:
            raise IdentityError(f"{path}: an anonymous follower has instance_id 0, not {identity.instance_id}")
        if not identity.anonymous and not 1 <= identity.instance_id <= 31:
            raise IdentityError(f"{path}: instance_id {identity.instance_id} is outside 1..31")
        return identity

    @classmethod
    def exists(cls, data_dir: Path) -> bool:
        return (data_dir / FILE_NAME).exists()


def parse_uuid(text: str, what: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError as exc:
        raise IdentityError(f"{what} {text!r} is not a UUID") from exc


def write_durably(path: Path, text: str) -> None:
    """Write under a temporary name, fsync, rename, fsync the directory: a crash leaves the
    old file or the new, and once this returns an OS crash leaves the new (the rename is a
    change of the directory, durable only once the directory is fsynced)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    with open(partial, "rb") as f:
        os.fsync(f.fileno())
    os.replace(partial, path)
    fsync_path(path.parent)


def _read_if_there(path: Path, parse: Callable[[dict[str, Any]], T]) -> T | None:
    """`parse` of a small TOML file the join leaves, None when there is none: a file there
    that does not parse stops the instance with a clear message."""
    try:
        return parse(tomllib.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, KeyError, ValueError, TypeError, AttributeError, tomllib.TOMLDecodeError) as exc:
        raise IdentityError(f"{path} is unreadable: {exc}") from exc


def save_pending_registration(data_dir: Path, registration: PendingRegistration) -> None:
    """Remember, across restarts, the row that holders of our `_cluster` row reach and the
    barrier we must catch up to: until both hold, this instance neither writes nor votes."""
    barrier = "".join(f"{origin} = {lsn}\n" for origin, lsn in sorted(registration.barrier.items()))
    write_durably(data_dir / PENDING_REGISTRATION_FILE,
                  f"origin = {registration.origin}\nlsn = {registration.lsn}\n\n[barrier]\n{barrier}")


def load_pending_registration(data_dir: Path) -> PendingRegistration | None:
    return _read_if_there(data_dir / PENDING_REGISTRATION_FILE, lambda doc: PendingRegistration(
        origin=int(doc["origin"]), lsn=int(doc["lsn"]),
        barrier={int(o): int(lsn) for o, lsn in doc.get("barrier", {}).items()}))


def clear_pending_registration(data_dir: Path) -> None:
    (data_dir / PENDING_REGISTRATION_FILE).unlink(missing_ok=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class JoinUpstream:
    """A member the joiner follows by its UUID until its own `_cluster` names it: the
    member a join took its checkpoint from, and each member registered there when it
    served the join. A checkpoint may predate every member registered now (members removed
    and replaced since: `tools/chaos.py --seed 4 --faults remove-rejoin`), and its
    `_cluster` would then name only addresses where other instances answer; and the member
    the join went through may stop right after it, before the joiner has the rows that
    name the others (the same run under load)."""

    uuid: str
    address: str
    instance_id: int  # as registered there; 0: not named

    @staticmethod
    def save_all(data_dir: Path, upstreams: Sequence[JoinUpstream]) -> None:
        """`upstreams` replace those kept; none left removes the file."""
        if not upstreams:
            (data_dir / JOIN_UPSTREAM_FILE).unlink(missing_ok=True)
            return
        write_durably(data_dir / JOIN_UPSTREAM_FILE, "".join(
            f'[[upstream]]\nuuid = "{u.uuid}"\naddress = "{u.address}"\ninstance_id = {u.instance_id}\n\n'
            for u in upstreams))

    @classmethod
    def load_all(cls, data_dir: Path) -> list[JoinUpstream]:
        def parse(doc: dict[str, Any]) -> list[JoinUpstream]:
            return [cls(uuid=str(uuid.UUID(u["uuid"])), address=str(u["address"]), instance_id=int(u["instance_id"]))
                    for u in doc["upstream"]]
        return _read_if_there(data_dir / JOIN_UPSTREAM_FILE, parse) or []


@dataclass(frozen=True, kw_only=True, slots=True)
class Joining:
    """A join under way in a data directory: into which replica set, as which instance,
    through which peers. `replicaset serve` on a directory with this and no identity
    finishes the join (a re-join too, whose old directory waits aside)."""

    replicaset_uuid: str
    instance_uuid: str
    peers: list[str]
    anonymous: bool = False

    def save(self, data_dir: Path) -> None:
        """Before the first JOIN goes out: a crash after it must not lose the UUID."""
        peers = ", ".join(f'"{peer}"' for peer in self.peers)
        write_durably(data_dir / JOINING_FILE,
                      f'replicaset_uuid = "{self.replicaset_uuid}"\ninstance_uuid = "{self.instance_uuid}"\n'
                      f"peers = [{peers}]\n" + ("anonymous = true\n" if self.anonymous else ""))

    @classmethod
    def load(cls, data_dir: Path) -> Joining | None:
        def parse(doc: dict[str, Any]) -> Joining:
            peers = doc["peers"]
            if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
                raise ValueError(f"peers must be a list of HOST:PORT, got {peers!r}")
            return cls(replicaset_uuid=str(uuid.UUID(doc["replicaset_uuid"])),
                       instance_uuid=str(uuid.UUID(doc["instance_uuid"])), peers=peers,
                       anonymous=doc.get("anonymous", False) is True)

        return _read_if_there(data_dir / JOINING_FILE, parse)

    @staticmethod
    def clear(data_dir: Path) -> None:
        (data_dir / JOINING_FILE).unlink(missing_ok=True)
