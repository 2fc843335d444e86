"""WAL disk use under a steady write load, with GC on, next to Tarantool 2.6.

Each set runs alone for `seconds`: three members of ours with WAL GC configured to act within
the run (`wal_max_size` small, `checkpoint_interval`, `[gc] interval_s`, `min_retention_s` =
`[replication] delta_sync_threshold_seconds` = `retention_s`, `max_retention_s` = twice it,
the least the start-up check allows), then a Tarantool 2.6 full mesh with its default
`checkpoint_count` (2) and `checkpoint_interval` set to ours (its other options are
`bench.kit.sets`', `wal_max_size` its default). The same client drives both: one connector
connection on member 1 running `INSERT OR REPLACE INTO kv VALUES (?, ?)` on random keys of
KEY_RANGE with random 100-char text values (Tarantool compresses its snapshots), paced at `rate`/s, so the data set itself stays bounded.
Every `sample_s` the script sizes member 1's WAL (ours: `wal/`; Tarantool: `*.xlog`) and
checkpoints (ours: `snap/`; Tarantool: `*.snap`) and, for ours, reads `box.info.gc`.

Bounded means: the largest WAL size seen in the second half of the run is at most the largest
of the first half times (1 + `margin`) plus one `wal_max_size` segment. A first half that has
not reached its steady state (fewer than two checkpoint intervals) makes this weak: the report
says how many checkpoint intervals the first half held."""

from __future__ import annotations

import base64
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from bench.kit.client import KEY_RANGE, MAX_ERRORS_PER_THREAD, STALL_NS, VALUE_BYTES, close_quietly, connect
from bench.kit.report import MIB, fmt_int, progress
from bench.kit.sets import CLIENT_SOCKET_TIMEOUT_S, OurSet, TarantoolSet, run_set, table_digest, wait_converged
from bench.scenarios.set_writes import SQL_INSERT

WAL_MAX_SIZE = 1 * MIB
GC_INTERVAL_S = 5.0
TIMELINE_POINTS = 12
VALUE_POOL = 4096  # random values the writer picks from: neither side's compression gains on them


def our_options(checkpoint_interval_s: float, retention_s: float) -> dict[str, Any]:
    return {
        "wal_max_size": WAL_MAX_SIZE,
        "checkpoint_interval": checkpoint_interval_s,
        "gc.interval_s": GC_INTERVAL_S,
        "gc.min_retention_s": retention_s,
        "gc.max_retention_s": 2 * retention_s,
        "replication.delta_sync_threshold_seconds": retention_s,
    }


def files_bytes(directory: Path, suffixes: tuple[str, ...] | None = None) -> tuple[int, int]:
    """(bytes, files) of the regular files in `directory` (not below it) ending in one of
    `suffixes` (any when None); a file removed while it is read counts as nothing."""
    total = count = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0, 0
    for entry in entries:
        if suffixes is not None and not entry.name.endswith(suffixes):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
                count += 1
        except OSError:
            continue
    return total, count


def tree_bytes(directory: Path) -> int:
    total = 0
    for root, _, names in os.walk(directory):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


class PacedWriter:
    """One connector connection writing at `rate`/s in a thread (each request at its slot;
    one that is late does not make the next ones hurry beyond the slot)."""

    def __init__(self, port: int, rate: float, seconds: float, seed: int) -> None:
        self.port, self.rate, self.seconds = port, rate, seconds
        self.rnd = random.Random(seed)
        text = base64.b64encode(self.rnd.randbytes(VALUE_POOL * VALUE_BYTES)).decode()
        self.values = [text[i * VALUE_BYTES:(i + 1) * VALUE_BYTES] for i in range(VALUE_POOL)]
        self.done = self.errors = self.stalls = 0
        self.samples: list[str] = []
        self.elapsed_s = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        conn = connect(self.port, CLIENT_SOCKET_TIMEOUT_S)
        try:
            start = time.monotonic_ns()
            end = start + int(self.seconds * 1e9)
            i = 0
            while True:
                slot = start + int(i * 1e9 / self.rate)
                if slot >= end:
                    break
                pause = (slot - time.monotonic_ns()) / 1e9
                if pause > 0:
                    time.sleep(pause)
                i += 1
                t0 = time.monotonic_ns()
                try:
                    conn.execute(SQL_INSERT, [self.rnd.randrange(KEY_RANGE), self.rnd.choice(self.values)])
                    self.done += 1
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    self.errors += 1
                    if len(self.samples) < 3:
                        self.samples.append(f"{type(exc).__name__}: {exc}")
                    if self.errors >= MAX_ERRORS_PER_THREAD:
                        self.samples.append(f"writer gave up after {self.errors} errors")
                        break
                self.stalls += time.monotonic_ns() - t0 > STALL_NS
            self.elapsed_s = (time.monotonic_ns() - start) / 1e9
        finally:
            close_quietly([conn])

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()


def ours_sizes(rs: OurSet) -> dict[str, Any]:
    data = rs.data_dir(1)
    wal, wal_files = files_bytes(data / "wal")
    snap, snap_files = files_bytes(data / "snap")
    db, _ = files_bytes(data, ("db.sqlite", "db.sqlite-wal", "db.sqlite-shm"))
    sample = {"wal": wal, "wal_files": wal_files, "snap": snap, "snap_files": snap_files, "db": db,
              "total": tree_bytes(data)}
    try:
        gc = rs.info(rs.ports[0]).get("gc", {})
        sample.update(kept_because=gc.get("kept_because"), segments=gc.get("segments"),
                      removed_segments=gc.get("removed_segments"))
    except Exception as exc:  # noqa: BLE001 - a missed box.info.gc is only a missing column
        sample["kept_because"] = f"? {type(exc).__name__}"
    return sample


def tarantool_sizes(rs: TarantoolSet) -> dict[str, Any]:
    work = rs.work_dir(1)
    wal, wal_files = files_bytes(work, (".xlog",))
    snap, snap_files = files_bytes(work, (".snap", ".snap.inprogress"))
    return {"wal": wal, "wal_files": wal_files, "snap": snap, "snap_files": snap_files, "total": tree_bytes(work)}


def drive(rs: OurSet | TarantoolSet, entry: dict[str, Any], seconds: float, rate: float, sample_s: float) -> None:
    """The paced load on member 1 and the samples, then whether the members agree."""
    sizes = ours_sizes if isinstance(rs, OurSet) else tarantool_sizes
    took, _ = wait_converged(rs)
    if took is None:
        raise RuntimeError("the members did not converge after the CREATE TABLE")
    writer = PacedWriter(rs.ports[0], rate, seconds, seed=7)
    samples: list[tuple[float, dict[str, Any]]] = []
    t0 = time.monotonic()
    writer.start()
    next_at = t0
    shown = t0
    while True:
        now = time.monotonic()
        samples.append((now - t0, sizes(rs)))
        if now - shown >= max(30.0, sample_s):
            shown = now
            s = samples[-1][1]
            progress(f"wal ({rs.name}): +{now - t0:.0f} s, {writer.done:,} writes, WAL {s['wal'] / MIB:.1f} MiB "
                     f"in {s['wal_files']} files, checkpoints {s['snap'] / MIB:.1f} MiB")
        if now - t0 >= seconds:
            break
        next_at += sample_s
        time.sleep(max(0.0, min(next_at, t0 + seconds) - time.monotonic()))
    if not writer.join(CLIENT_SOCKET_TIMEOUT_S + 10):
        entry["notes"].append("the writer thread was still running at the end")
    samples.append((time.monotonic() - t0, sizes(rs)))
    entry["samples"] = samples
    entry["writes"] = writer.done
    entry["write_errors"] = writer.errors
    entry["write_error_samples"] = writer.samples
    entry["stalls"] = writer.stalls
    entry["writer_s"] = writer.elapsed_s
    took, vclocks = wait_converged(rs)
    entry["final_converged"] = took is not None
    entry["final_vclocks"] = vclocks
    entry["digests"] = [table_digest(p) for p in rs.ports]
    if len(set(entry["digests"])) != 1:
        entry["notes"].append(f"DIVERGENCE: kv differs between members: {entry['digests']}")


def run(work: Path, binary: str | None, seconds: float, rate: float, sample_s: float, checkpoint_interval_s: float,
        retention_s: float) -> dict[str, Any]:
    """Ours, then Tarantool (when installed); {set name: entry}."""
    sets: dict[str, Any] = {}
    ours = OurSet(work, name="wal_ours", options=our_options(checkpoint_interval_s, retention_s))
    run_set(ours, sets, lambda entry: drive(ours, entry, seconds, rate, sample_s), kind="ours")
    if binary:
        tnt = TarantoolSet(work, binary, name="wal_tarantool", box_cfg={"checkpoint_interval": checkpoint_interval_s})
        run_set(tnt, sets, lambda entry: drive(tnt, entry, seconds, rate, sample_s), kind="tarantool")
    return sets


def halves(samples: list[tuple[float, dict[str, Any]]], seconds: float, key: str) -> tuple[int, int]:
    """Largest `key` among the samples of the first half of the run, and of the second."""
    first = [s[key] for t, s in samples if t < seconds / 2]
    second = [s[key] for t, s in samples if t >= seconds / 2]
    return (max(first) if first else 0), (max(second) if second else 0)


def bounded(entry: dict[str, Any], seconds: float, margin: float) -> bool | None:
    samples = entry.get("samples")
    if not samples:
        return None
    first, second = halves(samples, seconds, "wal")
    return second <= first * (1 + margin) + WAL_MAX_SIZE


def figures(entry: dict[str, Any], seconds: float) -> dict[str, float]:
    samples = entry["samples"]
    first, second = halves(samples, seconds, "wal")
    return {
        "wal_max_mib": max(s["wal"] for _, s in samples) / MIB,
        "wal_final_mib": samples[-1][1]["wal"] / MIB,
        "snap_max_mib": max(s["snap"] for _, s in samples) / MIB,
        "snap_final_mib": samples[-1][1]["snap"] / MIB,
        "total_max_mib": max(s["wal"] + s["snap"] for _, s in samples) / MIB,
        "first_half_max_mib": first / MIB,
        "second_half_max_mib": second / MIB,
        "dir_max_mib": max(s["total"] for _, s in samples) / MIB,
    }


def short(name: str) -> str:
    """The set's name in the tables: 'ours' or 'tarantool' (its directory is 'wal_ours', ...)."""
    return name.removeprefix("wal_")


def report_lines(sets: dict[str, Any], seconds: float, rate: float, sample_s: float, checkpoint_interval_s: float,
                 retention_s: float, margin: float) -> list[str]:
    out = [f"  load: one connector connection on member 1, INSERT OR REPLACE on {KEY_RANGE:,} random keys "
           f"(random {VALUE_BYTES}-char text), paced at {rate:g}/s for {seconds:g} s per set; member 1's files sized "
           f"every {sample_s:g} s",
           f"  ours: wal_max_size {WAL_MAX_SIZE // 1024} KiB, checkpoint_interval {checkpoint_interval_s:g} s, "
           f"checkpoint_count 2 (default), [gc] interval_s {GC_INTERVAL_S:g}, min_retention_s {retention_s:g}, "
           f"max_retention_s {2 * retention_s:g}, delta_sync_threshold_seconds {retention_s:g}",
           f"  tarantool: checkpoint_count 2 (its default), checkpoint_interval {checkpoint_interval_s:g} s (set to "
           f"ours, for fairness; its default is 3600), wal_max_size its default (256 MiB; a checkpoint starts a new "
           f".xlog anyway)",
           f"  bounded = the largest WAL of the second half <= the largest of the first half x {1 + margin:g} + "
           f"{WAL_MAX_SIZE // 1024} KiB; the first half holds {seconds / 2 / checkpoint_interval_s:.1f} "
           f"checkpoint intervals",
           f"  {'set':<10} {'writes':>9} {'rate':>7} {'WAL max':>9} {'final':>7} {'1st half':>9} {'2nd half':>9} "
           f"{'snap max':>9} {'final':>7} {'WAL+snap':>9} {'dir max':>8}  bounded",
           "  " + " " * 29 + "(MiB)"]
    for name, entry in sets.items():
        if not entry.get("samples"):
            out.append(f"  {short(name):<10} FAILED: {entry.get('failure', 'no samples')[:200]}")
            continue
        f = figures(entry, seconds)
        ok = bounded(entry, seconds, margin)
        achieved = entry["writes"] / entry["writer_s"] if entry.get("writer_s") else None
        out.append(f"  {short(name):<10} {entry['writes']:>9,} {fmt_int(achieved):>7} {f['wal_max_mib']:>9.1f} "
                   f"{f['wal_final_mib']:>7.1f} {f['first_half_max_mib']:>9.1f} {f['second_half_max_mib']:>9.1f} "
                   f"{f['snap_max_mib']:>9.1f} {f['snap_final_mib']:>7.1f} {f['total_max_mib']:>9.1f} "
                   f"{f['dir_max_mib']:>8.1f}  {'yes' if ok else 'NO'}")
    for name, entry in sets.items():
        samples = entry.get("samples")
        if not samples:
            continue
        step = max(1, len(samples) // TIMELINE_POINTS)
        points = samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else [])
        timeline = ", ".join(f"{t:.0f}s {s['wal'] / MIB:.1f}/{s['snap'] / MIB:.1f}" for t, s in points)
        name = short(name)
        out.append(f"  {name} WAL/checkpoint MiB over time: {timeline}")
        if "kept_because" in samples[-1][1]:
            kept: dict[str, int] = {}
            for _, s in samples:
                kept[str(s.get("kept_because"))] = kept.get(str(s.get("kept_because")), 0) + 1
            last = samples[-1][1]
            out.append(f"  {name} box.info.gc: kept_because over the samples {kept}; at the end {last.get('segments')} "
                       f"segments, {last.get('removed_segments')} removed since start")
        out.append(f"  {name} write errors {entry['write_errors']} {entry['write_error_samples'] or ''}, stalls (> 1 s) "
                   f"{entry['stalls']}; at the end vclocks {'agree' if entry.get('final_converged') else 'DISAGREE'}, "
                   f"kv digests {'agree' if len(set(entry.get('digests', []))) == 1 else 'DIFFER'}")
    return out
