"""Replication state per peer."""

from __future__ import annotations

import pytest
import rocksdict

from replicaset.meta import MetaError, MetaStore, put_repl, repl

PEER = "8f3b2c1e-0000-4000-8000-000000000002"


def test_acked_vclocks_round_trip_and_survive_reopen(tmp_path):
    with MetaStore.open(tmp_path) as store:
        assert repl(store, PEER) is None
        put_repl(store, PEER, {1: 40, 2: 7})
        put_repl(store, PEER, {1: 41, 2: 7, 3: 1})
        put_repl(store, "other", {})
    with MetaStore.open(tmp_path) as store:
        assert repl(store, PEER) == {1: 41, 2: 7, 3: 1}
        assert repl(store, "other") == {}


def test_bad_vclocks_and_peers_are_refused(tmp_path):
    with MetaStore.open(tmp_path) as store:
        with pytest.raises(ValueError, match="origin"):
            put_repl(store, PEER, {32: 1})
        with pytest.raises(ValueError, match="lsn"):
            put_repl(store, PEER, {1: -1})
        with pytest.raises(ValueError, match="peer uuid"):
            put_repl(store, "a/b", {1: 1})


def test_a_stored_vclock_of_the_wrong_shape_names_its_key(tmp_path):
    db = rocksdict.Rdict(str(tmp_path), rocksdict.Options(raw_mode=True))
    db.put(f"/repl/{PEER}".encode(), b"\x92\x01\x02")
    db.close()
    with MetaStore.open(tmp_path) as store, pytest.raises(MetaError, match=f"/repl/{PEER}.*vclock"):
        repl(store, PEER)
