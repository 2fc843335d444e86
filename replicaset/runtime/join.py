"""The joiner's side of `replicaset join`: an id, a checkpoint, a log starting there.

A transfer that breaks after it kept something is asked for again at once, from where it
stopped (`transfer.py`), up to `JOIN_RESUMES_MAX` times in a row for one peer; a join
started again after the process died (`replicaset join` again, or `replicaset serve`, which
finishes it) resumes too, under the same instance UUID (`joining.toml`), and so gets the
same id.

A join that fails says so on the terminal in one line, what failed and what to do
(`JoinFailure`): when it can go on, how (what the data directory keeps); when nothing can
have been registered and nothing was kept, that it can simply be run again, with the
directory it made removed. Its log lines carry the joiner's id in `instance_id` from the
first chunk on (the member serving the JOIN registered it before); before that, the only
name the joiner has, its instance UUID."""

from __future__ import annotations

import shutil
import ssl
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio
from structlog.typing import FilteringBoundLogger
from tqdm import tqdm

from replicaset.config import Config, dial_address
from replicaset.identity import Identity, Joining, JoinUpstream, save_pending_registration
from replicaset.iproto.constants import ErrorCode
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.runtime.logging import configure, get_logger
from replicaset.runtime import repairs
from replicaset.runtime.environment import TCP, Network
from replicaset.runtime.node import CLEAN_STOP_FILE
from replicaset.runtime.links import PeerError
from replicaset.runtime.peer_access import load_secret
from replicaset.runtime.tls import client_context
from replicaset.runtime.transfer import Joined, KeptCheckpoint, TransferStart, fetch_checkpoint
from replicaset.storage import checkpoint as checkpoints
from replicaset.storage.local_tables import carry_local_tables
from wal import Wal

PROGRESS_LOG_STEP = 0.1
# Broken transfers in a row from one peer, each of which kept more, before the next peer:
# a flaky link gets there chunk by chunk, a peer that breaks before any chunk does not loop.
JOIN_RESUMES_MAX = 20
RESUME_PAUSE_S = 0.2
# A member's refusals that come before it registers anyone (docs/security.md: the peer
# gate, then the replica-set UUID check).
REFUSED_BEFORE_REGISTRATION = frozenset({ErrorCode.REPLICASET_UUID_MISMATCH, ErrorCode.ACCESS_DENIED})
# What a JOIN attempt may fail with; anything else is a bug, and its traceback says where.
ATTEMPT_FAILURES = (OSError, PeerError, RemoteProtocolError, trio.TooSlowError, trio.BrokenResourceError)


def join(data_dir: Path, **options: Any) -> Identity | None:
    """`join_async` from a command: its own event loop, on the machine's network."""
    configure()
    return trio.run(partial(join_async, data_dir, network=TCP, **options))


async def join_async(
    data_dir: Path, *, replicaset_uuid: str, peers: list[str], listen: str, network: Network,
    instance_uuid: str | None = None, anonymous: bool = False, secret: bytes | None = None,
    tls: ssl.SSLContext | None = None, made_dir: bool = False, local_from: Path | None = None,
    local_tables: frozenset[str] = frozenset(),
) -> Identity | None:
    """Try each peer in turn; None when none of them could serve the join, after a line on
    stderr saying what failed and what to do. A re-join passes the instance's own UUID and
    so keeps its id; a join started again after a crash takes the UUID its first attempt
    registered. An `anonymous` follower is registered nowhere: it gets the checkpoint only,
    and id 0. With the set's `secret`, each peer must prove it holds it too; with `tls`,
    each is dialed over TLS (docs/security.md). `made_dir`: the caller made `data_dir` for
    this join, and it is removed again when the join leaves nothing worth keeping. A
    re-join passes the data directory it left (`local_from`): its `local_tables` replace the
    peer's in the checkpoint before it is installed, so they stay the member's own."""
    before = Joining.load(data_dir)
    if instance_uuid is None and before is not None and before.replicaset_uuid == replicaset_uuid:
        instance_uuid = before.instance_uuid
    failure = JoinFailure(maybe_registered=instance_uuid is not None)  # a UUID already used may be registered
    instance_uuid = instance_uuid or str(uuid.uuid4())
    state = _Attempt(get_logger(0 if anonymous else instance_uuid, replicaset_uuid=replicaset_uuid,
                                instance_uuid=instance_uuid))
    Joining(replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid, peers=peers, anonymous=anonymous).save(data_dir)
    target = data_dir / "db.sqlite"
    joined: Joined | None = None
    for peer in peers:
        for _ in range(JOIN_RESUMES_MAX + 1):
            state.chunks, state.asked = 0, False
            try:
                joined = await _fetch(peer, state, replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid,
                                      listen=listen, target=target, anonymous=anonymous, secret=secret, tls=tls,
                                      network=network)
                break
            except ATTEMPT_FAILURES as exc:
                failure.add(peer, exc, asked=state.asked, anonymous=anonymous)
                state.log.error("join_failed", peer=peer, error=failure.errors[peer], chunks_kept=state.chunks,
                                retry=bool(state.chunks))
                if not state.chunks:
                    break
                await trio.sleep(RESUME_PAUSE_S)
        if joined is not None:
            break
    if joined is None:
        failure.settle(data_dir, target, made_dir=made_dir, log=state.log)
        print(f"replicaset join: {failure.advice(data_dir, instance_uuid)}", file=sys.stderr)
        return None
    if local_from is not None:
        carried = carry_local_tables(local_from / "db.sqlite", target, local_tables)
        state.log.info("local_tables_carried", source=str(local_from), rows=carried)
    # The log must start where the checkpoint ends after an OS crash too: lost, the
    # checkpoint would count as ahead of the log at start and be dropped.
    with Wal.open(data_dir / "wal", start_vclock=joined.vclock) as wal:
        wal.sync()
    kept = checkpoints.adopt(target, data_dir / "snap")
    registration = joined.registration
    if not anonymous:
        # Before the identity, which marks the join done: a joiner that stopped in between
        # must not take writes before a majority holds its row (docs/design/README.md §4.7).
        save_pending_registration(data_dir, registration.pending)
    through = JoinUpstream(uuid=joined.peer_uuid, address=peer,
                           instance_id=next((i for i, u, _ in joined.registered if u == joined.peer_uuid), 0))
    others = [JoinUpstream(uuid=u, address=a, instance_id=i) for i, u, a in joined.registered
              if i != registration.instance_id and u != joined.peer_uuid and a]
    JoinUpstream.save_all(data_dir, [through, *others])
    identity = Identity(replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid,
                        instance_id=registration.instance_id, anonymous=anonymous)
    identity.save(data_dir)
    Joining.clear(data_dir)
    (data_dir / CLEAN_STOP_FILE).touch()  # a fresh member has no rows of its own to lose
    state.log.info("joined", peer=peer, instance_id=registration.instance_id,
                   registration_row=[registration.pending.origin, registration.pending.lsn],
                   barrier=dict(registration.pending.barrier),
                   vclock=joined.vclock.to_dict(), bytes=joined.size_bytes, checkpoint=kept.name)
    return identity


def backup_of(data_dir: Path) -> Path:
    """Where a re-join keeps the data directory it left, until the next re-join."""
    return data_dir.with_name(data_dir.name + ".before-rejoin")


async def rejoin_async(data_dir: Path, config: Config, identity: Identity, peer: str, *, network: Network,
                       kept: Sequence[str] = ()) -> Identity | None:
    """A member too far behind to catch up from the log (`Node.rejoin`) joins again through
    `peer` under the same UUID, and so the same id: its data directory goes aside
    (`backup_of`), taking along what is the member's own: the files `kept` (its config),
    its counts of repairs, and its local tables (carried into the checkpoint)."""
    backup = backup_of(data_dir)
    if backup.exists():
        shutil.rmtree(backup)
    data_dir.rename(backup)
    data_dir.mkdir()
    for name in (*kept, repairs.FILE_NAME):
        if (backup / name).exists():
            shutil.copyfile(backup / name, data_dir / name)
    return await join_async(data_dir, replicaset_uuid=identity.replicaset_uuid, peers=[dial_address(config, peer)],
                            listen=config.listen, network=network, instance_uuid=identity.instance_uuid,
                            anonymous=identity.anonymous, secret=load_secret(config), tls=client_context(config),
                            local_from=backup, local_tables=frozenset(config.local_tables))


@dataclass
class _Attempt:
    """What the attempt under way learned: its logger (bound to the joiner's id once the
    member names it), the chunks it kept, whether its JOIN went out."""

    log: FilteringBoundLogger
    chunks: int = 0
    asked: bool = False


@dataclass
class JoinFailure:
    """Why no peer served the join, and whether it can go on: it can when a member may
    have registered the joiner's UUID (a JOIN went out and was not refused before the
    registration, or the UUID was used before) or checkpoint bytes are kept."""

    maybe_registered: bool
    errors: dict[str, str] = field(default_factory=dict)  # peer -> its last error
    unreachable: list[str] = field(default_factory=list)  # peers that could not be connected to
    other_set: bool = False  # a member said it belongs to another replica set
    kept_bytes: int = 0
    size: int = 0
    removed: bool = False

    def add(self, peer: str, exc: BaseException, *, asked: bool, anonymous: bool) -> None:
        """An attempt through `peer` failed with `exc`, after its JOIN went out if `asked`."""
        self.errors[peer] = str(exc) or type(exc).__name__
        code = exc.code if isinstance(exc, PeerError) else None
        if not asked and isinstance(exc, (OSError, trio.TooSlowError)) and peer not in self.unreachable:
            self.unreachable.append(peer)
        self.other_set |= code == ErrorCode.REPLICASET_UUID_MISMATCH
        self.maybe_registered |= asked and not anonymous and code not in REFUSED_BEFORE_REGISTRATION

    @property
    def resumable(self) -> bool:
        return self.maybe_registered or self.kept_bytes > 0

    def settle(self, data_dir: Path, target: Path, *, made_dir: bool, log: FilteringBoundLogger) -> None:
        """Count what is kept; when the join cannot go on, drop what it left (the data
        directory itself when the caller made it for this join); log the outcome."""
        kept = KeptCheckpoint.load(target)
        self.kept_bytes, self.size = kept.offset, kept.size
        if not self.resumable:
            kept.discard()
            Joining.clear(data_dir)
            if made_dir:
                shutil.rmtree(data_dir)
                self.removed = True
        log.error("join_gave_up", errors=self.errors, resumable=self.resumable, kept_bytes=self.kept_bytes,
                  total_bytes=self.size, data_dir=str(data_dir), removed=self.removed)

    def advice(self, data_dir: Path, instance_uuid: str) -> str:
        """One line: what failed, then what to do."""
        what = "; ".join(f"{peer}: {error}" for peer, error in self.errors.items())
        hints = []
        if self.unreachable:
            hints.append(f"check that a member runs at {', '.join(self.unreachable)} (--peer)")
        if self.other_set:
            hints.append("check --uuid: the set's UUID is box.info.cluster.uuid on any of its members")
        hint = f"{'; '.join(hints)}; " if hints else ""
        if not self.resumable:
            removed = f", and {data_dir} was removed" if self.removed else ""
            return f"failed: {what}. Nothing was registered or kept{removed}: {hint}then run the same command again"
        kept = f" and {self.kept_bytes} of {self.size} bytes of the checkpoint" if self.kept_bytes else ""
        return (f"failed: {what}. {hint}The join can go on where it stopped once a member is reachable and a majority "
                f"of the set's members are up: {data_dir} keeps the instance UUID {instance_uuid}{kept}; run "
                f"`replicaset serve --data-dir {data_dir}` to resume it through the same peers, or `replicaset join` "
                "again with the same --uuid and --data-dir")


async def _fetch(peer: str, state: _Attempt, *, replicaset_uuid: str, instance_uuid: str, listen: str, target: Path,
                 anonymous: bool, secret: bytes | None, tls: ssl.SSLContext | None, network: Network) -> Joined:
    """One JOIN through `peer`, counting the chunks it keeps in `state`, with a progress bar
    on a terminal, `join_progress` lines every 10 % otherwise, and a line saying where the
    transfer began when it resumed or dropped what was kept."""
    bar = tqdm(total=0, unit="B", unit_scale=True, desc=f"join via {peer}", disable=not sys.stderr.isatty())
    logged = [0.0]

    def asked() -> None:
        state.asked = True

    def started(start: TransferStart) -> None:
        if start.instance_id is not None:
            state.log = state.log.bind(instance_id=start.instance_id)
        bar.total = start.size
        bar.update(start.offset - bar.n)
        logged[0] = start.offset / start.size if start.size else 0.0
        if start.offset:
            state.log.info("join_resumed", peer=peer, offset=start.offset, total_bytes=start.size,
                           percent=round(100 * logged[0]))
        if start.dropped_bytes:
            state.log.warning("join_kept_dropped", peer=peer, dropped_bytes=start.dropped_bytes, total_bytes=start.size,
                              reason="the member serves another checkpoint, or refused the kept prefix (its "
                                     "join_serving line says why): the transfer starts from byte 0")

    def progress(done: int, total: int) -> None:
        state.chunks += 1
        bar.total = total
        bar.update(done - bar.n)
        # `total` is the peer's word (a chunk's SIZE): it may be 0, or less than `done`.
        if not sys.stderr.isatty() and total > 0 and (done >= total or done / total >= logged[0] + PROGRESS_LOG_STEP):
            logged[0] = done / total
            state.log.info("join_progress", peer=peer, bytes=done, total_bytes=total, percent=round(100 * done / total))

    try:
        return await fetch_checkpoint(
            peer, replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid, listen=listen, target=target,
            progress=progress, started=started, asked=asked, anonymous=anonymous, secret=secret, tls=tls,
            network=network,
        )
    finally:
        bar.close()
