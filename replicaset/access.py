"""Users, their passwords and their privileges, from `[auth]` (docs/access-control.md).

Theory of operation: the config is read once, at start, into one `Rights` per user (and
one for `guest`); a session holds its user's. A check is answered from the statement's
`StatementAccess` (replicaset.storage.access) and memoed on it per user, so a request
pays a dict lookup; a user who may run any SQL (`sql_unrestricted`) is not checked at all.
Passwords are kept only as Tarantool keeps them, sha1(sha1(password)), enough to check a
chap-sha1 scramble. Messages are Tarantool's (ER_ACCESS_DENIED).
"""

from __future__ import annotations

import base64
import binascii
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from replicaset.iproto.auth import password_hash
from replicaset.storage.access import UNIVERSE, StatementAccess

GUEST = "guest"
ALL_TABLES = "*"
TABLE_PRIVILEGES = frozenset({"read", "write"})
GLOBAL_PRIVILEGES = frozenset({"ddl", "admin"})
_USER_KEYS = frozenset({"password", "password_hash", "grants", "privileges"})
_HASH_BYTES = 20
# SQLite compares names without regard to ASCII case only: "Ä" and "ä" are two tables.
_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold(name: str) -> str:
    """A table name as grants are matched: ASCII case folded, as SQLite folds it."""
    return name.translate(_FOLD)


class AccessConfigError(ValueError):
    """`[auth] users` is malformed; the message names the user and the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rights:
    """What one user may do. Table names are `fold`ed (SQLite's names ignore ASCII case);
    `ALL_TABLES` among them grants every table, the system ones included."""

    user: str
    read: frozenset[str]
    write: frozenset[str]
    ddl: bool
    admin: bool
    # No SQL statement is refused to this user, so none is looked at: an attribute, not a
    # property, since every request reads it.
    sql_unrestricted: bool = field(init=False)

    def __post_init__(self) -> None:
        unrestricted = self.admin or (ALL_TABLES in self.read and ALL_TABLES in self.write and self.ddl)
        object.__setattr__(self, "sql_unrestricted", unrestricted)

    def may_read(self, table: str) -> bool:
        return self.admin or ALL_TABLES in self.read or (table != UNIVERSE and fold(table) in self.read)

    def may_write(self, table: str) -> bool:
        return self.admin or ALL_TABLES in self.write or fold(table) in self.write

    @property
    def sees_every_table(self) -> bool:
        return self.admin or self.ddl or ALL_TABLES in self.read or ALL_TABLES in self.write

    def sees(self, table: str) -> bool:
        """Whether `table` is listed to this user in `_vspace`, as Tarantool lists the
        spaces a user has any privilege on."""
        return self.may_read(table) or self.may_write(table) or self.ddl

    def sql_refusal(self, access: StatementAccess) -> str | None:
        """Why this user may not run a statement that needs `access`, None when they may.
        Memoed on `access` (dropped with it when the schema changes)."""
        verdicts = access.verdicts
        user = self.user
        if user in verdicts:
            return verdicts[user]
        verdict = verdicts[user] = self._refusal(access)
        return verdict

    def _refusal(self, access: StatementAccess) -> str | None:
        user = self.user
        if access.opaque and not self.admin:
            return (f"Access to a text of several statements is denied for user '{user}': the statements after "
                    "the first name objects the first creates, so what they touch cannot be checked before they "
                    "run; send them one at a time")
        if access.ddl is not None and not self.ddl and not self.admin:
            return f"{access.ddl} access to universe '' is denied for user '{user}'"
        for table in access.reads:
            if not self.may_read(table):
                if table == UNIVERSE:
                    return f"Read access to universe '' is denied for user '{user}'"
                return f"Read access to space '{table}' is denied for user '{user}'"
        for table in access.writes:
            if not self.may_write(table):
                return f"Write access to space '{table}' is denied for user '{user}'"
        return None


def no_rights(name: str) -> Rights:
    return Rights(user=name, read=frozenset(), write=frozenset(), ddl=False, admin=False)


#: A connection's rights before it logs in when guest is disabled: peers' requests only.
NOBODY = no_rights("")


def superuser(name: str) -> Rights:
    """Every privilege: a user given by password alone, and guest in the open mode."""
    return Rights(user=name, read=frozenset({ALL_TABLES}), write=frozenset({ALL_TABLES}), ddl=True, admin=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    """A configured user: sha1(sha1(password)) (None for guest, who has none) and rights."""

    rights: Rights
    password_hash: bytes | None


def parse_users(raw: Mapping[str, Any]) -> dict[str, User]:
    """`[auth] users` as users. A string is a password and makes a superuser (what every
    user was before privileges existed); a table holds `password` or `password_hash`
    (base64 of sha1(sha1(password)), what Tarantool's `box.schema.user.password` gives),
    `grants` (table name or "*" -> ["read", "write"]) and `privileges` (["ddl", "admin"]).
    `guest` takes a table without a password: the grants of connections that log in as
    no one."""
    users: dict[str, User] = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not name:
            raise AccessConfigError(f"user name {name!r} must be a non-empty string")
        if isinstance(entry, str):
            if name == GUEST:
                raise AccessConfigError("guest has no password: give its grants as a table, "
                                        '[auth.users.guest] grants = { "*" = ["read"] }')
            users[name] = User(rights=superuser(name), password_hash=password_hash(entry))
        elif isinstance(entry, Mapping):
            users[name] = _table_user(name, entry)
        else:
            raise AccessConfigError(f"user {name!r}: expected a password or a table, got {entry!r:.40}")
    return users


def _table_user(name: str, entry: Mapping[str, Any]) -> User:
    unknown = set(entry) - _USER_KEYS
    if unknown:
        raise AccessConfigError(f"user {name!r}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                                f"known: {', '.join(sorted(_USER_KEYS))}")
    given = [key for key in ("password", "password_hash") if key in entry]
    if name == GUEST:
        if given:
            raise AccessConfigError("guest has no password: it is who a connection is until it logs in")
        hashed = None
    elif len(given) != 1:
        raise AccessConfigError(f"user {name!r}: give exactly one of password and password_hash")
    elif given[0] == "password":
        if not isinstance(entry["password"], str):
            raise AccessConfigError(f"user {name!r}: password must be a string")
        hashed = password_hash(entry["password"])
    else:
        hashed = _decode_hash(name, entry["password_hash"])
    read: set[str] = set()
    write: set[str] = set()
    grants = entry.get("grants", {})
    if not isinstance(grants, Mapping):
        raise AccessConfigError(f"user {name!r}: grants must be a table of table name = [privileges]")
    for table, privileges in grants.items():
        if not isinstance(table, str) or not table:
            raise AccessConfigError(f"user {name!r}: grant on {table!r}: a table name or \"*\"")
        if not isinstance(privileges, list) or not set(privileges) <= TABLE_PRIVILEGES or not privileges:
            raise AccessConfigError(f"user {name!r}: grants on {table!r} must be a list of read and write, "
                                    f"got {privileges!r:.60}")
        if "read" in privileges:
            read.add(fold(table))
        if "write" in privileges:
            write.add(fold(table))
    privileges = entry.get("privileges", [])
    if not isinstance(privileges, list) or not set(privileges) <= GLOBAL_PRIVILEGES:
        raise AccessConfigError(f"user {name!r}: privileges must be a list of ddl and admin (read and write "
                                f"are granted per table in grants), got {privileges!r:.60}")
    rights = Rights(user=name, read=frozenset(read), write=frozenset(write), ddl="ddl" in privileges,
                    admin="admin" in privileges)
    return User(rights=rights, password_hash=hashed)


def _decode_hash(name: str, value: Any) -> bytes:
    try:
        decoded = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
    except binascii.Error:
        decoded = b""
    if len(decoded) != _HASH_BYTES:
        raise AccessConfigError(f"user {name!r}: password_hash must be base64 of the 20 bytes of "
                                "sha1(sha1(password)), as box.schema.user.password() gives")
    return decoded


def guest_rights(users: Mapping[str, User], guest_enabled: bool) -> Rights | None:
    """guest's rights, None when guest may not connect. With no user configured at all,
    guest is a superuser (the open loopback mode: `make demo`, a console without a
    user); once any is, guest has only what `[auth.users.guest]` grants, nothing by
    default."""
    if not users:
        return superuser(GUEST)
    if not guest_enabled:
        return None
    configured = users.get(GUEST)
    return configured.rights if configured is not None else no_rights(GUEST)
