"""CPU time and memory of processes, read from /proc: the server's cost per operation is its
CPU time over a measured window, and its memory is what the kernel says it holds (VmRSS now,
VmHWM at its peak), not what it thinks it allocated. A process that is gone reads as None."""

from __future__ import annotations

import os
import threading
import time

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def read_status_fields(pid: int, fields: tuple[str, ...]) -> dict[str, int]:
    """`VmRSS`-style fields of /proc/PID/status in kB, in one read; those not found are left out."""
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                name, _, rest = line.partition(":")
                if name in fields:
                    found[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    return found


def read_status_kb(pid: int, field: str) -> int | None:
    """A `VmRSS`-style field of /proc/PID/status in kB, or None when the process is gone."""
    return read_status_fields(pid, (field,)).get(field)


def read_cpu_seconds(pid: int) -> float | None:
    """utime + stime of every thread of PID, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def read_statm_rss_kib(pid: int) -> int:
    """Resident pages of PID from /proc/PID/statm in KiB; 0 when the process is gone, so a
    process that ends between two samples adds nothing to a sum."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_KIB
    except (OSError, IndexError, ValueError):
        return 0


def read_pss_kib(pid: int) -> int:
    """Proportional set size of PID in KiB (/proc/PID/smaps_rollup): a page shared by N
    processes counts 1/N in each, so a sum over a process tree is the memory the tree holds
    (a sum of RSS counts a forked worker's pages shared with its parent twice). 0 when the
    process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return 0


def descendants(root: int) -> list[tuple[int, str]]:
    """(pid, command name) of every process below `root`: Spark's JVM and Python workers are
    started by the driver and by each other, so their memory is found through the tree."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
        names[int(entry)] = name
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            out.append((child, names.get(child, "?")))
            stack.append(child)
    return out


class CpuWindow:
    """CPU share of one core used by each pid between construction and stop()."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.t0 = time.monotonic()
        self.c0 = [read_cpu_seconds(pid) for pid in pids]
        self.shares: list[float | None] = []

    def stop(self) -> list[float | None]:
        elapsed = time.monotonic() - self.t0
        c1 = [read_cpu_seconds(pid) for pid in self.pids]
        self.shares = [(b - a) / elapsed if a is not None and b is not None and elapsed > 0 else None
                       for a, b in zip(self.c0, c1)]
        return self.shares


class CpuMarks:
    """CPU seconds each pid used over a load's measured window: timers read /proc at the end of
    the warm-up and at the end, so the window falls on the clients' own instants (the start is
    only known once every connection is open). `schedule` is the load's start callback."""

    def __init__(self, pids: list[int], warmup_s: float, seconds: float) -> None:
        self.pids = pids
        self.warmup_s = warmup_s
        self.seconds = seconds
        self.marks: dict[str, list[float | None]] = {}
        self._timers: list[threading.Timer] = []

    def schedule(self, start_ns: int) -> None:
        warm_end = start_ns + int(self.warmup_s * 1e9)
        end = warm_end + int(self.seconds * 1e9)
        for name, at in (("warm_end", warm_end), ("end", end)):
            timer = threading.Timer(max(0.0, (at - time.monotonic_ns()) / 1e9), self._mark, args=(name,))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def _mark(self, name: str) -> None:
        self.marks[name] = [read_cpu_seconds(pid) for pid in self.pids]

    def used_s(self, timeout_s: float) -> list[float | None]:
        """Wait (at most `timeout_s` per timer) for both marks; CPU seconds per pid, None where
        a mark is missing or the process was gone."""
        for timer in self._timers:
            timer.join(timeout=timeout_s)
        c0, c1 = self.marks.get("warm_end"), self.marks.get("end")
        if c0 is None or c1 is None:
            return [None for _ in self.pids]
        return [b - a if a is not None and b is not None else None for a, b in zip(c0, c1)]


class CpuSampler:
    """CPU seconds of each pid sampled every `interval_s` against the wall clock (ns since the
    epoch), from construction until stop(): for a tool that runs its own load and timestamps its
    own requests, whose measured window is known only afterwards."""

    def __init__(self, pids: list[int], interval_s: float) -> None:
        self.pids = pids
        self.interval_s = interval_s
        self.samples: list[tuple[int, list[float | None]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time_ns(), [read_cpu_seconds(pid) for pid in self.pids]))
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def window(self, t0_ns: int, t1_ns: int) -> tuple[int, int, list[float | None]] | None:
        """The first sample at or after `t0_ns` and the last at or before `t1_ns`: their instants
        and the CPU seconds per pid between them (count the operations in the same window);
        None when fewer than two samples fall inside."""
        inside = [s for s in self.samples if t0_ns <= s[0] <= t1_ns]
        if len(inside) < 2:
            return None
        (w0, c0), (w1, c1) = inside[0], inside[-1]
        return w0, w1, [b - a if a is not None and b is not None else None for a, b in zip(c0, c1)]


class RssWatch:
    """Polls VmRSS and VmHWM of one pid every `interval_s` in a thread, from construction until
    stop(): VmHWM alone would miss nothing, but a process that exits takes it along, and VmRSS
    peaks say when the memory was held."""

    def __init__(self, pid: int, interval_s: float) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.hwm_kb = 0
        self.rss_peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        found = read_status_fields(self.pid, ("VmHWM", "VmRSS"))
        self.hwm_kb = max(self.hwm_kb, found.get("VmHWM", 0))
        self.rss_peak_kb = max(self.rss_peak_kb, found.get("VmRSS", 0))

    def stop(self) -> None:
        self.sample()
        self._stop.set()
        self._thread.join(timeout=5)
