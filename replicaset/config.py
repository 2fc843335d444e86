"""Configuration: one TOML file, Tarantool's `box.cfg` names where one exists.

Every option is declared once in `OPTIONS` with its type, default and check, so the
file, the command-line overrides and `box.cfg` in the console all see the same table.
An unknown option or a bad value stops the start with a message naming the option.

The options marked `dynamic` may be changed on a running member by `box.cfg{...}` in the
console (`Config.change`), as Tarantool changes them at run time; the member applies them
(`replicaset/runtime/box.py`). A change lasts until the process stops: a restart takes
the config file again, as Tarantool's init script's `box.cfg` wins over what was set by hand.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIB = 1024
MIB = 1024 * KIB
HIDDEN = "<hidden>"


class ConfigError(ValueError):
    """An option is unknown or its value is invalid; the message names it."""


@dataclass(frozen=True, slots=True)
class Option:
    default: Any
    kind: type | tuple[type, ...]
    check: Callable[[Any], bool] = lambda _: True
    rule: str = ""
    # What `box.cfg` shows instead of the value, for options holding secrets: any client
    # that may EVAL reads `box.cfg`.
    shown: Callable[[Any], Any] | None = None
    # `box.cfg{...}` may change it on a running member; any other needs a restart.
    dynamic: bool = False
    # Another spelling of a value, turned into ours before it is checked.
    normal: Callable[[Any], Any] | None = None


def _hidden(value: Any) -> Any:
    """A secret says only whether it is set."""
    return HIDDEN if value else value


def _users_shown(users: Mapping[str, Any]) -> dict[str, Any]:
    """`[auth] users` with every password hidden, grants and privileges shown."""
    return {name: {k: HIDDEN if k in ("password", "password_hash") else v for k, v in entry.items()}
            if isinstance(entry, Mapping) else HIDDEN
            for name, entry in users.items()}


# Tarantool's numeric log levels (1 SYSERROR .. 7 DEBUG), as a Tarantool operator types them.
_TARANTOOL_LOG_LEVELS = {1: "error", 2: "error", 3: "error", 4: "warning", 5: "info", 6: "debug", 7: "debug"}


def _log_level(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return _TARANTOOL_LOG_LEVELS.get(value, value)
    return value


def _positive(value: Any) -> bool:
    return value > 0


def _address(value: Any) -> bool:
    host, sep, port = str(value).rpartition(":")
    return bool(sep) and bool(host) and port.isdigit() and 0 <= int(port) < 65536


def _addresses(value: Any) -> bool:
    return all(isinstance(v, str) and _address(v) for v in value)


def _dial_map(value: Any) -> bool:
    return all(isinstance(k, str) and _address(k) and isinstance(v, str) and _address(v) for k, v in value.items())


def _names(value: Any) -> bool:
    return all(isinstance(v, str) and v for v in value)


def _users(value: Any) -> bool:
    """A malformed user stops the start with the reason, not just the rule."""
    # Imported here: replicaset.access brings the storage package (170 ms), which the
    # commands that read no config (sql, console) should not pay for.
    from replicaset.access import AccessConfigError, parse_users

    try:
        parse_users(value)
    except AccessConfigError as exc:
        raise ConfigError(f"option 'auth.users': {exc}") from None
    return True


OPTIONS: dict[str, Option] = {
    "listen": Option("127.0.0.1:3301", str, _address, "HOST:PORT"),
    "replication": Option([], list, _addresses, "a list of HOST:PORT"),
    "read_only": Option(False, bool, dynamic=True),
    "replication_connect_quorum": Option(None, (int, type(None)), lambda v: v is None or v >= 0, ">= 0", dynamic=True),
    "replication_connect_timeout": Option(30.0, (int, float), _positive, "> 0 seconds", dynamic=True),
    "replication_timeout": Option(1.0, (int, float), _positive, "> 0 seconds", dynamic=True),
    "replication_skip_conflict": Option(False, bool, dynamic=True),
    "wal_mode": Option("write", str, lambda v: v in ("write", "fsync"), "write or fsync"),
    "wal_max_size": Option(64 * MIB, int, lambda v: v >= 64 * KIB, ">= 65536 bytes"),
    "checkpoint_interval": Option(3600.0, (int, float), lambda v: v >= 0, ">= 0 seconds (0: never)", dynamic=True),
    "checkpoint_count": Option(2, int, lambda v: v >= 1, ">= 1", dynamic=True),
    "checkpoint_chunk_bytes": Option(1 * MIB, int, lambda v: 4 * KIB <= v <= 16 * MIB, "4096..16777216 bytes"),
    "local_tables": Option([], list, _names, "a list of table names"),
    "max_connections": Option(1024, int, lambda v: v >= 1, ">= 1 (peers' links count too)"),
    "max_frame_bytes": Option(16 * MIB, int, lambda v: v >= 4 * KIB, ">= 4096 bytes"),
    "max_txn_bytes": Option(8 * MIB, int, lambda v: v >= KIB, ">= 1024 bytes"),
    "metrics_listen": Option("", str, lambda v: v == "" or _address(v), "HOST:PORT, or empty (no metrics endpoint)"),
    "log_level": Option("info", str, lambda v: v in ("debug", "info", "warning", "error"),
                        "debug, info, warning or error, or Tarantool's 1..7", dynamic=True, normal=_log_level),
    "wal.group_commit_rows_max": Option(1024, int, _positive, "> 0"),
    "wal.group_commit_bytes_max": Option(4 * MIB, int, _positive, "> 0"),
    "wal.group_commit_delay_ms": Option(0.0, (int, float), lambda v: v >= 0, ">= 0 ms"),
    "replication.auto_rejoin": Option(True, bool),
    "replication.default_write_consistency": Option("quorum", str, lambda v: v.lower() in ("one", "quorum", "all"),
                                                    "one, quorum or all"),
    "replication.anti_entropy_interval_seconds": Option(30.0, (int, float), _positive, "> 0 seconds"),
    "replication.delta_sync_threshold_transactions": Option(10_000, int, lambda v: v >= 0, ">= 0"),
    "replication.delta_sync_threshold_seconds": Option(3600.0, (int, float), lambda v: v >= 0, ">= 0 seconds"),
    "replication.synchro_timeout_s": Option(5.0, (int, float), _positive, "> 0 seconds", dynamic=True),
    "cluster.gossip_interval_ms": Option(1000, int, lambda v: v >= 10, ">= 10 ms"),
    "cluster.gossip_fanout": Option(3, int, lambda v: v >= 0, ">= 0"),
    "cluster.suspect_timeout_ms": Option(5000, int, _positive, "> 0 ms"),
    "cluster.dead_timeout_ms": Option(10000, int, _positive, "> 0 ms"),
    "cluster.cluster_secret": Option("", str, shown=_hidden),
    "cluster.cluster_secret_file": Option("", str),
    "tls.cert_file": Option("", str),
    "tls.key_file": Option("", str),
    "tls.ca_file": Option("", str),
    "cluster.dial": Option({}, dict, _dial_map, 'a table of "HOST:PORT" = "HOST:PORT"'),
    "ddl.lock_lease_seconds": Option(30.0, (int, float), _positive, "> 0 seconds"),
    "gc.interval_s": Option(60.0, (int, float), _positive, "> 0 seconds"),
    "gc.min_retention_s": Option(7200.0, (int, float), lambda v: v >= 0, ">= 0 seconds"),
    "gc.max_retention_s": Option(86400.0, (int, float), lambda v: v >= 0, ">= 0 seconds"),
    "transaction.stream_timeout_s": Option(10.0, (int, float), _positive, "> 0 seconds"),
    "sql.statement_timeout_s": Option(10.0, (int, float), lambda v: v >= 0, ">= 0 seconds (0: no limit)"),
    "sql.auto_id_mode": Option("compact", str, lambda v: v in ("compact", "extended"), "compact or extended"),
    "auth.users": Option({}, dict, _users, "a table of user = password or user = { password, grants, "
                         "privileges } (docs/access-control.md)", shown=_users_shown),
    "auth.guest": Option(True, bool),
    "debug.check_invariants": Option(False, bool),
    "debug.trace_file": Option("", str),
    "debug.clock_skew_ms": Option(0, int, lambda v: abs(v) <= 86_400_000, "-86400000..86400000 ms"),
}

# Tarantool's names for options we name otherwise: `box.cfg` shows both, and takes either.
ALIASES = {"replication_synchro_timeout": "replication.synchro_timeout_s"}


class StaticOption(ConfigError):
    """`box.cfg{...}` named an option a running member cannot change (Tarantool's
    ER_RELOAD_CFG)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Can't set option '{name}' dynamically")


class InvalidOption(ConfigError):
    """`box.cfg{...}` gave an unknown option or a bad value (Tarantool's ER_CFG)."""

    def __init__(self, name: str, details: str) -> None:
        super().__init__(f"Incorrect value for option '{name}': {details}")


class Config:
    """Validated options; `cfg["wal.group_commit_rows_max"]` or `cfg.listen`."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def as_dict(self) -> dict[str, Any]:
        """What `box.cfg` shows: the values, secrets hidden (`Option.shown`), and each
        option again under its Tarantool name (`ALIASES`)."""
        shown = {name: shown(value) if (shown := OPTIONS[name].shown if name in OPTIONS else None) else value
                 for name, value in self._values.items()}
        return shown | {alias: shown[name] for alias, name in ALIASES.items() if name in shown}

    def change(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """`box.cfg{...}`: every change checked first, then all made, or none (the first
        refused raises StaticOption or InvalidOption). Returns the options whose value
        changed, by their own names, with the new values."""
        checked: dict[str, Any] = {}
        for given, value in changes.items():
            name = ALIASES.get(given, given)
            option = OPTIONS.get(name) if isinstance(name, str) else None
            if option is None:
                raise InvalidOption(str(given), "unexpected option")
            if not option.dynamic:
                raise StaticOption(str(given))
            if option.normal is not None:
                value = option.normal(value)
            details = _invalid(option, value)
            if details is not None:
                raise InvalidOption(str(given), details)
            checked[name] = value
        changed = {name: value for name, value in checked.items() if self._values[name] != value}
        self._values.update(changed)
        return changed


def dial_address(config: Config | Mapping[str, Any], address: str) -> str:
    """Where this member dials a peer registered at `address`: `[cluster] dial` maps it
    when the peer is reached through a NAT, a port forward or a proxy (the fault harness's);
    SWIM datagrams go the same way."""
    return config["cluster.dial"].get(address, address)


def _flatten(doc: Mapping[str, Any]) -> dict[str, Any]:
    """`[wal] group_commit_rows_max = 8` becomes `wal.group_commit_rows_max`. A section may
    share its name with an option that is not a table: `[replication]` (Marmot's section)
    beside `replication` (Tarantool's list of peers)."""
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict) and (key not in OPTIONS or OPTIONS[key].kind is not dict):
            for sub, subvalue in value.items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            flat[key] = value
    return flat


def validate(name: str, value: Any) -> Any:
    option = OPTIONS.get(name)
    if option is None:
        raise ConfigError(f"unknown option {name!r}")
    if option.normal is not None:
        value = option.normal(value)
    details = _invalid(option, value)
    if details is not None:
        raise ConfigError(f"option {name!r}: {details}")
    return value


def _invalid(option: Option, value: Any) -> str | None:
    """What is wrong with `value` for the option, or None."""
    kind = option.kind
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kinds):
        return f"expected {_kind_name(kind)}, got {value!r}"
    if not option.check(value):
        return f"{value!r} is invalid, must be {option.rule}"
    return None


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("nothing" if k is type(None) else k.__name__ for k in kinds)


def load(path: Path | None = None, overrides: Mapping[str, Any] | None = None, *,
         base: Path | None = None) -> Config:
    """Defaults, then `base` (the config a data directory keeps), then the file, then
    command-line overrides; each value validated. Each layer replaces only the options it
    sets, one by one, those of a `[section]` too: a file that leaves out `listen` or
    `[wal] group_commit_rows_max` keeps the value below it. A table-valued option
    (`[auth.users]`, `[cluster] dial`) is one option, replaced whole."""
    values = {name: option.default for name, option in OPTIONS.items()}
    for layer in (base, path):
        if layer is not None:
            values.update(_read(layer))
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = validate(name, value)
    _check_retention(values)
    if not values["auth.guest"] and not set(values["auth.users"]) - {"guest"}:
        raise ConfigError("[auth] guest = false with no [auth] users: no one could log in; add a user "
                          "(docs/access-control.md)")
    if values["cluster.cluster_secret"] and values["cluster.cluster_secret_file"]:
        raise ConfigError("[cluster] cluster_secret and cluster_secret_file are both set: set one of them")
    if bool(values["tls.cert_file"]) != bool(values["tls.key_file"]):
        raise ConfigError("[tls] cert_file and key_file go together: set both (TLS on the listen port) or neither")
    if values["tls.ca_file"] and not values["tls.cert_file"]:
        raise ConfigError("[tls] ca_file is set without cert_file and key_file: a member that dials peers over TLS "
                          "serves TLS too")
    if values["cluster.dead_timeout_ms"] < values["cluster.suspect_timeout_ms"]:
        raise ConfigError(f"[cluster] dead_timeout_ms = {values['cluster.dead_timeout_ms']} is below suspect_timeout_ms "
                          f"= {values['cluster.suspect_timeout_ms']}: a member is suspected before it is declared dead")
    return Config(values)


def _read(path: Path) -> dict[str, Any]:
    """The options a file sets, validated, by their flat names."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    return {name: validate(name, value) for name, value in _flatten(doc).items()}


def kept_config(text: str, listen: str) -> str:
    """The config a data directory keeps: the file's `text` as written, comments and all,
    with `listen` set to the address the member was started at (the `--listen` flag, which
    overrides the file's), so that a later `serve` with no flags listens where the member
    registered. A top-level `listen` of the file's stays as a comment."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.lstrip().startswith("["):  # the top level ends at the first table
            break
        if "listen" in _toml_or_nothing(line):
            lines[i] = "# " + line
    kept = f"listen = {json.dumps(listen)}\n" + "".join(lines)
    if _toml_or_nothing(kept) != {**_toml_or_nothing(text), "listen": listen}:
        raise ConfigError(f"cannot set listen = {listen!r} in a copy of the config file: write it there as a line "
                          "of its own, before any [section]")
    return kept


def _toml_or_nothing(text: str) -> dict[str, Any]:
    """TOML `text`, or nothing when it is not TOML on its own (a line of a longer value)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def _check_retention(values: Mapping[str, Any]) -> None:
    """WAL kept for less than the delta sync window would send a member that is behind
    by less than it to a checkpoint transfer anyway (Marmot's rule: min >= threshold,
    max >= 2 x threshold)."""
    threshold = values["replication.delta_sync_threshold_seconds"]
    low, high = values["gc.min_retention_s"], values["gc.max_retention_s"]
    if low < threshold:
        raise ConfigError(f"[gc] min_retention_s = {low} is below [replication] delta_sync_threshold_seconds = "
                          f"{threshold}: rows a member may still fetch by delta sync would be collected; raise "
                          "min_retention_s or lower the threshold")
    if high < 2 * threshold:
        raise ConfigError(f"[gc] max_retention_s = {high} is below twice [replication] delta_sync_threshold_seconds "
                          f"= {threshold}: raise max_retention_s to at least {2 * threshold}")
    if high < low:
        raise ConfigError(f"[gc] max_retention_s = {high} is below min_retention_s = {low}")
