"""SWIM datagrams under hostile bytes: a checked message or `DatagramError`, nothing else.

Anyone who can reach the UDP port can send a datagram, and the receive loop catches
`DatagramError` only: any other exception would end the member's SWIM task. So `decode`
gets arbitrary bytes, arbitrary msgpack values, and mutations of valid datagrams.
"""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from replicaset.core import swim
from replicaset.core.swim import MemberState
from replicaset.runtime.swim import DATAGRAM_MAX, KINDS, DatagramError, decode, encode
from tests.fuzzing import byte_mutations, examples, fuzz, mutate_bytes, scalars, values

RS = "8c5e4a52-0000-4000-8000-00000000abcd"
UPDATES = (swim.Update(member=2, state=MemberState.SUSPECT, incarnation=4),
           swim.Update(member=3, state=MemberState.ALIVE, incarnation=0))
CORPUS = [encode("ping", RS, 1, 7, None, UPDATES), encode("ack", RS, 2, 8, None, ()),
          encode("ping_req", RS, 3, 9, 2, UPDATES[:1])]


def _decode_checked(data: bytes) -> None:
    try:
        kind, sender, seq, target, updates = decode(data, RS)
    except DatagramError as exc:
        assert str(exc)
        return
    assert kind in KINDS and type(sender) is int and type(seq) is int and len(data) <= DATAGRAM_MAX
    assert target is None or type(target) is int
    assert all(isinstance(u, swim.Update) for u in updates)


@examples(ci=200, deep=50_000)
def test_arbitrary_datagrams_decode_or_are_dropped(max_examples: int) -> None:
    as_msgpack = st.lists(scalars | st.lists(st.lists(scalars, max_size=3), max_size=3), min_size=7, max_size=7).map(lambda m: msgpack.packb([1, m[1], RS, *m[3:]]))

    @fuzz(max_examples)
    @given(data=st.binary(max_size=200) | values.map(msgpack.packb) | as_msgpack)
    def check(data: bytes) -> None:
        _decode_checked(data)

    check()


@examples(ci=300, deep=50_000)
def test_mutated_datagrams_decode_or_are_dropped(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(data=st.sampled_from(CORPUS), steps=byte_mutations)
    def check(data: bytes, steps: list) -> None:
        _decode_checked(mutate_bytes(data, steps))

    check()


def test_the_corpus_decodes() -> None:
    assert [decode(d, RS)[0] for d in CORPUS] == ["ping", "ack", "ping_req"]
