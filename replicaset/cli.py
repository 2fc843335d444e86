"""The `replicaset` command line."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib.util
import io
import signal
import socket
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from replicaset import config as configuration
from replicaset.identity import Identity, IdentityError, Joining, parse_uuid

if TYPE_CHECKING:
    from replicaset.iproto.client import Client
    from replicaset.iproto.errors import ServerError

CONFIG_FILE = "config.toml"
EXIT_STORE_FAILED = 74  # sysexits' EX_IOERR: a store failed a write this process cannot take back
EXIT_LISTEN_FAILED = 71  # sysexits' EX_OSERR: the listen address cannot be bound
EXIT_REMOVED = 77  # sysexits' EX_NOPERM: this instance was removed from its replica set (box.remove)

# `sql` and `console`: the server answered with an error (bad SQL, a refused login) / it
# could not be reached or talked to (as a bad command line or config, which exit with 2 too).
EXIT_SERVER_ERROR = 1
EXIT_UNREACHABLE = 2
CLIENT_TIMEOUT_S = 10.0  # bounds the connect and every reply
EXIT_ADDRESS_MISMATCH = 78  # sysexits' EX_CONFIG: started at another address than the one registered in _cluster


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def _bind_value(text: str) -> Any:
    """Command-line binds: integers and floats as numbers, NULL as NULL, the rest as text."""
    if text == "NULL":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replicaset", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    boot = sub.add_parser("bootstrap", help="start a new replica set; this instance gets id 1")
    boot.add_argument("--data-dir", required=True, type=Path)
    boot.add_argument("--listen", required=True)
    boot.add_argument("--uuid", help="the replica set UUID (a new one when omitted)")
    boot.add_argument("--config", type=Path)

    serve = sub.add_parser("serve", help="serve an existing data directory")
    serve.add_argument("--data-dir", required=True, type=Path)
    serve.add_argument("--listen")
    serve.add_argument("--config", type=Path)
    serve.add_argument("--force-recovery", action="store_true",
                       help="take writes after an unclean stop without waiting for every member")
    serve.add_argument("--rejoin", action="store_true",
                       help="when no member has the rows this instance needs, join again from a checkpoint")
    serve.add_argument("--read-only", action="store_true",
                       help="take no writes (box.cfg.read_only); a copy made by `restore` is always served so")
    serve.add_argument("--move", action="store_true",
                       help="start at a new address (--listen) and register it: a member alone in its set only "
                            "(docs/replication.md, \"Addresses\")")

    join = sub.add_parser("join", help="join an existing replica set through one of its members")
    join.add_argument("--uuid", required=True, help="the replica set UUID")
    join.add_argument("--peer", required=True, action="append", help="HOST:PORT of a member (repeatable)")
    join.add_argument("--data-dir", required=True, type=Path)
    join.add_argument("--listen", required=True)
    join.add_argument("--config", type=Path)
    join.add_argument("--anonymous", action="store_true",
                      help="a read-only follower: receives every row, serves reads, is never registered, "
                           "never counts toward a quorum")

    sql = sub.add_parser("sql", help="run one SQL statement and print the result")
    sql.add_argument("address", type=_address)
    sql.add_argument("sql")
    sql.add_argument("--bind", action="append", default=[], type=_bind_value)
    sql.add_argument("--consistency", choices=["one", "quorum", "all"],
                     help="how many members must hold a write before it is answered (the server's default)")
    sql.add_argument("--user")
    sql.add_argument("--password")
    _tls_arguments(sql)

    con = sub.add_parser("console", help="admin console: box.info, box.cfg, box.snapshot()")
    con.add_argument("address", type=_address)
    con.add_argument("-e", dest="expr", help="evaluate one expression and exit")
    con.add_argument("--user")
    con.add_argument("--password")
    _tls_arguments(con)

    demo = sub.add_parser("demo", help="start a local three-member set, run a workload on all, compare them")
    demo.add_argument("--data-dir", type=Path)
    demo.add_argument("--rows", type=int, default=1000, help="statements per member")

    audit = sub.add_parser("audit", help="check members' WALs and tables with Spark (docs/audit.md)")
    audit.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                       help="a member's data directory (all checks) or a bare WAL directory (checks 1-4)")
    audit.add_argument("--master", help="Spark master URL (default local[2])")
    audit.add_argument("--driver-memory", metavar="SIZE",
                       help="the driver JVM's heap, e.g. 4g (default 896m; under spark-submit, its own)")
    audit.add_argument("--json", type=Path, dest="json_out", metavar="OUT")
    audit.add_argument("--html", type=Path, dest="html_out", metavar="OUT")
    audit.add_argument("--no-progress", action="store_true")

    restore = sub.add_parser("restore", help="point-in-time copy: a checkpoint plus WAL rows up to a bound "
                                             "(docs/restore.md)")
    restore.add_argument("--from", dest="source", required=True, type=Path, metavar="DATA_DIR_OR_CHECKPOINT",
                         help="a data directory (its WAL and its newest checkpoint that WAL continues) "
                              "or a checkpoint file (snap/*.snap)")
    restore.add_argument("--to", dest="target", required=True, type=Path, metavar="NEW_DIR",
                         help="the data directory to build; it must not exist, or be empty")
    restore.add_argument("--wal", action="append", default=[], type=Path, metavar="DIR",
                         help="more rows: a WAL directory or another member's data directory (repeatable)")
    until = restore.add_mutually_exclusive_group()
    until.add_argument("--until-lsn", metavar="ORIGIN:LSN", help="up to that row, included")
    until.add_argument("--until-time", metavar="ISO8601", help="up to the rows committed at or before that time")
    until.add_argument("--until-txn", metavar="TXN_ID", help="up to that transaction, included")
    restore.add_argument("--skip-failed", action="store_true",
                         help="skip a row that cannot be applied, name it, and go on (default: stop there)")
    return parser


def _tls_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls", action="store_true",
                        help="connect over TLS, checking the server's certificate against the system's trusted CAs")
    parser.add_argument("--tls-ca", metavar="FILE",
                        help="connect over TLS, checking the server's certificate against the CA certificates in FILE")


def _ssl_context(args: argparse.Namespace) -> Any:
    import ssl

    from replicaset.iproto.client import tls_context

    if not (args.tls or args.tls_ca):
        return None
    try:
        return tls_context(args.tls_ca)
    except (OSError, ssl.SSLError) as exc:
        raise configuration.ConfigError(f"--tls-ca {args.tls_ca}: cannot load it: {exc}") from exc


def _load_config(args: argparse.Namespace, data_dir: Path, *, read_only: bool = False,
                 kept: bool = True) -> configuration.Config:
    """The config kept in the data directory (unless not `kept`: bootstrap and join make
    it), then `--config`, then the flags, each overriding the one before option by option."""
    from replicaset.runtime import tls
    from replicaset.runtime.peer_access import load_secret

    base = data_dir / CONFIG_FILE if kept and (data_dir / CONFIG_FILE).exists() else None
    cfg = configuration.load(args.config, {"listen": args.listen, "read_only": True if read_only else None}, base=base)
    # The files the options name are read again where they are used; read here, a bad one
    # stops the command before it writes anything in the data directory.
    for read in (load_secret, tls.server_context, tls.client_context):
        read(cfg)
    return cfg


def _keep_config(data_dir: Path, config: Path | None, listen: str) -> None:
    """Keep the config in the data directory, with the address the instance listens on,
    so that a later `replicaset serve --data-dir DIR` needs no flags."""
    (data_dir / CONFIG_FILE).write_text(configuration.kept_config(config.read_text() if config else "", listen))


def _serve(
    data_dir: Path, cfg: configuration.Config, identity: Identity, *, force_recovery: bool = False, rejoin: bool = False,
    isolated: bool = False, move: bool = False,
) -> int:
    from replicaset.runtime.logging import configure
    from replicaset.meta.store import MetaWriteFailed
    from replicaset.runtime.disk import DiskFull

    # A crash in native code (SQLite, RocksDB) leaves the Python stacks on stderr, which a
    # supervisor keeps beside the log, instead of a process gone without a word. A caller
    # that captures stderr (tests calling `main`) has no file to give it.
    with contextlib.suppress(io.UnsupportedOperation, ValueError):
        faulthandler.enable()
    from replicaset.runtime.node import AddressMismatch, ListenFailed, Node
    from replicaset.runtime.server import serve
    from replicaset.storage import EngineFatal

    configure(cfg.log_level, identity.instance_id)
    node = Node(config=cfg, identity=identity, data_dir=data_dir, force_recovery=force_recovery, rejoin=rejoin,
                isolated=isolated, move=move)

    async def main() -> None:
        async with trio.open_nursery() as nursery:

            async def run_node() -> None:
                await serve(node)
                nursery.cancel_scope.cancel()

            nursery.start_soon(run_node)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    node.log.info("signal", signal=signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return

    try:
        trio.run(main)
    except BaseException as exc:
        cannot_listen = _failure_of(exc, (ListenFailed,))
        if cannot_listen is not None:
            node.log.critical("listen_failed", error=str(cannot_listen), exit_code=EXIT_LISTEN_FAILED)
            return EXIT_LISTEN_FAILED
        elsewhere = _failure_of(exc, (AddressMismatch,))
        if isinstance(elsewhere, AddressMismatch):
            node.log.critical("address_mismatch", error=str(elsewhere), registered=elsewhere.registered,
                              listen=elsewhere.listen, exit_code=EXIT_ADDRESS_MISMATCH)
            print(f"replicaset: {elsewhere}", file=sys.stderr)
            return EXIT_ADDRESS_MISMATCH
        failure = _failure_of(exc, (MetaWriteFailed, EngineFatal, DiskFull))
        if failure is None:
            raise
        # A store that cannot go on in this process (docs/decisions.md, "Full disk"): one
        # line and an exit code for the supervisor; the restart recovers what it left.
        node.log.critical("stopped_on_store_failure", error=str(failure), exit_code=EXIT_STORE_FAILED)
        return EXIT_STORE_FAILED
    if node.removal is not None:
        from replicaset.runtime.removal import describe

        print(f"replicaset: instance {identity.instance_uuid} {describe(node.removal)}; this data directory "
              f"cannot serve again: join as a new instance with an empty data directory (exit code {EXIT_REMOVED})",
              file=sys.stderr, flush=True)
        return EXIT_REMOVED
    if node.rejoin_through:
        return _rejoin(data_dir, cfg, identity, node.rejoin_through)
    return 0


def _failure_of(error: BaseException, kinds: tuple[type[Exception], ...]) -> BaseException | None:
    """The first of `kinds` in `error`, alone or inside (nested) nursery groups."""
    if isinstance(error, kinds):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _failure_of(inner, kinds)
            if found is not None:
                return found
    return None


def _rejoin(data_dir: Path, cfg: configuration.Config, identity: Identity, peer: str) -> int:
    """Join again under the same UUID (`runtime.join.rejoin_async`), then serve."""
    from functools import partial

    from replicaset.runtime.environment import TCP
    from replicaset.runtime.join import rejoin_async
    from replicaset.runtime.logging import configure

    configure()
    again = trio.run(partial(rejoin_async, data_dir, cfg, identity, peer, network=TCP, kept=(CONFIG_FILE,)))
    if again is None:
        return 1
    return _serve(data_dir, cfg, again)


def _rejoined_from(data_dir: Path, instance_uuid: str) -> Path | None:
    """The directory a re-join of `instance_uuid` that stopped midway left beside
    `data_dir` (its local tables still go into the checkpoint); None for a join."""
    from replicaset.runtime.join import backup_of

    backup = backup_of(data_dir)
    try:
        left = Identity.load(backup)
    except IdentityError:
        return None
    return backup if left.instance_uuid == instance_uuid else None


def cmd_bootstrap(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir
    if Identity.exists(data_dir):
        raise IdentityError(f"{data_dir} already holds an instance: use `replicaset serve`")
    cfg = _load_config(args, data_dir, kept=False)
    identity = Identity(
        replicaset_uuid=parse_uuid(args.uuid, "--uuid") if args.uuid else str(uuid.uuid4()),
        instance_uuid=str(uuid.uuid4()),
        instance_id=1,
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    _keep_config(data_dir, args.config, cfg.listen)
    identity.save(data_dir)
    return _serve(data_dir, cfg, identity)


def cmd_serve(args: argparse.Namespace) -> int:
    from replicaset.restore import is_copy

    joining = Joining.load(args.data_dir)
    if joining is not None and not Identity.exists(args.data_dir):
        return _finish_join(args, joining)
    identity = Identity.load(args.data_dir)
    # A restored copy holds the original set's `_cluster`: it must follow none of those
    # members, and a write would fork their history (docs/restore.md).
    copy = is_copy(args.data_dir)
    return _serve(args.data_dir, _load_config(args, args.data_dir, read_only=args.read_only or copy or identity.anonymous),
                  identity,
                  force_recovery=args.force_recovery, rejoin=args.rejoin, isolated=copy, move=args.move)


def _finish_join(args: argparse.Namespace, joining: Joining) -> int:
    """A join (or re-join) that stopped midway, the process gone: go on with it, under the
    same UUID and so the same id, resuming its checkpoint transfer where it stopped."""
    from replicaset.runtime.join import join
    from replicaset.runtime.peer_access import load_secret
    from replicaset.runtime.tls import client_context

    cfg = _load_config(args, args.data_dir, read_only=args.read_only or joining.anonymous)
    identity = join(args.data_dir, replicaset_uuid=joining.replicaset_uuid, peers=joining.peers, listen=cfg.listen,
                    instance_uuid=joining.instance_uuid, anonymous=joining.anonymous, secret=load_secret(cfg),
                    tls=client_context(cfg), local_from=_rejoined_from(args.data_dir, joining.instance_uuid),
                    local_tables=frozenset(cfg.local_tables))
    if identity is None:
        return 1
    return _serve(args.data_dir, cfg, identity, force_recovery=args.force_recovery, rejoin=args.rejoin)


def cmd_join(args: argparse.Namespace) -> int:
    from replicaset.runtime.join import join
    from replicaset.runtime.peer_access import load_secret
    from replicaset.runtime.tls import client_context

    data_dir: Path = args.data_dir
    if Identity.exists(data_dir):
        raise IdentityError(f"{data_dir} already holds an instance: use `replicaset serve`")
    replicaset_uuid = parse_uuid(args.uuid, "--uuid")
    cfg = _load_config(args, data_dir, read_only=args.anonymous, kept=False)
    secret, tls = load_secret(cfg), client_context(cfg)
    made_dir = not data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    _keep_config(data_dir, args.config, cfg.listen)
    identity = join(data_dir, replicaset_uuid=replicaset_uuid, peers=args.peer, listen=cfg.listen,
                    anonymous=args.anonymous, secret=secret, tls=tls, made_dir=made_dir)
    if identity is None:
        return 1
    return _serve(data_dir, cfg, identity)


def cmd_sql(args: argparse.Namespace) -> int:
    def run(client: Client) -> int:
        result = client.execute(args.sql, args.bind,
                                options={"consistency": args.consistency} if args.consistency else None)
        if result.columns:
            print(format_table(result.columns, result.rows))
        else:
            ids = f", autoincrement ids {result.autoincrement_ids}" if result.autoincrement_ids else ""
            print(f"{result.row_count} row(s) changed{ids}")
        return 0

    return _with_client(args, run)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in columns]] + [["NULL" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [" | ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def cmd_console(args: argparse.Namespace) -> int:
    """`-e EXPR`: its value as a YAML document, or its error as one line on stderr. At the
    prompt, an error is a YAML document too (`- error: ...`), as in Tarantool's console,
    and the session goes on."""
    from replicaset.console import to_yaml
    from replicaset.iproto.errors import ServerError

    def run(client: Client) -> int:
        if args.expr:
            print(to_yaml(client.eval(args.expr)[0]), end="")
            return 0
        host, port = args.address
        status = 0
        for expr in _prompt(f"{host}:{port}> "):
            if not expr.strip():
                continue
            try:
                print(to_yaml(client.eval(expr)[0]), end="")
            except ServerError as exc:
                print(to_yaml({"error": exc.message}), end="")
                status = EXIT_SERVER_ERROR
        return status

    return _with_client(args, run)


def _with_client(args: argparse.Namespace, run: Callable[[Client], int]) -> int:
    """`run` on a connection to the server `args` name, logged in as `args.user`, and its
    exit code. What goes wrong on the way is one line on stderr, never a traceback:
    `EXIT_SERVER_ERROR` when the server answered with an error (a refused login too),
    `EXIT_UNREACHABLE` when it could not be reached or talked to."""
    from replicaset.iproto.client import Client, TlsExpected
    from replicaset.iproto.errors import RemoteProtocolError, ServerError

    host, port = args.address
    where = f"{host}:{port}"
    try:
        client = Client.connect(host, port, user=args.user, password=args.password, timeout_s=CLIENT_TIMEOUT_S,
                                ssl_context=_ssl_context(args))
    except TlsExpected as exc:
        return _fail(f"{exc}: pass --tls-ca FILE (the CA that signed its certificate), or --tls to trust the "
                     "system's CAs", EXIT_UNREACHABLE)
    except ServerError as exc:
        return _fail(f"{where} refused the login as {args.user!r}: {_server_error(exc)}", EXIT_SERVER_ERROR)
    except socket.gaierror as exc:
        return _fail(f"cannot resolve the host {host!r}: {exc.strerror}", EXIT_UNREACHABLE)
    except OSError as exc:
        return _fail(f"cannot connect to {where}: {exc.strerror or exc}", EXIT_UNREACHABLE)
    except RemoteProtocolError as exc:
        return _fail(f"{where} does not speak iproto: {exc}", EXIT_UNREACHABLE)
    with client:
        try:
            return run(client)
        except ServerError as exc:
            return _fail(_server_error(exc), EXIT_SERVER_ERROR)
        except TimeoutError:
            return _fail(f"{where} did not answer within {CLIENT_TIMEOUT_S} s", EXIT_UNREACHABLE)
        except OSError as exc:
            return _fail(f"lost the connection to {where}: {exc.strerror or exc}", EXIT_UNREACHABLE)
        except RemoteProtocolError as exc:
            return _fail(f"{where} sent a reply that is not valid iproto: {exc}", EXIT_UNREACHABLE)


def _server_error(exc: ServerError) -> str:
    """Tarantool's code, its name when we know it, and the message."""
    from replicaset.iproto.constants import ErrorCode

    try:
        name = f" (ER_{ErrorCode(exc.code).name})"
    except ValueError:
        name = ""
    return f"error {exc.code}{name}: {exc.message}"


def _fail(message: str, exit_code: int) -> int:
    print(f"replicaset: {message}", file=sys.stderr)
    return exit_code


def _prompt(prompt: str):  # type: ignore[no-untyped-def]
    interactive = sys.stdin.isatty()
    while True:
        try:
            yield input(prompt if interactive else "")
        except EOFError:
            return


def cmd_demo(args: argparse.Namespace) -> int:
    from replicaset.demo import run_demo

    return run_demo(args.data_dir, rows=args.rows)


AUDIT_PACKAGES = ("pyspark", "pyarrow", "matplotlib")


def cmd_audit(args: argparse.Namespace) -> int:
    missing = [name for name in AUDIT_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        print(f"replicaset audit needs the audit extra, which is not installed (missing: {', '.join(missing)}): "
              "pip install 'replicaset[audit]'", file=sys.stderr)
        return 2
    from replicaset.audit.run import run_from_args

    return run_from_args(args)


def cmd_restore(args: argparse.Namespace) -> int:
    from replicaset.restore import (
        BoundNotReached,
        ReplayStopped,
        RestoreError,
        parse_until_lsn,
        parse_until_time,
        parse_until_txn,
        restore,
    )

    def progress(line: str) -> None:
        print(f"replicaset restore: {line}", file=sys.stderr, flush=True)

    try:
        bound = (parse_until_lsn(args.until_lsn) if args.until_lsn is not None
                 else parse_until_time(args.until_time) if args.until_time is not None
                 else parse_until_txn(args.until_txn) if args.until_txn is not None else None)
        result = restore(args.source, args.target, wals=args.wal, bound=bound, skip_failed=args.skip_failed,
                         progress=progress)
    except (BoundNotReached, ReplayStopped) as exc:
        print(f"replicaset restore: {exc}", file=sys.stderr)
        return 1
    except (RestoreError, OSError) as exc:
        print(f"replicaset restore: {exc}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


COMMANDS = {
    "bootstrap": cmd_bootstrap,
    "serve": cmd_serve,
    "join": cmd_join,
    "sql": cmd_sql,
    "console": cmd_console,
    "demo": cmd_demo,
    "audit": cmd_audit,
    "restore": cmd_restore,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (configuration.ConfigError, IdentityError) as exc:
        print(f"replicaset: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"replicaset: cannot reach the server: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
