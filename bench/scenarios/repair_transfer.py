"""Checkpoint transfer (the repair path that replaces a member's data): `join_ours` fills a
fresh one-member set with `mb` MB of rows (random 8 KiB text values, multi-row INSERTs of 2 MiB),
takes `box.snapshot()` and times `replicaset join` of a second member, polling its VmHWM
(and notes how much of the fill the kernel still had to write back when the join began).

What this module adds is the transfer alone, read from the two JSON logs (one wall clock):
from the member's `join_serving` (the checkpoint is open, its first chunk goes out) to the
joiner's `joined` (every chunk received and checked, the file fsynced and renamed in, the WAL
started at its vclock). MB/s = the bytes the joiner received / that window, beside the raw
loopback TCP throughput and the streamed file write measured in the same run, so the figure
reads as a fraction of what the machine allows. MB are 2^20 bytes, as in `join_ours`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.kit.report import MIB, fmt_int, fmt_pct, progress, ratio
from bench.scenarios import join_ours


def run(work: Path, mb: int) -> dict[str, Any]:
    """`join_ours.run` plus the transfer window; `failure` when the join did not finish."""
    progress(f"transfer: {mb} MB database, then a joiner")
    entry = join_ours.run(work, mb)
    ready, received, size = entry.get("checkpoint_ready_s"), entry.get("file_received_s"), entry.get("join_bytes")
    if "seconds" in entry and ready is not None and received is not None and received > ready and size:
        entry["transfer_s"] = received - ready
        entry["transfer_mb_per_s"] = size / MIB / entry["transfer_s"]
        progress(f"transfer: {fmt_int(size)} B in {entry['transfer_s']:.2f} s = {entry['transfer_mb_per_s']:.1f} MB/s")
    elif "seconds" in entry:
        entry["notes"].append("the logs did not date the transfer (no join_serving or joined event)")
    return entry


def transfer_mb_per_s(entry: dict[str, Any] | None) -> float | None:
    return entry.get("transfer_mb_per_s") if entry else None


def joiner_hwm_mb(entry: dict[str, Any] | None) -> float | None:
    return entry["joiner_hwm_kb"] / 1024 if entry and "seconds" in entry and entry.get("joiner_hwm_kb") else None


def report_lines(entry: dict[str, Any], limits: dict[str, Any]) -> list[str]:
    """The transfer window and its share of the limits, then `join_ours`' own lines."""
    if "seconds" not in entry:
        failure = entry.get("failure", "no figures")
        return [f"  FAILED: {failure.splitlines()[0][:200]}", *(f"      {line[:200]}" for line in failure.splitlines()[1:8])]
    tcp = limits.get("tcp", {}).get("mb_per_s")
    disk = limits.get("disk_stream", {}).get("mb_per_s")
    out = []
    if "transfer_s" in entry:
        mbs = entry["transfer_mb_per_s"]
        out.append(f"  transfer   {fmt_int(entry['join_bytes'])} B in {entry['transfer_s']:.2f} s = {mbs:.1f} MB/s "
                   f"(member's join_serving -> joiner's joined; {fmt_pct(ratio(mbs, tcp))} of raw loopback TCP, "
                   f"{fmt_pct(ratio(mbs, disk))} of a streamed file write + fsync)")
    out.append(f"  joiner     peak RSS (VmHWM) {entry['joiner_hwm_kb'] / 1024:.1f} MB")
    dirty = entry.get("dirty_kb_at_join")
    out.append(f"  page cache still to write back (Dirty + Writeback) when the joiner started: "
               f"{'-' if dirty is None else f'{dirty / 1024:,.0f} MB'} (the fill's writeback would slow the joiner's writes)")
    out.append("  the whole join, from the joiner's process start:")
    out += join_ours.report_lines(entry)
    return out
