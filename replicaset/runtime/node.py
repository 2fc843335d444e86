"""The node: one instance's engine, writer, iproto server and timers under one nursery."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from replicaset import __version__, console
from replicaset.config import Config
from replicaset.identity import Identity
from replicaset.iproto.sql_wire import schema_vindex_tuple, schema_vspace_tuple, sql_type_name
from replicaset.runtime.logging import event_sink, get_logger
from replicaset.runtime.session import RequestError, Session
from replicaset.runtime.writer import GroupCommit, Writer
from replicaset.storage import Engine, EngineConfig
from replicaset.storage.schema import is_internal, load_table
from replicaset.iproto.constants import ErrorCode
from wal import WalMode

USER_SPACE_ID_MIN = 512


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


@dataclass(frozen=True)
class Listening:
    host: str
    port: int


class Node:
    version = __version__
    shutdown_grace_s = 5.0

    def __init__(self, *, config: Config, identity: Identity, data_dir: Path) -> None:
        self.config = config
        self.identity = identity
        self.data_dir = data_dir
        self.log = get_logger(identity.instance_id)
        self.started_monotonic = time.monotonic()
        self.schema_version = 1
        self._schema_cache: dict[int, list[list[Any]]] | None = None
        self.listen_address = config.listen

    @property
    def guest_allowed(self) -> bool:
        return self.config["auth.guest"] or not self.config["auth.users"]

    def check_writable(self) -> None:
        if self.config.read_only:
            raise RequestError(ErrorCode.READONLY, "Can't modify data on a read-only instance - box.cfg.read_only is true")

    # ---------------------------------------------------------------- lifecycle

    def open_engine(self) -> Engine:
        cfg = self.config
        return Engine.open(
            EngineConfig(
                data_dir=self.data_dir,
                instance_id=self.identity.instance_id,
                wal_mode=WalMode(cfg.wal_mode),
                wal_max_size_bytes=cfg.wal_max_size,
                max_txn_bytes=cfg.max_txn_bytes,
                local_tables=frozenset(cfg.local_tables),
                auto_id_mode=cfg["sql.auto_id_mode"],
                checkpoint_count=cfg.checkpoint_count,
            ),
            clock_ms=wall_clock_ms,
            log=event_sink(self.log),
        )

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.engine = self.open_engine()
        self.writer = Writer(
            self.engine,
            group_commit=GroupCommit(
                rows_max=self.config["wal.group_commit_rows_max"],
                bytes_max=self.config["wal.group_commit_bytes_max"],
                delay_ms=self.config["wal.group_commit_delay_ms"],
            ),
            fsync=self.config.wal_mode == "fsync",
            on_flush=self._on_flush,
        )
        host, port = parse_address(self.config.listen)
        try:
            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(partial(trio.serve_tcp, self._serve_connection, port, host=host))
                sockname = listeners[0].socket.getsockname()
                self.listen_address = f"{sockname[0]}:{sockname[1]}"
                nursery.start_soon(self.writer.run_flusher)
                if self.config.checkpoint_interval:
                    nursery.start_soon(self._checkpoint_daemon)
                self.log.info(
                    "listening", listen=self.listen_address, vclock=self.engine.vclock.to_dict(),
                    replicaset_uuid=self.identity.replicaset_uuid, instance_uuid=self.identity.instance_uuid,
                )
                task_status.started(Listening(sockname[0], sockname[1]))
        finally:
            with trio.CancelScope(shield=True):
                await self._close()

    async def _close(self) -> None:
        if self.writer.fatal is None:
            async with self.writer.token:
                await self.writer._flush_now()
        self.engine.close()
        self.log.info("stopped")

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        await Session(self, stream).run()

    async def _checkpoint_daemon(self) -> None:
        while True:
            await trio.sleep(self.config.checkpoint_interval)
            await self.writer.checkpoint()

    def _on_flush(self, records: list[Any]) -> None:
        if any(r.type == 2 for r in records):
            self.schema_version += 1
            self._schema_cache = None

    # ---------------------------------------------------------------- views

    def schema_tuples(self, space: int) -> list[list[Any]]:
        """`_vspace` (281) and `_vindex` (289) rows listing the SQL tables as spaces."""
        if self._schema_cache is None:
            reader = self.engine._reader
            spaces, indexes = [], []
            names = [n for (n,) in reader.execute("SELECT name FROM sqlite_schema WHERE type='table' ORDER BY name")]
            for offset, name in enumerate(n for n in names if not is_internal(n)):
                info = load_table(reader, name)
                if info is None:
                    continue
                space_id = USER_SPACE_ID_MIN + offset
                types = {r[1]: r[2] for r in reader.execute(f"PRAGMA table_xinfo(\"{name}\")")}
                spaces.append(schema_vspace_tuple(space_id, name, [(c, sql_type_name(types.get(c))) for c in info.columns]))
                positions = info.column_positions()
                parts = [(positions[c], sql_type_name(types.get(c))) for c in info.pk_columns] or [(0, "unsigned")]
                indexes.append(schema_vindex_tuple(space_id, 0, "pk", parts))
            self._schema_cache = {281: spaces, 289: indexes}
        return self._schema_cache[space]

    def info(self) -> dict[str, Any]:
        vclock = self.engine.vclock
        me = self.identity
        return {
            "version": self.version,
            "id": me.instance_id,
            "uuid": me.instance_uuid,
            "cluster": {"uuid": me.replicaset_uuid},
            "lsn": vclock.get(me.instance_id),
            "vclock": vclock.to_dict(),
            "signature": vclock.signature,
            "status": "running",
            "ro": bool(self.config.read_only),
            "uptime": int(time.monotonic() - self.started_monotonic),
            "listen": self.listen_address,
            "pid": os.getpid(),
            "replication": {me.instance_id: {"id": me.instance_id, "uuid": me.instance_uuid, "lsn": vclock.get(me.instance_id)}},
        }

    async def console(self, expr: str) -> Any:
        values: dict[str, Callable[[], Any]] = {
            "box.info": self.info,
            "box.cfg": self.config.as_dict,
        }
        actions: dict[str, Callable[[], Awaitable[Any]]] = {"box.snapshot": self._snapshot}
        return await console.evaluate(expr, values, actions)

    async def _snapshot(self) -> str:
        await self.writer.checkpoint()
        return "ok"
