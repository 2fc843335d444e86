"""The storage engine in process, no server: CPU per single-row transaction (begin, one
`INSERT OR REPLACE` of a 100-character value at a random key of 100,000, commit), with a
flush every N transactions, under `wal_mode = write`; next to the floor SQLite itself puts
under it, measured in the same run: the same SQLite statements an engine transaction
needs (savepoint, the insert, the row version, release; per flush the vclock row and one
COMMIT), run straight on an apsw connection in WAL mode, `synchronous=NORMAL`.

The difference between the two is the engine's own Python: capture, versions, WAL
records, batches (issue "The fast path": <= 60 us at N = 1, <= 25 us at N = 16).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.kit.report import fmt_ratio, progress, ratio

BATCHES = (1, 16, 256)
KEYS = 100_000
VALUE = "v" * 100
SQL_CREATE = "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)"
SQL_WRITE = "INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)"
TARGET_US = {1: 60.0, 16: 25.0}


def _engine_us_per_txn(work: Path, batch: int, seconds: float, warmup_s: float) -> float:
    from replicaset.storage import Engine, EngineConfig

    data_dir = Path(tempfile.mkdtemp(prefix=f"engine_{batch}_", dir=work))
    engine = Engine.open(EngineConfig(data_dir=data_dir, instance_id=1), clock_ms=lambda: time.time_ns() // 1_000_000)
    try:
        txn = engine.begin()
        engine.execute(txn, SQL_CREATE)
        engine.commit(txn)
        engine.flush()
        rnd = random.Random(batch)

        def transactions(count: int) -> None:
            for n in range(count):
                txn = engine.begin()
                engine.execute(txn, SQL_WRITE, (rnd.randrange(KEYS), VALUE))
                engine.commit(txn)
                if (n + 1) % batch == 0:
                    engine.flush()
            engine.flush()

        return _cpu_us_per_txn(transactions, batch, seconds, warmup_s)
    finally:
        engine.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def _sqlite_us_per_txn(work: Path, batch: int, seconds: float, warmup_s: float) -> float:
    import apsw

    data_dir = Path(tempfile.mkdtemp(prefix=f"sqlite_{batch}_", dir=work))
    conn = apsw.Connection(str(data_dir / "db.sqlite"))
    try:
        conn.execute("PRAGMA journal_mode=WAL").fetchall()
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(SQL_CREATE)
        conn.execute("CREATE TABLE version(tbl TEXT, key TEXT, hlc INTEGER, origin INTEGER, deleted INTEGER, "
                     "PRIMARY KEY (tbl, key)) WITHOUT ROWID")
        conn.execute("CREATE TABLE vclock(origin INTEGER PRIMARY KEY, lsn INTEGER)")
        rnd = random.Random(batch)
        lsn = [0]

        def transactions(count: int) -> None:
            for n in range(count):
                if n % batch == 0:
                    conn.execute("BEGIN IMMEDIATE")
                key = rnd.randrange(KEYS)
                lsn[0] += 1
                conn.execute("SAVEPOINT txn")
                conn.execute(SQL_WRITE, (key, VALUE))
                conn.execute("INSERT OR REPLACE INTO version VALUES ('kv', ?, ?, 1, 0)", (f"kv:{key}", lsn[0]))
                conn.execute("RELEASE txn")
                if (n + 1) % batch == 0:
                    conn.execute("INSERT OR REPLACE INTO vclock VALUES (1, ?)", (lsn[0],))
                    conn.execute("COMMIT")
            if not conn.get_autocommit():
                conn.execute("COMMIT")

        return _cpu_us_per_txn(transactions, batch, seconds, warmup_s)
    finally:
        conn.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def _cpu_us_per_txn(transactions: Any, batch: int, seconds: float, warmup_s: float) -> float:
    """Runs rounds of `transactions` until `seconds` of CPU are spent past the warm-up;
    CPU microseconds per transaction (process time: this process does nothing else)."""
    round_txns = max(batch, 256)
    end_warmup = time.process_time() + warmup_s
    while time.process_time() < end_warmup:
        transactions(round_txns)
    start = time.process_time()
    done = 0
    while time.process_time() - start < seconds:
        transactions(round_txns)
        done += round_txns
    return (time.process_time() - start) / done * 1e6


def run(work: Path, seconds: float, warmup_s: float) -> list[dict[str, Any]]:
    results = []
    for batch in BATCHES:
        progress(f"engine in process, a flush every {batch}")
        results.append({"batch": batch, "engine_us": _engine_us_per_txn(work, batch, seconds, warmup_s),
                        "sqlite_us": _sqlite_us_per_txn(work, batch, seconds, warmup_s)})
    return results


def report_lines(results: list[dict[str, Any]]) -> list[str]:
    out = ["ENGINE  in process, wal_mode=write: CPU us per single-row transaction (INSERT OR REPLACE, 100-char value), "
           "a flush every N; SQLite's own statements for it on a bare apsw connection beside it",
           f"  {'N':>4} {'engine us':>10} {'sqlite us':>10} {'engine/sqlite':>14} {'target us':>10}"]
    for r in results:
        target = TARGET_US.get(r["batch"])
        out.append(f"  {r['batch']:>4} {r['engine_us']:>10.1f} {r['sqlite_us']:>10.1f} "
                   f"{fmt_ratio(ratio(r['engine_us'], r['sqlite_us'])):>14} {'-' if target is None else f'{target:g}':>10}")
    return out


def targets(results: list[dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    found: list[tuple[str, str, bool | None]] = []
    for r in results:
        target = TARGET_US.get(r["batch"])
        if target is not None:
            found.append((f"engine <= {target:g} us per txn, flush every {r['batch']}", f"{r['engine_us']:.1f} us",
                          r["engine_us"] <= target))
    return found
