"""The shared kit of the fuzz tests: example counts, settings, msgpack-shaped values, mutations.

Each fuzz test runs a CI number of examples and, marked `deep` (`make test-deep`), a long
run. Values are what `msgpack.unpackb(raw=False)` can hand a decoder: scalars, lists, maps
with hashable keys, extension types and timestamps, so a decoder sees every Python type a
peer can make it see, and nothing msgpack could not produce.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

DEEP_EXAMPLES = 50_000


def examples(ci: int, deep: int = DEEP_EXAMPLES) -> pytest.MarkDecorator:
    """Parametrize a test by its example count: `ci` in CI, `deep` under the `deep` marker."""
    return pytest.mark.parametrize(
        "max_examples", [ci, pytest.param(deep, marks=pytest.mark.deep)], ids=["ci", "deep"]
    )


def fuzz(max_examples: int) -> settings:
    """Settings for one fuzz run. No example database: the suite must not write files
    outside its own directories, and a seed-free run is reproduced from its printed example."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


U64_MAX = (1 << 64) - 1
I64_MIN = -(1 << 63)

integers = st.one_of(
    st.integers(min_value=-3, max_value=40),
    st.integers(min_value=I64_MIN, max_value=U64_MAX),
    st.sampled_from([0, 1, 31, 32, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63, U64_MAX, I64_MIN]),
)
keys = st.one_of(  # what msgpack can make a map key: anything hashable it decodes
    st.none(), st.booleans(), integers, st.floats(), st.text(max_size=8), st.binary(max_size=8)
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    integers,
    st.floats(),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8)),
    st.builds(msgpack.Timestamp, st.integers(0, 1 << 33), st.integers(0, 999_999_999)),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=10,
)


def body_dicts(known_keys: list[int]) -> st.SearchStrategy[dict[int, Any]]:
    """A request body: some of `known_keys` (the fields its decoder reads) and a few other ones."""
    field = st.sampled_from(known_keys) | st.integers(0, 0x90)
    return st.dictionaries(field, values, max_size=6)


def field_mutations(present: Sequence[int], known_keys: Sequence[int] = ()) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Edits of a valid body: drop a field, give it (or a new one) any value, or change
    one entry of a field that is a map or an array (a vclock's LSN, an option's value).
    Mostly the fields `present` in the body, as a bug hides behind the checks of those."""
    field = st.one_of(*[st.sampled_from(list(present))] * 3 * bool(present), st.sampled_from(list(known_keys) or [0]),
                      st.integers(0, 0x90))
    entry = st.tuples(st.just("existing"), st.integers(0, 7)) | st.tuples(st.just("new"), keys)
    return st.lists(
        st.tuples(st.sampled_from(["drop", "set"]), field, values)
        | st.tuples(st.just("set"), field, scalars)
        | st.tuples(st.just("inner"), field, scalars | values, entry),
        min_size=1,
        max_size=3,
    )


def mutate_fields(body: dict[int, Any], steps: list[tuple[Any, ...]]) -> dict[int, Any]:
    """Apply `field_mutations` to a copy of `body`; an "inner" edit of an existing entry
    picks it by index, so a map's own keys (an option's name) are what gets changed."""
    mutated = dict(body)
    for kind, key, value, *entry in steps:
        if kind == "drop":
            mutated.pop(key, None)
        elif kind == "set":
            mutated[key] = value
        else:
            (how, which), container = entry[0], mutated.get(key)
            if isinstance(container, dict):
                names = list(container)
                name = names[which % len(names)] if how == "existing" and names else which
                mutated[key] = {**container, name: value}
            elif isinstance(container, list) and container:
                items = list(container)
                items[(which if how == "existing" else len(repr(which))) % len(items)] = value
                mutated[key] = items
    return mutated


byte_mutations = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(0, 7)),
        st.tuples(st.just("insert"), st.integers(min_value=0), st.binary(min_size=1, max_size=9)),
        st.tuples(st.just("delete"), st.integers(min_value=0), st.integers(1, 9)),
        st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(0)),
        st.tuples(st.just("overwrite"), st.integers(min_value=0), st.binary(min_size=1, max_size=16)),
    ),
    min_size=1,
    max_size=4,
)


def mutate_bytes(data: bytes, steps: list[tuple[str, int, Any]]) -> bytes:
    """Apply flips, inserts, deletions, overwrites and truncations at positions taken modulo
    the current length, so every step lands somewhere in the data."""
    buf = bytearray(data)
    for kind, position, arg in steps:
        at = position % (len(buf) + 1)
        if kind == "flip" and at < len(buf):
            buf[at] ^= 1 << arg
        elif kind == "insert":
            buf[at:at] = arg
        elif kind == "delete":
            del buf[at : at + arg]
        elif kind == "truncate":
            del buf[at:]
        elif kind == "overwrite":
            buf[at : at + len(arg)] = arg
    return bytes(buf)
