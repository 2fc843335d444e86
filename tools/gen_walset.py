"""Write a realistic multi-member WAL set for the audit's tests and benchmarks.

Each of `--members` members writes transactions (origin = its id, LSNs 1, 2, ... with HLC stamps
that increase with them) on an `accounts` table; every member receives every other origin's rows
after a random delay, in that origin's order, and logs them interleaved with its own, as a real
replica set does. Rows are written with `wal.Wal.open(...).append(...)` in the rows payload
format (`replicaset.storage.rows.DmlPayload`/`DdlPayload`), one directory per member:
`OUT/mN/instance.toml` and `OUT/mN/wal/`.

Violations are injected afterwards by rewriting segment files (the `Wal` refuses them, as it
should): `--inject duplicate,gap,swap,diverge,behind,head,corrupt`. `--gc-segments N` drops the
first N segments of the last member (a GC horizon; a clean set stays clean). What was injected
is written to `OUT/manifest.json` and printed.

    python tools/gen_walset.py OUT --rows 30000 --inject gap,diverge
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replicaset.storage.rows import CapturedRow, DdlPayload, DmlPayload, Op  # noqa: E402
from wal import Record, RecordType, Wal, encode_record  # noqa: E402
from wal.segment import list_segments, scan_segment, write_segment_header  # noqa: E402

INJECTIONS = ("duplicate", "gap", "swap", "diverge", "behind", "head", "corrupt")
HEAD_ROWS_MISSING = 3
NODE_SHIFT = 16
PHYSICAL_SHIFT = 22
START_MS = 1_750_000_000_000
CREATE_SQL = "CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT, balance INTEGER)"
WINDOW_MS = 1000
MAX_RECORD_BYTES = 1 << 20


def _stamp(ms: int, node: int, logical: int) -> int:
    return (ms << PHYSICAL_SHIFT) | (node << NODE_SHIFT) | logical


def generate(
    out: Path, *, members: int = 3, rows: int = 30000, seed: int = 1, segment_bytes: int = 1 << 20,
    rate_per_ms: float = 2.0, delay_ms_max: int = 40, batch_rows: int = 256,
) -> dict:
    """Write the set; `rows` counts WAL rows over all members (each member logs every row)."""
    rng = random.Random(seed)
    txns_per_origin = max(2, rows // (members * members))
    wals = {}
    for m in range(1, members + 1):
        directory = out / f"m{m}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "instance.toml").write_text(
            f'replicaset_uuid = "8c5e4a52-0000-4000-8000-00000000abcd"\n'
            f'instance_uuid = "8c5e4a52-0000-4000-8000-0000000000{m:02d}"\ninstance_id = {m}\n'
        )
        wals[m] = Wal.open(directory / "wal", max_size_bytes=segment_bytes, max_record_bytes=MAX_RECORD_BYTES)
    lsn = {o: 0 for o in range(1, members + 1)}
    last_arrival = {(m, o): 0 for m in wals for o in lsn}
    last_stamp = {o: 0 for o in lsn}
    ids: dict[int, list[int]] = {o: [] for o in lsn}
    pending: dict[int, list[tuple[int, int, int, Record]]] = {m: [] for m in wals}
    written = {m: 0 for m in wals}

    def make(origin: int, ms: int) -> Record:
        stamp = max(_stamp(ms, origin, 0), last_stamp[origin] + 1)
        last_stamp[origin] = stamp
        lsn[origin] += 1
        if origin == 1 and lsn[origin] == 1:
            payload = DdlPayload(hlc=stamp, sql=CREATE_SQL, hash_before=0, hash_after=1).pack()
            return Record(type=RecordType.DDL, origin=1, lsn=1, txn_id=stamp, payload=payload)
        changes = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            roll = rng.random()
            mine = ids[origin]
            if roll < 0.6 or not mine:
                key = (len(mine) << 5 | origin) + 1000 * 0
                key = ((lsn[origin] * 4 + len(changes)) << 5) | origin
                mine.append(key)
                new = {"id": key, "owner": f"o{origin}-{lsn[origin]}", "balance": rng.randint(0, 1000)}
                changes.append(CapturedRow(table="accounts", op=Op.INSERT, key=f"accounts:{key}", new=new))
            elif roll < 0.9:
                key = rng.choice(mine)
                old = {"id": key, "owner": f"o{origin}", "balance": rng.randint(0, 1000)}
                new = dict(old, balance=rng.randint(0, 1000))
                changes.append(CapturedRow(table="accounts", op=Op.UPDATE, key=f"accounts:{key}", old=old, new=new))
            else:
                key = mine.pop(rng.randrange(len(mine)))
                old = {"id": key, "owner": f"o{origin}", "balance": 0}
                changes.append(CapturedRow(table="accounts", op=Op.DELETE, key=f"accounts:{key}", old=old))
        payload = DmlPayload(hlc=stamp, schema_id=(1, 1), rows=changes).pack()
        return Record(type=RecordType.DML, origin=origin, lsn=lsn[origin], txn_id=stamp, payload=payload)

    def emit(m: int, until_ms: int | None) -> None:
        queue = pending[m]
        queue.sort()
        cut = len(queue) if until_ms is None else next((i for i, q in enumerate(queue) if q[0] >= until_ms), len(queue))
        ready, pending[m] = queue[:cut], queue[cut:]
        for start in range(0, len(ready), batch_rows):
            wals[m].append([r for *_, r in ready[start : start + batch_rows]])
        written[m] += len(ready)

    ms = START_MS
    # The DDL first: every member holds it before any data row.
    ddl = make(1, ms)
    for m in wals:
        pending[m].append((ms, 1, 1, ddl))
        last_arrival[(m, 1)] = ms
    window_end = ms + WINDOW_MS
    while min(lsn.values()) < txns_per_origin:
        ms += 1
        for origin in lsn:
            count = int(rate_per_ms) + (rng.random() < rate_per_ms - int(rate_per_ms))
            for _ in range(count):
                if lsn[origin] >= txns_per_origin:
                    break
                record = make(origin, ms)
                for m in wals:
                    arrival = ms if m == origin else ms + 1 + rng.randint(0, delay_ms_max)
                    arrival = max(arrival, last_arrival[(m, origin)])
                    last_arrival[(m, origin)] = arrival
                    pending[m].append((arrival, origin, record.lsn, record))
        if ms >= window_end:
            for m in wals:
                emit(m, ms + 1)
            window_end = ms + WINDOW_MS
    for m in wals:
        emit(m, None)
        wals[m].close()
    return {
        "members": {f"m{m}": str(out / f"m{m}") for m in wals},
        "rows": sum(written.values()),
        "txns_per_origin": txns_per_origin,
        "injected": [],
    }


def _rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Rewrite one segment with `change(list of records)`; the records are re-encoded."""
    scan = scan_segment(path)
    records = [r for _, r in scan.records]
    records = change(records)
    data = write_segment_header(scan.start_vclock) + b"".join(
        encode_record(r, max_record_bytes=MAX_RECORD_BYTES) for r in records)
    path.write_bytes(data)


def _find(wal_dir: Path, origin: int, pick) -> tuple[Path, int, Record]:  # type: ignore[no-untyped-def]
    """The segment and index of a record of `origin` chosen by `pick(list of lsns)`."""
    located = []
    for path in list_segments(wal_dir):
        for i, (_, r) in enumerate(scan_segment(path).records):
            if r.origin == origin:
                located.append((path, i, r))
    return located[pick(len(located))]


def inject(out: Path, kinds: list[str], manifest: dict, *, members: int = 3) -> None:
    wal = lambda m: out / f"m{m}" / "wal"  # noqa: E731
    for kind in kinds:
        if kind == "duplicate":  # member 2 logs origin 3's row twice
            path, i, rec = _find(wal(2), 3, lambda n: n // 2)
            last = list_segments(wal(2))[-1]
            with open(last, "ab") as f:
                f.write(encode_record(rec, max_record_bytes=MAX_RECORD_BYTES))
            entry = {"kind": kind, "member": "m2", "origin": 3, "lsn": rec.lsn}
        elif kind == "gap":  # member 3 lacks one row of origin 1 in the middle
            path, i, rec = _find(wal(3), 1, lambda n: n // 2)
            _rewrite(path, lambda rs: rs[:i] + rs[i + 1 :])
            entry = {"kind": kind, "member": "m3", "origin": 1, "lsn": rec.lsn}
        elif kind == "swap":  # member 1 logs two rows of origin 2 in the wrong order
            path, i, rec = _find(wal(1), 2, lambda n: n // 3)
            recs = scan_segment(path).records
            j = next(k for k in range(i + 1, len(recs)) if recs[k][1].origin == 2)

            def swap(rs: list[Record], i: int = i, j: int = j) -> list[Record]:
                rs[i], rs[j] = rs[j], rs[i]
                return rs

            _rewrite(path, swap)
            entry = {"kind": kind, "member": "m1", "origin": 2, "lsn": recs[j][1].lsn, "after_lsn": rec.lsn}
        elif kind == "diverge":  # member 1 holds a different payload for one row of origin 3
            path, i, rec = _find(wal(1), 3, lambda n: n // 4)
            doc = DmlPayload.unpack(rec.payload)
            doc.rows[0].new = dict(doc.rows[0].new or doc.rows[0].old or {}, balance=-1)
            if doc.rows[0].op is Op.DELETE:
                doc.rows[0].op = Op.UPDATE
            changed = Record(type=rec.type, origin=3, lsn=rec.lsn, txn_id=rec.txn_id, payload=doc.pack())

            def replace(rs: list[Record], i: int = i, changed: Record = changed) -> list[Record]:
                rs[i] = changed
                return rs

            _rewrite(path, replace)
            entry = {"kind": kind, "member": "m1", "origin": 3, "lsn": rec.lsn}
        elif kind == "behind":  # member 2 misses the last 5 rows of origin 1
            last = list_segments(wal(2))[-1]
            recs = [r for _, r in scan_segment(last).records]
            of_origin = [r.lsn for r in recs if r.origin == 1][-5:]
            _rewrite(last, lambda rs: [r for r in rs if not (r.origin == 1 and r.lsn in of_origin)])
            entry = {"kind": kind, "member": "m2", "origin": 1, "lsn": of_origin[0], "missing": len(of_origin)}
        elif kind == "head":  # member 2 lacks the first rows of origin 2 although its horizon is 0
            first = list_segments(wal(2))[0]
            _rewrite(first, lambda rs: [r for r in rs if not (r.origin == 2 and r.lsn <= HEAD_ROWS_MISSING)])
            entry = {"kind": kind, "member": "m2", "origin": 2, "lsn": 1, "missing": HEAD_ROWS_MISSING}
        elif kind == "corrupt":  # one flipped byte in a record of member 3
            path, i, rec = _find(wal(3), 2, lambda n: n // 2)
            offset = scan_segment(path).records[i][0]
            data = bytearray(path.read_bytes())
            data[offset + 40] ^= 0xFF
            path.write_bytes(bytes(data))
            entry = {"kind": kind, "member": "m3", "origin": 2, "lsn": rec.lsn, "offset": offset}
        else:
            raise ValueError(f"unknown injection {kind!r}; choose from {', '.join(INJECTIONS)}")
        manifest["injected"].append(entry)


def gc_segments(out: Path, member: str, count: int, manifest: dict) -> None:
    segments = list_segments(out / member / "wal")
    for path in segments[: min(count, len(segments) - 1)]:
        path.unlink()
    manifest["gc"] = {"member": member, "segments_removed": min(count, len(segments) - 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--rows", type=int, default=30000, help="WAL rows over all members")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--rate-per-ms", type=float, default=2.0, help="transactions per ms per origin")
    parser.add_argument("--inject", default="", help=f"comma list of {', '.join(INJECTIONS)}")
    parser.add_argument("--gc-segments", type=int, default=0, help="drop the last member's first N segments")
    args = parser.parse_args(argv)
    kinds = [k for k in args.inject.split(",") if k]
    if args.members < 3 and kinds:
        parser.error("injections need at least 3 members")
    manifest = generate(args.out, members=args.members, rows=args.rows, seed=args.seed,
                        segment_bytes=args.segment_bytes, rate_per_ms=args.rate_per_ms)
    inject(args.out, kinds, manifest, members=args.members)
    if args.gc_segments:
        gc_segments(args.out, f"m{args.members}", args.gc_segments, manifest)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
