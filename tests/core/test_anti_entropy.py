"""Anti-entropy's decision (`replicaset.core.anti_entropy`): delta sync while behind by
little and not for long, a checkpoint transfer past either threshold, and only from a peer
that holds every row of this member's own origin."""

from replicaset.core.anti_entropy import AntiEntropy, PeerView, Repair, SnapshotTransfer, behind_rows

ME = 3


def core(rows: int = 100, seconds: float = 60.0) -> AntiEntropy:
    return AntiEntropy(member=ME, threshold_rows=rows, threshold_s=seconds)


def test_rows_behind_count_every_origin_but_the_local_one():
    assert behind_rows({1: 10, 3: 5}, {0: 999, 1: 15, 2: 4, 3: 5}) == 9


def test_in_step_or_a_little_behind_streams_through_the_applier():
    ae = core()
    assert ae.check(0.0, {1: 10, 3: 5}, {1: PeerView(vclock={1: 10, 3: 5}, own_held=5, syncing=True),
                                         2: PeerView(vclock={1: 60, 3: 5}, own_held=5, syncing=True)}) == []
    assert ae.checks[1].repair is None and ae.checks[2].repair is Repair.DELTA and ae.checks[2].behind_rows == 50
    assert ae.runs == {Repair.DELTA: 1, Repair.SNAPSHOT: 0, Repair.GAP: 0}
    ae.check_invariants()


def test_far_behind_a_checkpoint_comes_from_the_peer_furthest_ahead():
    ae = core()
    wanted = ae.check(0.0, {1: 10, 3: 5}, {1: PeerView(vclock={1: 500, 3: 5}, own_held=5, syncing=True),
                                           2: PeerView(vclock={1: 900, 3: 5}, own_held=5, syncing=True)})
    assert wanted == [SnapshotTransfer(through=2, reason=ae.checks[2].reason, behind_rows=890)]
    assert "more than delta_sync_threshold_transactions = 100" in wanted[0].reason


def test_behind_for_longer_than_the_time_threshold_takes_a_checkpoint():
    ae = core(seconds=60.0)
    peers = {1: PeerView(vclock={1: 20, 3: 5}, own_held=5, syncing=True)}
    assert ae.check(0.0, {1: 10, 3: 5}, peers) == []
    assert ae.check(30.0, {1: 12, 3: 5}, peers) == []
    assert ae.check(61.0, {1: 14, 3: 5}, peers)[0].through == 1, "still behind a minute later"
    assert ae.check(62.0, {1: 20, 3: 5}, peers) == [] and ae.checks[1].repair is None
    assert ae.check(100.0, {1: 20, 3: 5}, {1: PeerView(vclock={1: 21, 3: 5}, own_held=5, syncing=True)}) == [], "the clock restarts"


def test_never_from_a_peer_that_lacks_rows_of_ours():
    ae = core()
    far = {1: PeerView(vclock={1: 900, 3: 4}, own_held=4, syncing=True), 2: PeerView(vclock={1: 800}, own_held=5, syncing=True)}
    assert ae.check(0.0, {1: 10, 3: 5}, far)[0].through == 2, "member 2 acknowledged row 3:5 to our relay"
    assert ae.check(1.0, {1: 10, 3: 5}, {1: far[1]}) == [], "a checkpoint from member 1 would lose row 3:5"
    assert ae.checks[1].repair is Repair.SNAPSHOT, "wanted, and waiting for our rows to reach a peer"


def test_a_following_member_is_never_sent_to_a_checkpoint():
    """A burst of writes leaves a live follower far behind for a moment: the stream keeps up."""
    ae = core(seconds=1.0)
    peers = {1: PeerView(vclock={1: 5000, 3: 5}, own_held=5, syncing=False)}
    assert ae.check(0.0, {1: 10, 3: 5}, peers) == [] and ae.check(99.0, {1: 10, 3: 5}, peers) == []
    assert ae.checks[1].repair is None and ae.checks[1].reason == "following"


def test_counts_kept_by_the_host_go_on_from_where_they_were():
    """Issue 32: the counts restarted with the member, so a gap repair (a re-join, a new
    process) left no trace. The host hands back what it kept; a gap is counted here too."""
    ae = AntiEntropy(member=3, threshold_rows=100, threshold_s=60, runs={Repair.GAP: 2, Repair.DELTA: 5})
    assert ae.runs == {Repair.DELTA: 5, Repair.SNAPSHOT: 0, Repair.GAP: 2}
    ae.count(Repair.GAP)
    assert ae.runs[Repair.GAP] == 3
