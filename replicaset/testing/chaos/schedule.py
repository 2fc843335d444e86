"""The fault schedule, a pure function of a seed and the options, and the nemesis that runs it.

Theory of operation. `make_schedule(seed, options)` draws every fault from one
`random.Random` seeded with the seed alone: kind, victims, partition sides, start, length,
delay, drop fraction, clock skew. The same seed and options give the same list, whatever the
machine (TigerBeetle's VOPR: one seed sets every fault). Faults come one at a time, each
healed before a quiet gap and the next, so at most one member is down at once and a
majority can always make progress between faults. Partitions are sets of blocked flows
(`(a, b)`: what `a` sends to `b`), computed here, so the schedule names every cut link.

The nemesis runs a schedule against a `Cluster` on wall-clock time from the workloads' start,
and logs what it did and when; timing is the only thing a replay does not repeat.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from replicaset.testing.chaos.cluster import Cluster, Member

PARTITIONS = ("partition-majority", "partition-bridge", "partition-ring", "one-way")
LINK_FAULTS = ("delay", "drop", "reset")
PROCESS_FAULTS = ("kill", "pause")
MEMBER_FAULTS = ("clock-skew", "ddl", "torn-tail", "remove-rejoin")
DEFAULT_KINDS = PROCESS_FAULTS + PARTITIONS + LINK_FAULTS + MEMBER_FAULTS
# Asked for by name: a full disk needs a tmpfs mount (root).
KINDS = DEFAULT_KINDS + ("full-disk",)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleOptions:
    size: int = 3
    duration_s: float = 60.0
    kinds: tuple[str, ...] = DEFAULT_KINDS
    fault_s: tuple[float, float] = (2.0, 6.0)
    gap_s: tuple[float, float] = (1.5, 4.0)
    first_at_s: float = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    at_s: float
    kind: str
    duration_s: float
    members: tuple[int, ...] = ()  # the victims, or the minority side
    flows: tuple[tuple[int, int], ...] = ()  # blocked (a sends to b), for partitions and link faults
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str) -> Any:
        return dict(self.params)[name]

    def describe(self) -> dict[str, Any]:
        found = asdict(self)
        found["params"] = dict(self.params)
        return found


def make_schedule(seed: int, options: ScheduleOptions) -> list[Fault]:
    """Faults until `options.duration_s`, drawn from `seed` alone."""
    unknown = set(options.kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    rng = random.Random(f"chaos-schedule-{seed}")
    members = list(range(1, options.size + 1))
    faults: list[Fault] = []
    at_s = options.first_at_s
    while True:
        kind = rng.choice(options.kinds)
        duration_s = round(rng.uniform(*options.fault_s), 3)
        if at_s + duration_s > options.duration_s:
            return faults
        faults.append(_draw(rng, kind, round(at_s, 3), duration_s, members))
        at_s += duration_s + rng.uniform(*options.gap_s)


def _draw(rng: random.Random, kind: str, at_s: float, duration_s: float, members: list[int]) -> Fault:
    fault = Fault(at_s=at_s, kind=kind, duration_s=duration_s)
    n = len(members)
    if kind in ("kill", "pause", "full-disk", "remove-rejoin"):
        return _with(fault, members=(rng.choice(members),))
    if kind == "torn-tail":
        return _with(fault, members=(rng.choice(members),), params=(("cut_bytes", rng.randint(1, 300)),))
    if kind == "ddl":
        return _with(fault, members=(rng.choice(members),), params=(("choice", rng.randrange(1000)),))
    if kind == "clock-skew":
        skew_ms = rng.choice((-1, 1)) * rng.randint(2_000, 30_000)
        return _with(fault, members=(rng.choice(members),), params=(("skew_ms", skew_ms),))
    if kind == "partition-majority":
        minority = tuple(sorted(rng.sample(members, (n - 1) // 2)))
        majority = [m for m in members if m not in minority]
        return _with(fault, members=minority, flows=_between(minority, majority))
    if kind == "partition-bridge":
        # Two sides that do not see each other; one member sees both.
        shuffled = rng.sample(members, n)
        bridge, rest = shuffled[0], shuffled[1:]
        left, right = rest[: len(rest) // 2], rest[len(rest) // 2:]
        return _with(fault, members=(bridge,), flows=_between(left, right),
                     params=(("left", tuple(sorted(left))), ("right", tuple(sorted(right)))))
    if kind == "partition-ring":
        # Each member hears a majority, itself and the next ones round a shuffled ring, and no
        # two members hear the same majority (Jepsen's majorities ring): one-way cuts.
        ring = rng.sample(members, n)
        heard = {ring[i]: {ring[(i + k) % n] for k in range(n // 2 + 1)} for i in range(n)}
        flows = tuple(sorted((src, dst) for dst in members for src in members if src != dst and src not in heard[dst]))
        return _with(fault, flows=flows, params=(("ring", tuple(ring)),))
    if kind == "one-way":
        src, dst = rng.sample(members, 2)
        return _with(fault, members=(src, dst), flows=((src, dst),))
    if kind in ("delay", "drop", "reset"):
        pairs = [(a, b) for a in members for b in members if a != b]
        chosen = tuple(sorted(rng.sample(pairs, rng.randint(1, len(pairs)))))
        if kind == "delay":
            return _with(fault, flows=chosen, params=(("delay_s", round(rng.uniform(0.02, 0.3), 3)),))
        if kind == "drop":
            return _with(fault, flows=chosen, params=(("fraction", round(rng.uniform(0.05, 0.5), 3)),))
        return _with(fault, flows=chosen, params=(("every_s", round(rng.uniform(0.3, 1.5), 3)),))
    raise ValueError(f"unknown fault kind {kind!r}")


def _with(fault: Fault, **fields: Any) -> Fault:
    return Fault(**{**{k: getattr(fault, k) for k in Fault.__slots__}, **fields})


def _between(side: list[int] | tuple[int, ...], other: list[int] | tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted({(a, b) for a in side for b in other} | {(b, a) for a in side for b in other}))


@dataclass
class Injected:
    """What the nemesis did: the fault, when it began and ended, and what went wrong."""

    fault: Fault
    start_s: float
    end_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {**self.fault.describe(), "started_s": round(self.start_s, 3),
                "ended_s": None if self.end_s is None else round(self.end_s, 3), "notes": self.notes}


# A fault the nemesis cannot carry out itself (torn tail, full disk, DDL) is handed to one of these.
Handler = Callable[[Cluster, Fault, "Injected"], Callable[[], None]]


class Nemesis:
    """Runs a schedule against a cluster in a thread of its own; `stop` cuts it short and
    heals what is under way."""

    def __init__(self, cluster: Cluster, schedule: list[Fault], now: Callable[[], float],
                 handlers: dict[str, Handler] | None = None) -> None:
        self.cluster, self.schedule, self.now = cluster, schedule, now
        self.handlers = handlers or {}
        self.injected: list[Injected] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-nemesis", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self, timeout_s: float) -> None:
        """Until every fault of the schedule was injected and healed, `timeout_s` at most: a
        seed's faults are the same on a slow machine, only later."""
        self._thread.join(timeout_s)

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _sleep_until(self, at_s: float) -> bool:
        """False when stopped first."""
        return not self._stop.wait(max(0.0, at_s - self.now()))

    def _run(self) -> None:
        for fault in self.schedule:
            if not self._sleep_until(fault.at_s):
                return
            record = Injected(fault, start_s=self.now())
            self.injected.append(record)
            try:
                heal = self._begin(fault, record)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be set up is reported, not fatal
                record.notes.append(f"could not inject: {type(exc).__name__}: {exc}")
                heal = self.cluster.network.heal
            ticking = fault.kind == "reset"
            while not self._stop.is_set() and self.now() < fault.at_s + fault.duration_s:
                if ticking:
                    for src, dst in fault.flows:
                        self.cluster.network.reset(src, dst)
                self._stop.wait(fault.param("every_s") if ticking else fault.at_s + fault.duration_s - self.now())
            try:
                heal()
            except Exception as exc:  # noqa: BLE001 - reported; the run heals everything at the end anyway
                record.notes.append(f"could not heal: {type(exc).__name__}: {exc}")
            record.end_s = self.now()

    def _begin(self, fault: Fault, record: Injected) -> Callable[[], None]:
        """Inject `fault`; what heals it."""
        cluster, network = self.cluster, self.cluster.network
        if fault.kind in self.handlers:
            return self.handlers[fault.kind](cluster, fault, record)
        if fault.kind == "kill":
            victim = cluster.member(fault.members[0])
            cluster.kill(victim)
            return lambda: _restart(cluster, victim, record)
        if fault.kind == "pause":
            victim = cluster.member(fault.members[0])
            cluster.pause(victim)
            return lambda: cluster.resume(victim)
        if fault.kind in PARTITIONS:
            for src, dst in fault.flows:
                network.block(src, dst)
            return network.heal
        if fault.kind == "delay":
            for src, dst in fault.flows:
                network.delay(src, dst, fault.param("delay_s"))
            return network.heal
        if fault.kind == "drop":
            for src, dst in fault.flows:
                network.drop(src, dst, fault.param("fraction"))
            return network.heal
        if fault.kind == "reset":
            return network.heal
        raise ValueError(f"no handler for fault kind {fault.kind!r}")


def _restart(cluster: Cluster, member: Member, record: Injected) -> None:
    try:
        cluster.restart(member)
    except RuntimeError as exc:
        record.notes.append(f"member {member.n} did not restart: {exc}")
