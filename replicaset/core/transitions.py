"""Transition tables for the cores (h11's `_state.py`, docs/design/style.md §3).

A core that owns a state keeps its moves as data: state -> event -> the states the event
may leave it in. The `transition(table)` decorator makes that table the only way to move:
an event missing from its state's row is our own misuse of the core
(`LocalProtocolError`, nothing happens), and a method that leaves the core in a state its
row does not list is a bug in the core (an assertion fails).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar


class LocalProtocolError(Exception):
    """The runtime fed a core an event its state does not allow."""


M = TypeVar("M", bound=Callable[..., Any])


def transition(table: Mapping[Any, Mapping[str, frozenset[Any]]]) -> Callable[[M], M]:
    """Check an event method of a core against its transition table, before and after.

    The core keeps its state in `self.state` (an Enum), and the method's name is the event.
    """

    def check(method: M) -> M:
        name = method.__name__

        @functools.wraps(method)
        def step(self: Any, *args: Any, **kwargs: Any) -> Any:
            before = self.state
            allowed = table[before].get(name)
            if allowed is None:
                raise LocalProtocolError(f"{self}: {name} in state {before.value}")
            result = method(self, *args, **kwargs)
            assert self.state in allowed, f"{self}: {name} took state {before.value} to {self.state.value}"
            return result

        return step  # type: ignore[return-value]

    return check
