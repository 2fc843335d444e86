"""The SWIM core driven bare: one member against scripted peers, then a few members joined
by a lossy fake network, every message through the wire form and `check_invariants`
after every event."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicaset.core import swim as sw
from replicaset.core.swim import MemberState, SwimSettings, Update
from replicaset.core.transitions import LocalProtocolError

ALIVE, JOINING, SUSPECT, DEAD, REMOVED = (MemberState.ALIVE, MemberState.JOINING, MemberState.SUSPECT,
                                         MemberState.DEAD, MemberState.REMOVED)
STEP_S = 0.125  # a tick every 1/8 s: exact in binary, so due times are hit exactly


def address(member: int) -> str:
    return f"10.0.0.{member}:3301"


def addresses(*members: int) -> dict[int, str]:
    return {m: address(m) for m in members}


def core(member: int = 1, members=(1, 2, 3), seed: int = 7, **kwargs) -> sw.Swim:
    swim = sw.Swim(member, address(member), random.Random(seed), SwimSettings(**kwargs))
    swim.members_changed(0.0, addresses(*members))
    swim.check_invariants()
    return swim


def checked(swim: sw.Swim, actions: list[sw.Action]) -> list[sw.Action]:
    swim.check_invariants()
    return actions


def of(kind: type, actions) -> list:
    return [a for a in actions if isinstance(a, kind)]


def changes(actions) -> list[tuple[int, MemberState, int]]:
    return [(a.member, a.state, a.incarnation) for a in of(sw.StateChanged, actions)]


def u(member: int, state: MemberState, incarnation: int) -> Update:
    return Update(member=member, state=state, incarnation=incarnation)


def states(swim: sw.Swim) -> dict[int, tuple[MemberState, int]]:
    return {i.member: (i.state, i.incarnation) for i in swim.view()}


@dataclass
class Script:
    """One member run alone: its pings to `answering` members are acked at once, and
    what it did is kept with the time it did it."""

    swim: sw.Swim
    answering: set[int]
    now_s: float = 0.0
    log: list[tuple[float, sw.Action]] = field(default_factory=list)

    def run_until(self, end_s: float) -> None:
        while self.now_s <= end_s:
            self.carry_out(self.swim.tick(self.now_s))
            self.now_s += STEP_S

    def carry_out(self, actions: list[sw.Action]) -> None:
        self.swim.check_invariants()
        for action in actions:
            self.log.append((self.now_s, action))
            if isinstance(action, sw.SendPing) and action.to in self.answering:
                ack = [u(action.to, ALIVE, 0)]
                self.carry_out(self.swim.ack_received(self.now_s, action.to, action.seq, ack))

    def when(self, member: int, state: MemberState) -> list[float]:
        return [t for t, a in self.log if isinstance(a, sw.StateChanged) and (a.member, a.state) == (member, state)]

    def pinged(self, member: int) -> list[float]:
        return [t for t, a in self.log if isinstance(a, sw.SendPing) and a.to == member]


# ---------------------------------------------------------------- failure detection


def test_a_member_never_heard_from_is_suspect_after_its_probe_and_dead_suspect_timeout_later():
    script = Script(core(), answering={2})
    script.run_until(20.0)
    first_ping = script.pinged(3)[0]
    assert script.when(3, SUSPECT) == [first_ping + 1.0], "suspected when the period of its probe ends"
    assert script.when(3, DEAD) == [first_ping + 1.0 + 5.0], "dead once the suspicion lasted suspect_timeout_s"
    assert script.when(2, SUSPECT) == [], "a member that answers stays alive"


def test_a_member_that_falls_silent_is_dead_dead_timeout_after_it_was_last_heard():
    script = Script(core(), answering={2, 3})
    script.run_until(3.0)
    script.answering.discard(3)
    last_heard_s = script.swim.view()[2].last_heard_s
    assert last_heard_s is not None and last_heard_s <= 3.0
    script.run_until(30.0)
    failed_ping = next(t for t in script.pinged(3) if t > last_heard_s)
    (suspected_s,) = script.when(3, SUSPECT)
    assert suspected_s == failed_ping + 1.0
    assert script.when(3, DEAD) == [max(suspected_s + 5.0, last_heard_s + 10.0)], (
        "DEAD no sooner than suspect_timeout_s after the suspicion and dead_timeout_s after the silence began")
    assert states(script.swim)[3] == (DEAD, 0)


def test_a_dead_member_is_still_pinged_but_nobody_is_asked_to_ping_it():
    script = Script(core(), answering={2})
    script.run_until(8.0)
    assert script.swim.state_of(3) is DEAD
    dead_since = script.when(3, DEAD)[0]
    script.run_until(16.0)
    assert [t for t in script.pinged(3) if t > dead_since], "two halves of a healed partition find each other"
    assert not [a for t, a in script.log if isinstance(a, sw.SendPingReq) and t > dead_since and a.target == 3]


def test_an_indirect_ack_saves_a_member_from_suspicion():
    swim = core()
    (ping,) = of(sw.SendPing, checked(swim, swim.tick(0.0)))
    target, helper = ping.to, ({2, 3} - {ping.to}).pop()
    assert checked(swim, swim.tick(0.25)) == [], "still within ping_timeout_s"
    (ping_req,) = checked(swim, swim.tick(0.5))
    assert ping_req == sw.SendPingReq(via=helper, address=address(helper), target=target, seq=ping.seq,
                                      updates=(u(1, ALIVE, 0),))
    checked(swim, swim.ack_received(0.75, helper, ping.seq, [u(helper, ALIVE, 0)]))
    assert changes(checked(swim, swim.tick(1.0))) == [], "no suspicion: the target answered through the helper"
    assert swim.state_of(target) is ALIVE and swim.view()[target - 1].last_heard_s == 0.75


def test_only_live_members_are_asked_to_ping_for_us():
    """With member 3 SUSPECT and 4 DEAD, a PING-REQ through either would go unanswered:
    member 2, which only a link through 5 reaches, would be suspected though alive."""
    swim = core(members=(1, 2, 3, 4, 5), gossip_fanout=1)
    checked(swim, swim.ack_received(0.0, 5, 0, [u(5, ALIVE, 0), u(3, SUSPECT, 0), u(4, DEAD, 0)]))
    asked, now_s = [], 0.0
    while now_s <= 20.0:
        for action in checked(swim, swim.tick(now_s)):
            if isinstance(action, sw.SendPing) and action.to == 5:
                checked(swim, swim.ack_received(now_s, 5, action.seq, [u(5, ALIVE, 0)]))
            elif isinstance(action, sw.SendPingReq):
                asked.append((action.via, action.target))
                if action.via == 5 and action.target == 2:
                    checked(swim, swim.ack_received(now_s, 5, action.seq, [u(5, ALIVE, 0)]))
        now_s += STEP_S
    assert swim.state_of(2) is ALIVE, f"reached through the one live helper every time, not {asked}"
    assert (5, 2) in asked and not {via for via, _ in asked} & {3, 4}, asked


def test_an_ack_under_the_probes_seq_from_a_member_not_asked_is_no_answer():
    """Only the target, or a member asked to ping it, answers a probe: another member's
    ack that happens to carry the probe's seq says nothing of the target."""
    swim = core()
    (ping,) = of(sw.SendPing, checked(swim, swim.tick(0.0)))
    other = ({2, 3} - {ping.to}).pop()
    checked(swim, swim.ack_received(0.25, other, ping.seq, [u(other, ALIVE, 0)]))
    assert swim.view()[ping.to - 1].last_heard_s is None
    (ping_req,) = of(sw.SendPingReq, checked(swim, swim.tick(0.5)))
    assert ping_req.target == ping.to, "the probe is still unanswered: the indirect one starts"
    assert changes(checked(swim, swim.tick(1.0))) == [(ping.to, SUSPECT, 0)]


@pytest.mark.parametrize("heard_s, suspected_s, heard_again_s, dead_s", [
    (2.0, 3.0, None, 12.0),  # dead_timeout_s after the last message outlasts the suspicion
    (1.0, 8.0, None, 13.0),  # suspect_timeout_s after the suspicion outlasts the silence
    (None, 1.0, 4.0, 14.0),  # heard while suspected (no refutation): the silence starts over
])
def test_a_suspicion_heard_by_gossip_turns_dead_exactly_when_both_timeouts_passed(
        heard_s, suspected_s, heard_again_s, dead_s):
    """DEAD at max(suspected + suspect_timeout_s, last heard + dead_timeout_s): not on the
    tick before, on the tick at that time."""
    swim = core()
    if heard_s is not None:
        checked(swim, swim.ping_received(heard_s, 3, 1, [u(3, ALIVE, 0)]))
    assert changes(checked(swim, swim.ack_received(suspected_s, 2, 0, [u(2, ALIVE, 0), u(3, SUSPECT, 0)]))) == [
        (3, SUSPECT, 0)]
    if heard_again_s is not None:
        checked(swim, swim.ping_received(heard_again_s, 3, 2, [u(3, ALIVE, 0)]))
        assert swim.state_of(3) is SUSPECT, "a stale ALIVE refutes nothing"
    assert (3, DEAD, 0) not in changes(checked(swim, swim.tick(dead_s - STEP_S)))
    assert swim.state_of(3) is SUSPECT
    assert (3, DEAD, 0) in changes(checked(swim, swim.tick(dead_s)))


def test_a_helper_pings_the_target_and_relays_its_ack_under_the_askers_seq():
    helper = core(member=3)
    (ping,) = checked(helper, helper.ping_req_received(0.0, 1, 2, 41, [u(1, ALIVE, 0)]))
    assert isinstance(ping, sw.SendPing) and ping.to == 2
    assert checked(helper, helper.ack_received(0.1, 1, ping.seq, [])) == [], "an ack from someone else is no answer"
    (relayed,) = checked(helper, helper.ack_received(0.2, 2, ping.seq, [u(2, ALIVE, 0)]))
    assert (relayed.to, relayed.seq) == (1, 41) and isinstance(relayed, sw.SendAck)
    assert checked(helper, helper.ack_received(0.3, 2, ping.seq, [])) == [], "relayed once"


def test_a_late_ping_req_ack_is_dropped_after_a_period():
    helper = core(member=3)
    (ping,) = checked(helper, helper.ping_req_received(0.0, 1, 2, 41, []))
    checked(helper, helper.tick(1.5))
    assert of(sw.SendAck, checked(helper, helper.ack_received(1.6, 2, ping.seq, []))) == []


def test_an_ack_after_the_period_ended_does_not_undo_the_suspicion():
    swim = core()
    (ping,) = of(sw.SendPing, swim.tick(0.0))
    swim.tick(0.5)
    assert changes(checked(swim, swim.tick(1.0)))[0] == (ping.to, SUSPECT, 0)
    checked(swim, swim.ack_received(1.1, ping.to, ping.seq, [u(ping.to, ALIVE, 0)]))
    assert swim.state_of(ping.to) is SUSPECT, "at an equal incarnation only the member's refutation helps"


def test_a_late_tick_still_gives_the_indirect_probe_the_rest_of_a_period():
    swim = core()
    (ping,) = of(sw.SendPing, swim.tick(0.0))
    actions = checked(swim, swim.tick(3.0))
    assert of(sw.SendPingReq, actions) and not changes(actions)
    assert changes(checked(swim, swim.tick(3.5)))[0] == (ping.to, SUSPECT, 0)


# ---------------------------------------------------------------- incarnations


def test_a_suspected_member_refutes_and_takes_its_accuser_back_to_alive():
    accuser, accused = core(member=1), core(member=2)
    checked(accuser, accuser.ack_received(0.0, 3, 0, [u(2, SUSPECT, 0)]))
    assert accuser.state_of(2) is SUSPECT
    (ping,) = checked(accuser, accuser.ping_received(0.5, 2, 9, [u(2, ALIVE, 0)]))
    assert ping.updates[:2] == (u(1, ALIVE, 0), u(2, SUSPECT, 0)), "the accusation goes to the accused first"
    actions = checked(accused, accused.ack_received(0.6, 1, 9, ping.updates))
    assert changes(actions) == [(2, ALIVE, 1)] and accused.incarnation == 1
    assert accused.state_of(2) is ALIVE, "a member never holds itself SUSPECT"
    (answer,) = checked(accused, accused.ping_received(0.7, 1, 10, []))
    assert answer.updates[0] == u(2, ALIVE, 1), "every message carries the sender's own entry first"
    assert changes(checked(accuser, accuser.ack_received(0.8, 2, 10, answer.updates))) == [(2, ALIVE, 1)]


def test_a_member_declared_dead_refutes_too_and_is_alive_again_everywhere():
    swim = core(member=2)
    assert changes(checked(swim, swim.ping_received(0.0, 1, 1, [u(2, DEAD, 4)]))) == [(2, ALIVE, 5)], (
        "above the incarnation it was accused at, even one from a previous life")


def test_a_restarted_member_held_alive_at_a_higher_incarnation_is_told_and_goes_above_it():
    """A member restarted at incarnation 0 before anyone suspected it: the others hold it
    ALIVE at the incarnation of its previous life, and an ALIVE at 0 loses to that. Told
    what they hold, it refutes above it, and every view agrees on it again."""
    peer = core(member=1)
    checked(peer, peer.ping_received(0.0, 2, 1, [u(2, ALIVE, 5)]))
    restarted = core(member=2)
    (ack,) = checked(peer, peer.ping_received(1.0, 2, 2, [u(2, ALIVE, 0)]))
    assert ack.updates[:2] == (u(1, ALIVE, 0), u(2, ALIVE, 5)), "its entry as this view holds it, right after ours"
    assert changes(checked(restarted, restarted.ack_received(1.1, 1, 2, ack.updates))) == [(2, ALIVE, 6)]
    (ping,) = of(sw.SendPing, checked(restarted, restarted.tick(1.2)))
    assert changes(checked(peer, peer.ping_received(1.3, 2, ping.seq, ping.updates))) == [(2, ALIVE, 6)]
    (ack,) = checked(peer, peer.ping_received(1.4, 2, ping.seq + 1, [u(2, ALIVE, 6)]))
    assert ack.updates == (u(1, ALIVE, 0),), "once it caught up it is told no more"


def test_stale_updates_are_ignored():
    swim = core()
    checked(swim, swim.ping_received(0.0, 2, 1, [u(3, ALIVE, 3)]))
    assert changes(checked(swim, swim.ping_received(0.1, 2, 2, [u(3, SUSPECT, 2), u(3, DEAD, 1)]))) == []
    assert changes(checked(swim, swim.ping_received(0.2, 2, 3, [u(3, SUSPECT, 3)]))) == [(3, SUSPECT, 3)]
    assert changes(checked(swim, swim.ping_received(0.3, 2, 4, [u(3, ALIVE, 3), u(3, JOINING, 3)]))) == [], (
        "at an equal incarnation a stale ALIVE never erases a suspicion")
    assert changes(checked(swim, swim.ping_received(0.4, 2, 5, [u(3, DEAD, 3), u(3, SUSPECT, 3)]))) == [(3, DEAD, 3)]
    assert changes(checked(swim, swim.ping_received(0.5, 2, 6, [u(3, ALIVE, 4)]))) == [(3, ALIVE, 4)]
    assert states(swim)[3] == (ALIVE, 4)


def test_the_equal_incarnation_table_only_escalates():
    order = [ALIVE, JOINING, SUSPECT, DEAD]
    for held, moves in sw.EQUAL_INCARNATION_MOVES.items():
        assert moves == frozenset(order[order.index(held) + 1:])


def test_joining_ends_at_a_new_incarnation_that_every_view_takes():
    joiner = sw.Swim(4, address(4), random.Random(1), joining=True)
    joiner.members_changed(0.0, addresses(1, 4))
    other = core(members=(1, 2, 3, 4))
    (ack,) = checked(joiner, joiner.ping_received(0.0, 1, 1, []))
    checked(other, other.ack_received(0.1, 4, 1, ack.updates))
    assert other.state_of(4) is JOINING, "JOINING beats the registry's ALIVE at incarnation 0"
    assert changes(checked(joiner, joiner.caught_up(1.0))) == [(4, ALIVE, 1)]
    assert checked(joiner, joiner.caught_up(1.1)) == [], "once"
    (ack,) = checked(joiner, joiner.ping_received(1.2, 1, 2, []))
    assert changes(checked(other, other.ack_received(1.3, 4, 2, ack.updates))) == [(4, ALIVE, 1)]


def test_a_registered_joiner_is_joining_when_the_registry_says_so():
    swim = core()
    assert changes(swim.members_changed(1.0, addresses(1, 2, 3, 4), joining={4})) == [(4, JOINING, 0)]


# ---------------------------------------------------------------- removal and the registry


def test_removed_is_final_and_a_removed_member_is_no_longer_heard_or_pinged():
    script = Script(core(), answering={2, 3})
    assert changes(script.swim.removed(0.0, 3)) == [(3, REMOVED, 0)]
    script.swim.check_invariants()
    swim = script.swim
    assert checked(swim, swim.ping_received(0.1, 2, 1, [u(3, ALIVE, 9)])) != []
    assert swim.state_of(3) is REMOVED, "not even a higher incarnation brings it back"
    assert checked(swim, swim.ping_received(0.2, 3, 2, [u(2, DEAD, 5)])) == [], "a removed member is not listened to"
    assert swim.state_of(2) is ALIVE
    script.run_until(6.0)
    assert script.pinged(3) == [] and len(script.pinged(2)) >= 5


def test_a_removal_is_gossiped_and_its_subject_goes_silent():
    swim = core()
    swim.removed(0.0, 3)
    (ping,) = of(sw.SendPing, swim.tick(0.0))
    assert u(3, REMOVED, 0) in ping.updates
    removed = core(member=3)
    assert changes(checked(removed, removed.ack_received(0.1, 1, 1, ping.updates))) == [(3, REMOVED, 0)]
    assert removed.state is REMOVED
    assert checked(removed, removed.tick(5.0)) == [] and checked(removed, removed.ping_received(5.1, 1, 2, [])) == []


def test_an_unregistered_member_leaves_the_view_without_being_removed():
    swim = core(members=(1, 2, 3, 4))
    checked(swim, swim.tick(0.0))
    assert checked(swim, swim.members_changed(0.5, addresses(1, 2, 3))) == []
    assert swim.state_of(4) is None and 4 not in states(swim)
    assert checked(swim, swim.ping_received(0.6, 4, 1, [])) == [], "unknown now"


def test_a_phantom_member_is_never_added():
    swim = core()
    assert checked(swim, swim.ping_received(0.0, 9, 1, [u(9, ALIVE, 0)])) == [], "no answer to an unknown sender"
    assert checked(swim, swim.ack_received(0.0, 9, 1, [u(2, DEAD, 7)])) == []
    assert checked(swim, swim.ping_req_received(0.0, 9, 2, 1, [])) == []
    (ack,) = checked(swim, swim.ping_received(0.1, 2, 2, [u(9, ALIVE, 0), u(12, SUSPECT, 3)]))
    assert isinstance(ack, sw.SendAck)
    assert sorted(states(swim)) == [1, 2, 3] and swim.state_of(9) is None
    assert checked(swim, swim.ping_req_received(0.2, 2, 9, 5, [])) == [], "nobody pings a phantom for anyone"
    assert checked(swim, swim.removed(0.3, 9)) == []


# ---------------------------------------------------------------- the wire


@pytest.mark.parametrize("raw, message", [
    ({"member": 1}, "must be a list"),
    ([[1, 0, 0]] * 17, "more than 16"),
    ([[1, 0]], "must be [member, state, incarnation]"),
    ([[0, 0, 0]], "member 0 is not an instance id"),
    ([[32, 0, 0]], "member 32"),
    ([[True, 0, 0]], "member True"),
    ([["2", 0, 0]], "member '2'"),
    ([[2, 5, 0]], "state 5 is not a state code"),
    ([[2, "alive", 0]], "state 'alive'"),
    ([[2, 0, -1]], "incarnation -1"),
    ([[2, 0, 2**63]], "incarnation"),
    ([[2, 0, 1.5]], "incarnation 1.5"),
    ([[2, 0, 0], [2, 0, None]], "update 1: incarnation None"),
])
def test_malformed_updates_are_refused_naming_the_field(raw, message):
    with pytest.raises(sw.SwimProtocolError) as caught:
        sw.decode_updates(raw)
    assert message in str(caught.value)


def test_a_message_with_one_bad_update_reaches_the_view_not_at_all():
    swim = core()
    before = swim.view()
    with pytest.raises(sw.SwimProtocolError):
        swim.ping_received(0.0, 2, 1, sw.decode_updates([[3, 3, 5], [3, 9, 0]]))
    assert swim.view() == before


def test_updates_are_plain_data_that_survive_msgpack():
    updates = (u(1, ALIVE, 0), u(2, JOINING, 1), u(3, SUSPECT, 2), u(4, DEAD, 3), u(31, REMOVED, 2**63 - 1))
    wire = msgpack.packb(sw.encode_updates(updates))
    assert sw.decode_updates(msgpack.unpackb(wire)) == updates


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=5), max_leaves=20))
def test_any_input_decodes_to_valid_updates_or_is_refused(raw):
    try:
        updates = sw.decode_updates(raw)
    except sw.SwimProtocolError:
        return
    swim = core()
    checked(swim, swim.ping_received(0.0, 2, 1, updates))
    assert all(1 <= x.member <= 31 and x.incarnation >= 0 for x in updates)


def test_settings_are_checked_naming_the_setting():
    with pytest.raises(ValueError, match="ping_timeout_s"):
        SwimSettings(ping_timeout_s=1.0)
    with pytest.raises(ValueError, match="suspect_timeout_s <= dead_timeout_s"):
        SwimSettings(suspect_timeout_s=11.0)
    with pytest.raises(ValueError, match="piggyback_max"):
        SwimSettings(piggyback_max=17)
    with pytest.raises(LocalProtocolError):
        sw.Swim(0, "x:1", random.Random())


# ---------------------------------------------------------------- round-robin and piggybacking


def test_each_round_pings_every_member_once_in_a_new_order():
    script = Script(core(members=range(1, 7)), answering=set(range(2, 7)))
    script.run_until(20.0 - STEP_S)
    targets = [a.to for _, a in script.log if isinstance(a, sw.SendPing)]
    rounds = [targets[i:i + 5] for i in range(0, 20, 5)]
    assert all(sorted(r) == [2, 3, 4, 5, 6] for r in rounds), rounds
    assert len({tuple(r) for r in rounds}) > 1, "each round is shuffled again"


def test_a_newcomer_is_pinged_within_the_round_it_joined():
    script = Script(core(members=range(1, 7)), answering=set(range(2, 8)))
    script.run_until(1.5)
    checked(script.swim, script.swim.members_changed(script.now_s, addresses(*range(1, 8))))
    script.run_until(6.0 - STEP_S)
    targets = [a.to for _, a in script.log if isinstance(a, sw.SendPing)]
    assert sorted(targets) == [2, 3, 4, 5, 6, 7], "the round grew by one"


def test_piggybacking_bounds_every_message_and_each_change_is_sent_a_bounded_number_of_times():
    members = range(1, 32)
    swim = core(members=members, piggyback_max=8)
    sent: dict[Update, int] = {}
    for member in range(2, 32):
        checked(swim, swim.ack_received(0.0, member, 0, [u(member, ALIVE, 1)]))
    limit = 4 * math.ceil(math.log10(31 + 1))
    messages = [checked(swim, swim.ping_received(0.1 * i, 2, i, [])) for i in range(1, 200)]
    for (ack,) in messages:
        assert len(ack.updates) <= 8 and ack.updates[0] == u(1, ALIVE, 0)
        assert len(msgpack.packb(sw.encode_updates(ack.updates))) <= 8 * 13 + 3
        for update in ack.updates[1:]:
            sent[update] = sent.get(update, 0) + 1
    assert set(sent.values()) == {limit}, "each change sent exactly its retransmit limit"
    assert len(sent) == 30 - 1 and u(2, ALIVE, 1) not in sent, "every change but the recipient's own news"
    assert messages[-1][0].updates == (u(1, ALIVE, 0),), "and then nothing is left to say"


def test_the_newest_and_least_sent_change_goes_first():
    swim = core(members=range(1, 10), piggyback_max=3)
    for member in (5, 6, 7):
        swim.ack_received(0.0, 2, 0, [u(member, SUSPECT, 0)])
    (ack,) = swim.ping_received(0.0, 3, 3, [])
    assert ack.updates == (u(1, ALIVE, 0), u(7, SUSPECT, 0), u(6, SUSPECT, 0))
    (ack,) = swim.ping_received(0.0, 3, 4, [])
    assert ack.updates == (u(1, ALIVE, 0), u(5, SUSPECT, 0), u(7, SUSPECT, 0))


# ---------------------------------------------------------------- a seeded simulation


@dataclass
class Network:
    """Members joined by a fake network that delays every datagram by one tick and loses
    some; the `down` members are neither ticked nor reached. One seed decides all."""

    seed: int
    size: int
    loss: float
    rng: random.Random = field(init=False)
    members: dict[int, sw.Swim] = field(init=False)
    down: set[int] = field(default_factory=set)
    in_flight: list[tuple[int, int, bytes]] = field(default_factory=list)
    now_s: float = 0.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.members = {m: sw.Swim(m, address(m), random.Random(self.rng.random())) for m in range(1, self.size + 1)}
        for swim in self.members.values():
            self.carry_out(swim, swim.members_changed(0.0, addresses(*self.members)))

    def carry_out(self, swim: sw.Swim, actions: list[sw.Action]) -> None:
        swim.check_invariants()
        for action in actions:
            if isinstance(action, sw.StateChanged):
                continue
            to = action.via if isinstance(action, sw.SendPingReq) else action.to
            assert action.address == address(to)
            body = [type(action).__name__, action.seq, sw.encode_updates(action.updates),
                    getattr(action, "target", None)]
            self.in_flight.append((swim.member, to, msgpack.packb(body)))

    def deliver(self, sender: int, to: int, datagram: bytes) -> None:
        if to in self.down or self.rng.random() < self.loss:
            return
        kind, seq, raw, target = msgpack.unpackb(datagram)
        swim, updates = self.members[to], sw.decode_updates(raw)
        if kind == "SendPing":
            actions = swim.ping_received(self.now_s, sender, seq, updates)
        elif kind == "SendAck":
            actions = swim.ack_received(self.now_s, sender, seq, updates)
        else:
            actions = swim.ping_req_received(self.now_s, sender, target, seq, updates)
        self.carry_out(swim, actions)

    def step(self) -> None:
        """Deliver what the last tick sent (in a shuffled order), then tick everyone."""
        arrived, self.in_flight = self.in_flight, []
        self.rng.shuffle(arrived)
        for datagram in arrived:
            self.deliver(*datagram)
        for member, swim in self.members.items():
            if member not in self.down:
                self.carry_out(swim, swim.tick(self.now_s))
        self.now_s += STEP_S

    def run_until(self, end_s: float) -> None:
        while self.now_s < end_s:
            self.step()

    def views(self) -> dict[int, dict[int, MemberState]]:
        return {m: {i.member: i.state for i in s.view()} for m, s in self.members.items() if m not in self.down}


CRASH_S = 3.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_live_members_agree_a_crashed_one_is_dead_and_the_others_alive(seed):
    """VOPR's two phases: safety while datagrams are lost, then convergence once they no
    longer are."""
    net = Network(seed=seed, size=5, loss=0.1)
    net.run_until(CRASH_S)
    net.down.add(5)
    dead_everywhere_s = None
    while net.now_s < CRASH_S + 15.0:
        net.step()
        views = net.views()
        assert all(view[m] is not DEAD for view in views.values() for m in (1, 2, 3, 4)), f"seed {seed}: {views}"
        if all(view[5] is DEAD for view in views.values()):
            dead_everywhere_s = dead_everywhere_s or net.now_s
        assert dead_everywhere_s is None or all(view[5] is DEAD for view in views.values()), (
            f"seed {seed}: a crashed member declared dead was revived")
    assert dead_everywhere_s is not None and dead_everywhere_s - CRASH_S <= 10.0 + 2.0, (
        f"seed {seed}: dead everywhere {dead_everywhere_s} s, crash at {CRASH_S} s")
    net.loss = 0.0
    net.run_until(net.now_s + 10.0)
    expected = {1: ALIVE, 2: ALIVE, 3: ALIVE, 4: ALIVE, 5: DEAD}
    assert net.views() == {m: expected for m in (1, 2, 3, 4)}, f"seed {seed}"


@pytest.mark.parametrize("seed", [4, 5])
def test_a_paused_member_declared_dead_refutes_when_it_resumes(seed):
    net = Network(seed=seed, size=4, loss=0.05)
    net.run_until(2.0)
    net.down.add(4)
    net.run_until(20.0)
    assert all(view[4] is DEAD for view in net.views().values()), f"seed {seed}"
    net.down.clear()
    net.loss = 0.0
    net.run_until(30.0)
    assert all(set(view.values()) == {ALIVE} for view in net.views().values()), f"seed {seed}: {net.views()}"
    incarnation = net.members[4].incarnation
    assert incarnation >= 1 and all(states(s)[4] == (ALIVE, incarnation) for s in net.members.values())
