"""What the set benchmarks share about a run: the options every one takes, the measured
seconds they settle on, and the start of a run (warm-up, the Tarantool peer, a work dir)."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.kit.procs import pin_children_to_this_checkout
from bench.kit.tarantool import INSTALL_HINT, find_tarantool, tarantool_version

SECONDS_HELP = "measured seconds per figure (default 5; 2 with --quick)"
TMP_DIR_HELP = "where the temporary data directories go"
TARANTOOL_HELP = "Tarantool binary (default /usr/bin/tarantool or PATH)"


def settle_seconds(parser: argparse.ArgumentParser, args: argparse.Namespace, low: float = 0.5) -> None:
    """`--seconds` defaults to 5, or 2 with `--quick`, and must lie in `low`..600."""
    if args.seconds is None:
        args.seconds = 2.0 if args.quick else 5.0
    if not low <= args.seconds <= 600:
        parser.error(f"--seconds must be between {low:g} and 600")


@dataclass(frozen=True)
class Run:
    warmup_s: float
    tarantool: str | None  # the binary, None when not installed
    tarantool_version: str
    work: Path


def start_run(args: argparse.Namespace, prefix: str) -> Run:
    """Children import this checkout; the Tarantool peer is looked up; a work dir is made
    (the caller removes it)."""
    pin_children_to_this_checkout()
    binary = find_tarantool(args.tarantool)
    version = tarantool_version(binary) if binary else f"not installed ({INSTALL_HINT})"
    return Run(warmup_s=0.5 if args.quick else 1.0, tarantool=binary, tarantool_version=version,
               work=Path(tempfile.mkdtemp(prefix=prefix, dir=args.tmp_dir)))
