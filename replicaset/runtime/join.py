"""The joiner's side of `replicaset join`: an id, a checkpoint, a log starting there.

A transfer that breaks after it kept something is asked for again at once, from where it
stopped (`transfer.py`), up to `JOIN_RESUMES_MAX` times in a row for one peer; a join
started again after the process died (`replicaset join` again, or `replicaset serve`, which
finishes it) resumes too, under the same instance UUID (`joining.toml`), and so gets the
same id."""

from __future__ import annotations

import ssl
import sys
import time
import uuid
from pathlib import Path

import trio
from structlog.typing import FilteringBoundLogger
from tqdm import tqdm

from replicaset.identity import Identity, Joining, JoinUpstream, save_pending_registration
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.runtime.logging import configure, get_logger
from replicaset.runtime.node import CLEAN_STOP_FILE
from replicaset.runtime.links import PeerError
from replicaset.runtime.transfer import Joined, TransferStart, fetch_checkpoint
from replicaset.storage import checkpoint as checkpoints
from replicaset.storage.local_tables import carry_local_tables
from wal import Wal

PROGRESS_LOG_STEP = 0.1
# Broken transfers in a row from one peer, each of which kept more, before the next peer:
# a flaky link gets there chunk by chunk, a peer that breaks before any chunk does not loop.
JOIN_RESUMES_MAX = 20
RESUME_PAUSE_S = 0.2


def join(
    data_dir: Path, *, replicaset_uuid: str, peers: list[str], listen: str, instance_uuid: str | None = None,
    anonymous: bool = False, secret: bytes | None = None, tls: ssl.SSLContext | None = None,
    local_from: Path | None = None, local_tables: frozenset[str] = frozenset(),
) -> Identity | None:
    """Try each peer in turn; None when none of them could serve the join. A re-join passes
    the instance's own UUID and so keeps its id; a join started again after a crash takes
    the UUID its first attempt registered. An `anonymous` follower is registered nowhere:
    it gets the checkpoint only, and id 0. With the set's `secret`, each peer must prove
    it holds it too; with `tls`, each is dialed over TLS (docs/security.md). A re-join
    passes the data directory it left (`local_from`): its `local_tables` replace the peer's
    in the checkpoint before it is installed, so they stay the member's own."""
    configure()
    log = get_logger(None, replicaset_uuid=replicaset_uuid)
    before = Joining.load(data_dir)
    if instance_uuid is None and before is not None and before.replicaset_uuid == replicaset_uuid:
        instance_uuid = before.instance_uuid
    instance_uuid = instance_uuid or str(uuid.uuid4())
    Joining(replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid, peers=peers, anonymous=anonymous).save(data_dir)
    target = data_dir / "db.sqlite"
    joined: Joined | None = None
    for peer in peers:
        for _ in range(JOIN_RESUMES_MAX + 1):
            chunks = [0]  # kept by this attempt
            try:
                joined = _fetch(peer, log, chunks, replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid,
                                listen=listen, target=target, anonymous=anonymous, secret=secret, tls=tls)
                break
            except (OSError, PeerError, RemoteProtocolError, trio.TooSlowError) as exc:
                log.error("join_failed", peer=peer, error=str(exc) or type(exc).__name__, chunks_kept=chunks[0],
                          retry=bool(chunks[0]))
                if not chunks[0]:
                    break
                time.sleep(RESUME_PAUSE_S)
        if joined is not None:
            break
    if joined is None:
        return None
    if local_from is not None:
        carried = carry_local_tables(local_from / "db.sqlite", target, local_tables)
        log.info("local_tables_carried", source=str(local_from), rows=carried)
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
    JoinUpstream(uuid=joined.peer_uuid, address=peer).save(data_dir)
    identity = Identity(replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid,
                        instance_id=registration.instance_id, anonymous=anonymous)
    identity.save(data_dir)
    Joining.clear(data_dir)
    (data_dir / CLEAN_STOP_FILE).touch()  # a fresh member has no rows of its own to lose
    log.info("joined", peer=peer, instance_id=registration.instance_id,
             registration_row=[registration.pending.origin, registration.pending.lsn],
             barrier=dict(registration.pending.barrier),
             vclock=joined.vclock.to_dict(), bytes=joined.size_bytes, checkpoint=kept.name)
    return identity


def _fetch(peer: str, log: FilteringBoundLogger, chunks: list[int], *, replicaset_uuid: str, instance_uuid: str,
           listen: str, target: Path, anonymous: bool, secret: bytes | None, tls: ssl.SSLContext | None) -> Joined:
    """One JOIN through `peer`, counting the chunks it keeps in `chunks[0]`, with a progress
    bar on a terminal, `join_progress` lines every 10 % otherwise, and a line saying where
    the transfer began when it resumed or dropped what was kept."""
    bar = tqdm(total=0, unit="B", unit_scale=True, desc=f"join via {peer}", disable=not sys.stderr.isatty())
    logged = [0.0]

    def started(start: TransferStart) -> None:
        bar.total = start.size
        bar.update(start.offset - bar.n)
        logged[0] = start.offset / start.size if start.size else 0.0
        if start.offset:
            log.info("join_resumed", peer=peer, offset=start.offset, total_bytes=start.size,
                     percent=round(100 * logged[0]))
        if start.dropped_bytes:
            log.warning("join_kept_dropped", peer=peer, dropped_bytes=start.dropped_bytes, total_bytes=start.size,
                        reason="the member serves another checkpoint, or refused the kept prefix (its join_serving "
                               "line says why): the transfer starts from byte 0")

    def progress(done: int, total: int) -> None:
        chunks[0] += 1
        bar.total = total
        bar.update(done - bar.n)
        # `total` is the peer's word (a chunk's SIZE): it may be 0, or less than `done`.
        if not sys.stderr.isatty() and total > 0 and (done >= total or done / total >= logged[0] + PROGRESS_LOG_STEP):
            logged[0] = done / total
            log.info("join_progress", peer=peer, bytes=done, total_bytes=total, percent=round(100 * done / total))

    try:
        return trio.run(lambda: fetch_checkpoint(
            peer, replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid, listen=listen, target=target,
            progress=progress, started=started, anonymous=anonymous, secret=secret, tls=tls,
        ))
    finally:
        bar.close()
