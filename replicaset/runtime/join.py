"""The joiner's side of `replicaset join`: an id, a checkpoint, a log starting there."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import trio
from tqdm import tqdm

from replicaset.identity import Identity, save_pending_registration
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.runtime.logging import configure, get_logger
from replicaset.runtime.node import CLEAN_STOP_FILE
from replicaset.runtime.links import PeerError
from replicaset.runtime.transfer import fetch_checkpoint
from wal import Wal

PROGRESS_LOG_STEP = 0.1


def join(
    data_dir: Path, *, replicaset_uuid: str, peers: list[str], listen: str, instance_uuid: str | None = None,
    anonymous: bool = False,
) -> Identity | None:
    """Try each peer in turn; None when none of them could serve the join. A re-join passes
    the instance's own UUID and so keeps its id. An `anonymous` follower is registered
    nowhere: it gets the checkpoint only, and id 0."""
    configure()
    log = get_logger(None, replicaset_uuid=replicaset_uuid)
    instance_uuid = instance_uuid or str(uuid.uuid4())
    for peer in peers:
        bar = tqdm(total=0, unit="B", unit_scale=True, desc=f"join via {peer}", disable=not sys.stderr.isatty())
        logged = [0.0]

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)
            # `total` is the peer's word (a chunk's SIZE): it may be 0, or less than `done`.
            if not sys.stderr.isatty() and total > 0 and (done >= total or done / total >= logged[0] + PROGRESS_LOG_STEP):
                logged[0] = done / total
                log.info("join_progress", peer=peer, bytes=done, total_bytes=total, percent=round(100 * done / total))

        try:
            joined = trio.run(lambda: fetch_checkpoint(
                peer, replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid, listen=listen,
                target=data_dir / "db.sqlite", progress=progress, anonymous=anonymous,
            ))
        except (OSError, PeerError, RemoteProtocolError, trio.TooSlowError) as exc:
            log.error("join_failed", peer=peer, error=str(exc) or type(exc).__name__)
            continue
        finally:
            bar.close()
        # The log must start where the checkpoint ends after an OS crash too: lost, the
        # checkpoint would count as ahead of the log at start and be dropped.
        with Wal.open(data_dir / "wal", start_vclock=joined.vclock) as wal:
            wal.sync()
        registration = joined.registration
        if not anonymous:
            # Before the identity, which marks the join done: a joiner that stopped in between
            # must not take writes before a majority holds its row (DESIGN 4.7).
            save_pending_registration(data_dir, registration.pending)
        identity = Identity(replicaset_uuid=replicaset_uuid, instance_uuid=instance_uuid,
                            instance_id=registration.instance_id, anonymous=anonymous)
        identity.save(data_dir)
        (data_dir / CLEAN_STOP_FILE).touch()  # a fresh member has no rows of its own to lose
        log.info("joined", peer=peer, instance_id=registration.instance_id,
                 registration_row=[registration.pending.origin, registration.pending.lsn],
                 barrier=dict(registration.pending.barrier),
                 vclock=joined.vclock.to_dict(), bytes=joined.size_bytes)
        return identity
    return None
