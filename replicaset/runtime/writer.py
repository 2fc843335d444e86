"""The single writer: every change to the database passes through here, one at a time.

Statements run at once under the writer token (a one-slot semaphore, so a stream
transaction may hold it across requests); their transactions join the open batch.
A flusher task makes the batch durable, with one WAL write and one SQLite commit, as
soon as the tasks already runnable had their chance to join it (or after
`group_commit_delay_ms`), or at once when the batch reaches its row or byte bound.
Clients are answered only after the flush that made their transaction durable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import apsw
import trio

from replicaset.storage import (
    ApplyError,
    BatchAbandoned,
    BatchKind,
    Captured,
    ConnectionValues,
    Engine,
    EngineFatal,
    GapError,
    LocalTxn,
    Purged,
    SqlError,
    StatementResult,
)
from replicaset.iproto.constants import ErrorCode
from replicaset.runtime.environment import THREADS, Workers
from wal import GroupCommitPolicy, Record, VClock, WalError
from wal.log import SyncPoint


class WriteFailed(Exception):
    """The batch holding a transaction could not be made durable; it was rolled back."""

    code = ErrorCode.WAL_IO


class CascadeRollback(WriteFailed):
    """The batch was rolled back for another transaction's sake (Tarantool's cascading
    rollback): this one did nothing wrong and may simply run again."""

    code = ErrorCode.CASCADE_ROLLBACK


@dataclass(eq=False)
class Ticket:
    """A transaction waiting for the flush that makes it durable. A waiter either awaits
    `wait`, or leaves a callback (`on_settled`): a client's reply needs no task of its
    own, which costs more than the reply."""

    # Settled only once its batch is fsynced too, whatever `wal_mode` says: a write this
    # member decided alone is answered as a quorum's is, durable.
    fsynced: bool = False
    settled: bool = False
    error: Exception | None = None
    _event: trio.Event | None = None
    _callbacks: list[Callable[[Exception | None], None]] = field(default_factory=list)

    async def wait(self) -> None:
        if not self.settled:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        if self.error is not None:
            raise self.error

    def on_settled(self, callback: Callable[[Exception | None], None]) -> None:
        """`callback(error)` once the flush is done (at once if it is), `error` None when
        the transaction is durable."""
        if self.settled:
            callback(self.error)
        else:
            self._callbacks.append(callback)

    def settle(self, error: Exception | None = None) -> None:
        self.settled = True
        self.error = error
        if self._event is not None:
            self._event.set()
        for callback in self._callbacks:
            callback(error)


def _settle(tickets: list[Ticket], error: Exception | None = None) -> None:
    """Wake every waiter of a flushed batch, or of one that failed with `error`."""
    for ticket in tickets:
        ticket.settle(error)


class Writer:
    def __init__(
        self,
        engine: Engine,
        *,
        group_commit: GroupCommitPolicy,
        fsync: bool,
        workers: Workers = THREADS,
        on_commit: Callable[[Sequence[Record]], None] = lambda records: None,
        on_flush: Callable[[list[Record]], None] = lambda records: None,
        on_synced: Callable[[bool], None] = lambda advanced: None,
        space_check: Callable[[str, int], None] = lambda what, payload_bytes: None,
    ) -> None:
        """`on_commit` sees the rows of every local commit, before the flush that makes
        them durable; `on_flush` every batch, in log order, as it is flushed; `on_synced`
        every fsync of the WAL (the relays' durable cut moved), `advanced` when it made
        rows durable that were not; `space_check(what, payload_bytes)` raises a
        `WriteFailed` to refuse a WAL append of that many bytes, or a checkpoint, while the
        disk is full (`runtime/disk.py`)."""
        self.engine = engine
        self._policy = group_commit
        self._fsync = fsync
        self._on_commit = on_commit
        self._on_flush = on_flush
        self._on_synced = on_synced
        self._space_check = space_check
        self.token = trio.Semaphore(1)
        self.checkpoint_lock = trio.Lock()
        self.checkpointing = False  # a checkpoint is being made (box.info.gc().checkpoint_is_in_progress)
        self._tickets: list[Ticket] = []
        self._wakeup = trio.Event()
        self._sync_wanted = trio.Event()
        # Engine calls running in a worker thread: the engine is between two states.
        self.in_thread = 0
        self._workers = workers
        self._sync_thread = workers.serial("wal sync")  # fsyncs, and flushes under wal_mode = fsync
        self.fatal: EngineFatal | None = None

    # ---------------------------------------------------------------- client writes

    async def execute_nowait(
        self, sql: str, binds: Sequence[Any] | dict[str, Any], values: ConnectionValues | None = None,
    ) -> tuple[StatementResult, Ticket]:
        """Run one statement in its own transaction; the ticket says when it is durable.
        `values`: the client session's, which last_insert_rowid() and its kin answer."""
        async with self.token:
            txn, result = await self._execute_one(sql, binds, values=values)
            return result, await self._commit(txn)

    async def execute_trusted(self, sql: str, binds: Sequence[Any] | dict[str, Any] = ()) -> StatementResult:
        """A statement of the node itself (system tables), durable on return. It passes a
        full disk's guard, into the room the reserve leaves: a member restarted on a full
        disk must still tell its peers its new address, once, in a few bytes."""
        async with self.token:
            txn = await self._begin()
            try:
                result = self.engine.execute(txn, sql, binds, trusted=True)
            except SqlError:
                self.engine.rollback(txn)
                raise
            ticket = await self._commit(txn, space_checked=False)
            await self._flush_now(space_checked=False)
        await ticket.wait()
        return result

    async def execute(self, sql: str, binds: Sequence[Any] | dict[str, Any] = ()) -> StatementResult:
        """One statement in its own transaction, returned once durable."""
        result, ticket = await self.execute_nowait(sql, binds)
        await ticket.wait()
        return result

    async def stream_execute(self, captured: Captured | None, sql: str, binds: Sequence[Any] | dict[str, Any], *,
                             quorum: bool, values: ConnectionValues | None = None) -> tuple[StatementResult, Captured]:
        """One statement of a stream transaction, on top of its earlier rows (`captured`,
        None before its first write), and the transaction's rows taken back out. The writer
        is held for this statement only, never while the client thinks: a decided row or an
        applied one never waits behind an open stream. A statement that fails leaves the
        transaction as it was; `TxnConflict` when a row it wrote changed meanwhile."""
        async with self.token:
            txn = await self._resume(captured, quorum=quorum)
            result = self._run(txn, sql, binds, values=values)
            return result, self.engine.capture(txn)

    async def commit_stream(self, captured: Captured) -> None:
        """A stream transaction at ONE: its rows written again and committed, returned once
        durable; `TxnConflict` when a row it wrote changed since."""
        async with self.token:
            ticket = await self._commit_stream_now(captured, quorum=False)
        await ticket.wait()

    async def check_stream(self, captured: Captured) -> None:
        """Before a stream transaction's COMMIT at QUORUM or ALL: `TxnConflict` when a key it
        wrote or a table it read was written here since (its PREPARE checks the versions on
        every member; what it read, only this member knows); `SqlError` when it leaves a
        deferred foreign key unresolved."""
        async with self.token:
            self.engine.check_unchanged(captured)
            await self._flush_unless(BatchKind.LOCAL)
            self.engine.check_deferred(captured)

    async def _resume(self, captured: Captured | None, *, quorum: bool) -> LocalTxn:
        await self._flush_unless(BatchKind.LOCAL)
        return self.engine.resume(captured, quorum=quorum)

    # ---------------------------------------------------------------- quorum transactions

    async def capture(self, sql: str, binds: Sequence[Any] | dict[str, Any] = (), *,
                      trusted: bool = False) -> tuple[StatementResult, Captured]:
        """Run one statement of a QUORUM or ALL transaction and take its rows back out with
        the versions read: they reach SQLite only once decided (docs/design/README.md §4.5). `trusted`
        for the node's own statements on system tables."""
        async with self.token:
            txn, result = await self._execute_one(sql, binds, quorum=True, trusted=trusted)
            return result, self.engine.capture(txn)

    async def commit_captured(self, captured: Captured, *, txn_id: int, min_stamp: int) -> Record:
        """Write a decided quorum transaction as our next row, returned once flushed."""
        ticket = Ticket()
        async with self.token:
            await self._flush_unless(BatchKind.APPLY)
            record = self.engine.commit_captured(captured, txn_id=txn_id, min_stamp=min_stamp)
            await self._queued(ticket, len(record.payload), delay_allowed=False)
        await ticket.wait()
        return record

    async def execute_quorum(self, sql: str, binds: Sequence[Any] | dict[str, Any], *, alone: Callable[[], bool],
                             values: ConnectionValues | None = None) -> tuple[StatementResult, Captured | Ticket]:
        """One statement of a QUORUM or ALL transaction: captured with the versions it read,
        to be decided by the quorum; or, when `alone()` says this member decides by itself
        (core.quorum.decides_alone; asked under the token, so nothing comes between the
        answer and the commit), committed here as its own row, whose ticket is settled once
        the row is fsynced."""
        async with self.token:
            txn, result = await self._execute_one(sql, binds, quorum=True, values=values)
            if txn.ddl is None and alone():
                return result, await self._commit(txn, fsynced=True)
            return result, self.engine.capture(txn)

    async def commit_stream_alone(self, captured: Captured, alone: Callable[[], bool]) -> bool:
        """A stream transaction at QUORUM or ALL committed as at ONE, durable on return,
        when `alone()` says this member decides by itself; False, having done nothing, when
        it does not. `TxnConflict` when a row it wrote changed since."""
        async with self.token:
            if not alone():
                return False
            ticket = await self._commit_stream_now(captured, quorum=True)
        await ticket.wait()
        return True

    async def _commit_stream_now(self, captured: Captured, *, quorum: bool) -> Ticket:
        """A stream transaction's rows written again, committed and flushed (the caller holds
        the token); one at QUORUM or ALL, committed here only when decided alone, is settled
        once fsynced."""
        txn = await self._resume(captured, quorum=quorum)
        ticket = await self._commit(txn, fsynced=quorum)
        await self._flush_now()
        return ticket

    async def _execute_one(self, sql: str, binds: Sequence[Any] | dict[str, Any], *, quorum: bool = False,
                           trusted: bool = False, values: ConnectionValues | None = None,
                           ) -> tuple[LocalTxn, StatementResult]:
        """A statement in a transaction of its own, left open for the caller (who holds the
        token) to commit or, when `quorum`, capture; rolled back if the statement fails."""
        txn = await self._begin(quorum=quorum)
        return txn, self._run(txn, sql, binds, trusted=trusted, values=values)

    def _run(self, txn: LocalTxn, sql: str, binds: Sequence[Any] | dict[str, Any], *,
             trusted: bool = False, values: ConnectionValues | None = None) -> StatementResult:
        """A statement in `txn`; a failed one rolls `txn` back, one that stopped the batch
        fails the batch's other transactions too."""
        try:
            return self.engine.execute(txn, sql, binds, trusted=trusted, values=values)
        except BatchAbandoned:
            self._fail_tickets()
            raise
        except SqlError:
            self.engine.rollback(txn)
            raise

    def _fail_tickets(self) -> None:
        """The open batch was abandoned (a write stopped at the time limit): the
        transactions queued in it, not durable and not acknowledged, fail; the client may
        run them again."""
        tickets, self._tickets = self._tickets, []
        self._policy.reset()
        _settle(tickets, CascadeRollback("transaction rolled back before it was durable: it shared a group commit "
                                         "with another client's statement stopped at sql.statement_timeout_s; run it "
                                         "again"))

    async def _begin(self, *, quorum: bool = False) -> LocalTxn:
        """A transaction in the local batch, after flushing a batch of applied rows."""
        await self._flush_unless(BatchKind.LOCAL)
        return self.engine.begin(quorum=quorum)

    async def _flush_unless(self, kind: BatchKind) -> None:
        if self.engine.batch_kind not in (None, kind):
            await self._flush_now()

    async def _commit(self, txn: LocalTxn, *, space_checked: bool = True, fsynced: bool = False) -> Ticket:
        committed = self.engine.commit(txn)
        if committed is not None:
            self._on_commit(committed.records)
        ticket = Ticket(fsynced=fsynced)
        await self._queued(ticket, sum(len(r.payload) for r in committed.records) if committed else 0,
                           delay_allowed=True, space_checked=space_checked)
        return ticket

    async def _queued(self, ticket: Ticket, payload_bytes: int, *, delay_allowed: bool,
                      space_checked: bool = True) -> None:
        """`ticket`'s rows are in the open batch: flushed now once a bound is reached or
        no other task waits for the writer; otherwise by the last of those, or by the
        flusher, with theirs (one WAL write and one SQLite commit for them all).
        `delay_allowed`: client writes also wait `group_commit_delay_ms`; decided and
        applied rows do not (a quorum's answer waits for them)."""
        self._tickets.append(ticket)
        bound_reached = self._policy.add(payload_bytes)
        others_waiting = self.token.statistics().tasks_waiting > 0
        if bound_reached or not (others_waiting or (delay_allowed and self._policy.max_delay_ms)):
            await self._flush_now(space_checked=space_checked)
        else:
            self._wakeup.set()

    # ---------------------------------------------------------------- apply

    async def apply(
        self, records: Sequence[Record], *, own_allowed: bool = False, skip_conflicts: bool = False, log: Any = None,
        took: Callable[[list[Record]], None] | None = None,
    ) -> int:
        """Apply rows of other origins, each once, and make them durable; returns how many
        were new. A gap or a conflict raises after the rows before it are flushed; a flush
        that failed raises `WriteFailed` (the pending vclock is back at the durable one, so
        the applier must subscribe again). `took`, when given, hears of the rows applied
        before the flush that makes them durable (a trace shows them in that order)."""
        engine = self.engine
        if all(engine.committed_copy(record, own_allowed=own_allowed) for record in records):
            # Copies of committed rows (a quorum row comes by its COMMIT and by every relay):
            # nothing to take, so no turn at the writer, nor an early flush of its batch.
            if took is not None:
                took([])
            return 0
        applied = 0
        taken: list[Record] = []
        ticket = Ticket()
        async with self.token:
            await self._flush_unless(BatchKind.APPLY)
            failed = True
            try:
                for record in records:
                    try:
                        if self.engine.apply(record, own_allowed=own_allowed):
                            applied += 1
                            if took is not None:
                                taken.append(record)
                    except ApplyError as exc:
                        if not skip_conflicts or isinstance(exc, GapError):
                            raise
                        if log is not None:
                            log.warning("conflict_skipped", origin=record.origin, lsn=record.lsn, error=str(exc))
                        applied += self.engine.skip(record)
                failed = False
            finally:
                if took is not None:
                    took(taken)
                if self.engine.batch_kind is None:
                    ticket.settle()
                elif failed:  # the rows before the one that failed are durable before it raises
                    self._tickets.append(ticket)
                    await self._flush_now()
                else:
                    await self._queued(ticket, sum(len(r.payload) for r in records), delay_allowed=False)
        await ticket.wait()
        return applied

    # ---------------------------------------------------------------- flushing

    async def run_flusher(self) -> None:
        """Flush batches as they form, and sync for the relays; runs for the life of the node."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run_syncer)
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                if self._policy.max_delay_ms:
                    await trio.sleep(self._policy.max_delay_ms / 1000)
                else:
                    await trio.sleep(0)
                async with self.token:
                    await self._flush_now()

    def request_sync(self) -> None:
        """A relay withholds rows until they are durable: one fsync soon, for every request
        made meanwhile, outside the token so that the next group commit does not wait."""
        self._sync_wanted.set()

    async def _run_syncer(self) -> None:
        while True:
            await self._sync_wanted.wait()
            self._sync_wanted = trio.Event()
            try:
                await self.sync_wal()
            except WalError as exc:  # the kernel may have dropped the pages: stop
                self.fatal = EngineFatal(f"fsync of the WAL failed: {exc}")
                raise self.fatal from exc

    async def sync_wal(self) -> None:
        """fsync every row flushed so far, whatever `wal_mode` says, for rows that must
        survive an OS crash before anyone relies on them (a checkpoint's, a registration,
        the rows relays ship). Appends go on during the fsyncs, so no token is taken."""
        point = self.engine.wal.sync_point()
        if point is not None:
            await self._sync_thread.run_sync(self.engine.wal.fsync_point, point)
        self._synced(point)

    def _sync_wal_inline(self) -> None:
        """`sync_wal` for a checkpoint made in trio's own thread (the simulator's workers)."""
        point = self.engine.wal.sync_point()
        if point is not None:
            self.engine.wal.fsync_point(point)
        self._synced(point)

    def _synced(self, point: SyncPoint | None) -> None:
        if point is not None:
            self.engine.wal.synced(point)
        self._on_synced(point is not None)

    async def _flush_now(self, *, space_checked: bool = True) -> None:
        tickets, self._tickets = self._tickets, []
        self._policy.reset()
        if not tickets and not self.engine.batch_records:
            self.engine.flush()
            return
        before_append = partial(self._space_check, "WAL write") if space_checked else None
        # A batch holding a ticket to be fsynced is flushed and fsynced in one trip to the
        # sync thread, as under wal_mode = fsync; the batches behind it gather meanwhile.
        sync = not self._fsync and any(ticket.fsynced for ticket in tickets)
        point = None
        try:
            if sync:
                records, point = await self._in_thread(self._flush_and_fsync, before_append,
                                                       run=self._sync_thread.run_sync)
            elif self._fsync:
                records = await self._in_thread(self.engine.flush, before_append, run=self._sync_thread.run_sync)
            else:
                records = self.engine.flush(before_append)
        except EngineFatal as exc:
            self.fatal = exc
            _settle(tickets, exc)
            raise
        except Exception as exc:
            _settle(tickets, exc if isinstance(exc, WriteFailed) else WriteFailed(
                f"WAL write failed, transaction rolled back: {exc}"))
            return
        if point is not None:
            self.engine.wal.synced(point)
        _settle(tickets)
        if records:
            self._on_flush(records)
        if sync:
            self._on_synced(point is not None)

    def _flush_and_fsync(self, before_append: Callable[[int], None] | None) -> tuple[list[Record], SyncPoint | None]:
        """The batch flushed, then every row appended so far fsynced, in the sync thread."""
        records = self.engine.flush(before_append)
        wal = self.engine.wal
        point = wal.sync_point()
        if point is not None:
            try:
                wal.fsync_point(point)
            except WalError as exc:  # the kernel may have dropped the pages: stop
                raise EngineFatal(f"fsync of the WAL failed: {exc}") from exc
        return records, point

    async def checkpoint(self) -> str:
        """Flush what is pending, then copy the database on a reader in a thread. Writes go
        on meanwhile, so the copy may hold rows flushed after ours: the WAL is synced once
        the copy is made, before it is published (FINDINGS F2)."""
        async with self.checkpoint_lock:
            return str(await self._checkpoint_now())

    async def _checkpoint_now(self) -> Path:
        self._space_check("checkpoint", 0)
        async with self.token:
            await self._flush_now()
        self.checkpointing = True
        try:
            sync_wal = self._sync_wal_inline if self._workers.inline else partial(trio.from_thread.run, self.sync_wal)
            return await self._in_thread(self.engine.checkpoint, sync_wal)
        except apsw.FullError as exc:  # larger than the room left: the partial copy is gone, the data untouched
            raise WriteFailed(f"no space left on device: checkpoint failed, nothing changed: {exc}") from exc
        finally:
            self.checkpointing = False

    async def purge_tombstones(self, bound: Mapping[int, int]) -> Purged:
        """Between batches (what is pending is flushed first), in a thread: a purge of many
        tombstones must not stall the event loop."""
        async with self.token:
            await self._flush_now()
            return await self._in_thread(self.engine.purge_tombstones, bound)

    async def _in_thread(self, call: Callable[..., Any], *args: Any,
                         run: Callable[..., Awaitable[Any]] | None = None) -> Any:
        """`call(*args)` off the event loop, by `run`: the engine is between two states
        meanwhile (`in_thread`)."""
        self.in_thread += 1
        try:
            return await (run or self._workers.run_sync)(call, *args)
        finally:
            self.in_thread -= 1

    async def open_newest_checkpoint(self) -> tuple[BinaryIO, VClock]:
        """The newest checkpoint whose later rows the WAL still holds, opened, with its
        vclock; a new one only when there is none (docs/design/README.md §4.4: a join is served from it,
        then from the log). Opened under the checkpoint lock, since making a checkpoint
        removes the oldest ones: once open, the file stays readable whatever happens."""
        async with self.checkpoint_lock:
            for _ in range(2):
                async with self.token:  # no append, nor a segment roll, while the log's reach is read
                    found = self.engine.newest_checkpoint()
                if found is not None:
                    path, vclock = found
                    return open(path, "rb"), vclock
                await self._checkpoint_now()
        raise AssertionError("a checkpoint just made is always continued by the WAL")
