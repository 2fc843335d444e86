"""`box.cfg{replication_timeout, replication_skip_conflict, replication_connect_quorum}` on a
running member: the driver's appliers and relays, those to come, and the replica-set core
take the new values (`MemberDriver.replication_configured`)."""

from __future__ import annotations

from replicaset.core import replication as repl
from replicaset.core.replicaset import QuorumReached, ReplicaSet
from replicaset.member import MemberDriver
from tests.member.store import Store, membership
from tests.member.test_driver import OWN, SUBSCRIBER, follow, of_applier, of_relay, of_set
from wal import VClock


def driver_for(store: Store, *, configured_quorum: int | None = None) -> MemberDriver:
    return MemberDriver(
        instance_id=OWN,
        store=store,
        replicaset=ReplicaSet(instance_id=OWN, configured_quorum=configured_quorum, connect_deadline_s=10.0),
        membership=lambda: membership(OWN, 3),
        timeout_s=1.0,
        backoff_max_s=8.0,
    )


def configured(driver: MemberDriver, now_s: float, *, timeout_s: float = 1.0, skip_conflict: bool = False,
               connect_quorum: int | None = None) -> list:
    return driver.replication_configured(now_s, timeout_s=timeout_s, backoff_max_s=max(8 * timeout_s, 1.0),
                                         skip_conflict=skip_conflict, participant_timeout_s=4 * timeout_s,
                                         connect_quorum=connect_quorum)


def test_a_shorter_timeout_reaches_the_appliers_and_relays_already_running_and_those_to_come() -> None:
    driver = driver_for(Store())
    follow(driver, "1", VClock(), now_s=0.0)
    driver.relay_subscribe(5, 0.0, subscriber=SUBSCRIBER, vclock=VClock(), last_txn={}, include_own=False)
    driver.relay_ack(5, 0.45, VClock())
    assert of_applier(driver.applier_tick("1", 0.5), "1") == [], "four timeouts of 1 s: not silent yet"
    assert of_relay(driver.relay_tick(5, 0.5), 5) == [], "no heartbeat due before 1 s"

    configured(driver, 0.5, timeout_s=0.1)
    assert [type(a) for a in of_applier(driver.applier_tick("1", 0.5), "1")] == [repl.Disconnect], \
        "silent for more than four timeouts of 0.1 s"
    assert [type(a) for a in of_relay(driver.relay_tick(5, 0.5), 5)] == [repl.SendHeartbeat]
    assert driver.participant.timeout_s == 0.4
    driver.applier_start("3", 0.5, peer="peer-3")
    assert driver.appliers["3"].timeout_s == 0.1 and driver.appliers["3"].backoff_max_s == 1.0


def test_skip_conflict_reaches_every_applier() -> None:
    driver = driver_for(Store())
    follow(driver, "1", VClock())
    configured(driver, 0.0, skip_conflict=True)
    driver.applier_start("3", 0.0, peer="peer-3")
    assert driver.appliers["1"].skip_conflict and driver.appliers["3"].skip_conflict


def test_a_lower_connect_quorum_lets_a_member_that_waits_for_peers_take_writes() -> None:
    """Tarantool's way out of orphan: `box.cfg{replication_connect_quorum = 0}`."""
    driver = driver_for(Store(), configured_quorum=2)
    follow(driver, "1", VClock())
    assert of_set(driver.members_changed(0.0)) == [] and not driver.running, "one peer of the two it waits for"
    assert of_set(configured(driver, 0.0, connect_quorum=1)) == [QuorumReached(quorum=1)]
    assert driver.running
