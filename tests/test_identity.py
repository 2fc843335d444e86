"""`instance.toml` and the pending registration survive an OS crash once written
(docs/design/README.md §4.7, FINDINGS F5: a registration that vanishes lets an id be given twice)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from replicaset.core.replicaset import PendingRegistration
from replicaset.identity import (
    JOIN_UPSTREAM_FILE, JOINING_FILE, Identity, IdentityError, Joining, JoinUpstream, load_pending_registration,
    save_pending_registration,
)
from replicaset.testing.pagecache import PageCache


def identity(instance_id: int) -> Identity:
    return Identity(replicaset_uuid=str(uuid.uuid4()), instance_uuid=str(uuid.uuid4()), instance_id=instance_id)


def test_a_saved_identity_survives_an_os_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PageCache(monkeypatch)
    saved = identity(2)
    saved.save(tmp_path)
    cache.os_crash(tmp_path)
    assert Identity.load(tmp_path) == saved


def test_an_identity_saved_over_another_survives_an_os_crash_as_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-join under a new id: after the crash the old id must not come back."""
    cache = PageCache(monkeypatch)
    identity(2).save(tmp_path)
    rejoined = identity(3)
    rejoined.save(tmp_path)
    cache.os_crash(tmp_path)
    assert Identity.load(tmp_path) == rejoined
    assert sorted(p.name for p in tmp_path.iterdir()) == ["instance.toml"]


def test_a_pending_registration_survives_an_os_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lost, the joiner would take writes before a majority holds its `_cluster` row."""
    cache = PageCache(monkeypatch)
    registration = PendingRegistration(origin=2, lsn=7, barrier={1: 4, 2: 6})
    save_pending_registration(tmp_path, registration)
    cache.os_crash(tmp_path)
    assert load_pending_registration(tmp_path) == registration


def test_a_join_under_way_survives_an_os_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A join started again after a crash must register the same UUID (the same id)."""
    cache = PageCache(monkeypatch)
    assert Joining.load(tmp_path) is None
    joining = Joining(replicaset_uuid=str(uuid.uuid4()), instance_uuid=str(uuid.uuid4()),
                      peers=["127.0.0.1:3301", "[::1]:3302"], anonymous=True)
    joining.save(tmp_path)
    cache.os_crash(tmp_path)
    assert Joining.load(tmp_path) == joining
    Joining.clear(tmp_path)
    assert Joining.load(tmp_path) is None
    (tmp_path / JOINING_FILE).write_text('replicaset_uuid = "x"\n')
    with pytest.raises(IdentityError, match="joining.toml is unreadable"):
        Joining.load(tmp_path)


def test_the_members_a_join_follows_are_kept_until_cleared_and_a_damaged_file_is_named(tmp_path: Path) -> None:
    assert JoinUpstream.load_all(tmp_path) == []
    kept = [JoinUpstream(uuid=str(uuid.uuid4()), address=f"127.0.0.1:{port}", instance_id=port - 3300)
            for port in (3301, 3302)]
    JoinUpstream.save_all(tmp_path, kept)
    assert JoinUpstream.load_all(tmp_path) == kept
    JoinUpstream.save_all(tmp_path, kept[1:])
    assert JoinUpstream.load_all(tmp_path) == kept[1:]
    for damaged in ('[[upstream]]\nuuid = "not a uuid"\naddress = "127.0.0.1:3301"\n', 'upstream = ["127.0.0.1:3301"]\n'):
        (tmp_path / JOIN_UPSTREAM_FILE).write_text(damaged)
        with pytest.raises(IdentityError, match=f"{JOIN_UPSTREAM_FILE} is unreadable"):
            JoinUpstream.load_all(tmp_path)
    JoinUpstream.save_all(tmp_path, [])
    assert not (tmp_path / JOIN_UPSTREAM_FILE).exists()
    assert JoinUpstream.load_all(tmp_path) == []
