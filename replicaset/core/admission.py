"""Apply-once admission: the one rule that decides whether a row of an origin is taken.

Rows of one origin are taken in LSN order with no hole, each once (docs/design/README.md §4.3). The engine
asks it of the rows it applies (against its pending vclock), the relay of the rows it sends
(against what it sent): a copy of a row held already is dropped, the next row is taken, and
a row past the next one is a gap that must never be papered over.
"""

from __future__ import annotations

from enum import Enum


class Admission(Enum):
    HELD = "held"
    NEXT = "next"
    GAP = "gap"


def admit(held_lsn: int, lsn: int) -> Admission:
    """Whether the row at `lsn` of an origin whose rows are held up to `held_lsn` is taken."""
    if lsn <= held_lsn:
        return Admission.HELD
    if lsn == held_lsn + 1:
        return Admission.NEXT
    return Admission.GAP
