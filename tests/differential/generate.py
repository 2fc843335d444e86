"""Seeded statements for the differential kit: one seed gives the same case every time.

A small schema (a parent with a UNIQUE name and a CHECK, a WITHOUT ROWID child with a
composite key and ON DELETE CASCADE, a STRICT tally with a STORED generated column that an
upserting trigger feeds, an index, a view, and a table without a declared key with a VIRTUAL
generated column and a partial UNIQUE index) takes writes and reads drawn over a small key
range, so that upserts meet rows, REPLACE deletes them, cascades fire, and UNIQUE, NOT NULL,
CHECK and foreign-key errors happen by themselves; whether a statement fails is not drawn,
only compared. Every key is given explicitly (the server's auto-assigned ids are not
SQLite's). No non-deterministic function appears. Steps hold one to `STEP_STATEMENTS_MAX`
statements for one member, drawn from the seed too.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tests.differential.kit import Case, Expect, Statement

STEP_STATEMENTS_MAX = 4
KEYS_MAX = 12
NAMES = ("ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ida", "jo", "kim", "lou")


def schema(p: str) -> list[str]:
    """The DDL of the tables named with prefix `p`, one statement each."""
    return [
        (f"CREATE TABLE {p}parent(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
         f"qty INTEGER NOT NULL DEFAULT 0 CHECK (qty >= 0), doc TEXT)"),
        (f"CREATE TABLE {p}child(pid INTEGER NOT NULL REFERENCES {p}parent(id) ON DELETE CASCADE, "
         f"n INTEGER NOT NULL, note TEXT, PRIMARY KEY (pid, n)) WITHOUT ROWID"),
        f"CREATE TABLE {p}tally(k TEXT PRIMARY KEY, v REAL NOT NULL, twice REAL AS (v * 2) STORED) STRICT",
        f"CREATE INDEX {p}child_note ON {p}child(note)",
        (f"CREATE TRIGGER {p}parent_qty AFTER UPDATE OF qty ON {p}parent BEGIN "
         f"INSERT INTO {p}tally(k, v) VALUES ('p' || new.id, new.qty) ON CONFLICT(k) DO UPDATE SET v = excluded.v; END"),
        (f"CREATE VIEW {p}totals AS SELECT p.id, p.name, p.qty, count(c.n) AS children "
         f"FROM {p}parent p LEFT JOIN {p}child c ON c.pid = p.id GROUP BY p.id"),
        f"CREATE TABLE {p}log(who TEXT NOT NULL, amount INTEGER, label TEXT AS (who || ':' || amount))",
        f"CREATE UNIQUE INDEX {p}log_big ON {p}log(who) WHERE amount > 15",
    ]


def _parent_write(rng: random.Random, p: str) -> str:
    key, name, qty = rng.randint(1, KEYS_MAX), rng.choice(NAMES), rng.randint(-2, 20)
    name_sql = "NULL" if rng.random() < 0.05 else f"'{name}'"
    return rng.choice([
        f"INSERT INTO {p}parent(id, name, qty) VALUES ({key}, {name_sql}, {qty})",
        f"INSERT OR IGNORE INTO {p}parent(id, name, qty) VALUES ({key}, {name_sql}, {qty})",
        f"INSERT OR REPLACE INTO {p}parent(id, name, qty) VALUES ({key}, {name_sql}, {qty})",
        (f"INSERT INTO {p}parent(id, name, qty) VALUES ({key}, {name_sql}, {qty}) "
         f"ON CONFLICT(id) DO UPDATE SET qty = qty + excluded.qty"),
        (f"INSERT INTO {p}parent(id, name, qty) VALUES ({key}, {name_sql}, {qty}) "
         f"ON CONFLICT(name) DO UPDATE SET qty = excluded.qty RETURNING id, name, qty"),
        f"UPDATE {p}parent SET qty = qty + {qty - 10} WHERE id BETWEEN {key} AND {key + 3}",
        f"UPDATE {p}parent SET name = {name_sql} WHERE id = {key} RETURNING name",
        f"UPDATE {p}parent SET doc = json_object('k', id, 'tags', json_array({name_sql}, qty)) WHERE qty > {qty}",
        f"DELETE FROM {p}parent WHERE id = {key}",
        f"DELETE FROM {p}parent WHERE qty = {qty} RETURNING id",
    ])


def _child_write(rng: random.Random, p: str) -> str:
    pid, n, note = rng.randint(1, KEYS_MAX), rng.randint(1, 4), rng.choice(NAMES)
    return rng.choice([
        f"INSERT INTO {p}child(pid, n, note) VALUES ({pid}, {n}, '{note}')",
        (f"INSERT INTO {p}child(pid, n, note) VALUES ({pid}, {n}, '{note}') "
         f"ON CONFLICT(pid, n) DO UPDATE SET note = note || '+' || excluded.note"),
        f"REPLACE INTO {p}child(pid, n, note) VALUES ({pid}, {n}, NULL)",
        f"INSERT OR IGNORE INTO {p}child(pid, n, note) SELECT id, {n}, name FROM {p}parent WHERE qty < {rng.randint(0, 20)}",
        f"UPDATE {p}child SET note = upper(note) WHERE note < '{note}'",
        f"UPDATE {p}child SET pid = {pid} WHERE pid = {rng.randint(1, KEYS_MAX)} AND n = {n}",
        f"DELETE FROM {p}child WHERE n = {n} AND pid >= {pid}",
    ])


def _tally_write(rng: random.Random, p: str) -> str:
    k = f"t{rng.randint(1, 5)}"
    return rng.choice([
        f"INSERT INTO {p}tally(k, v) VALUES ('{k}', {rng.randint(0, 9)}.5) ON CONFLICT(k) DO UPDATE SET v = v + 1",
        (f"INSERT INTO {p}tally(k, v) SELECT 'n' || pid, count(*) FROM {p}child WHERE true GROUP BY pid "
         f"ON CONFLICT(k) DO UPDATE SET v = excluded.v"),
        f"INSERT INTO {p}tally(k, v) VALUES ('{k}', 'not a number')",
        f"DELETE FROM {p}tally WHERE v > {rng.randint(0, 20)} RETURNING k, twice",
    ])


def _log_write(rng: random.Random, p: str) -> str:
    who, amount = rng.choice(NAMES[:5]), rng.randint(0, 20)
    return rng.choice([
        f"INSERT INTO {p}log(who, amount) VALUES ('{who}', {amount})",
        f"INSERT INTO {p}log(who, amount) SELECT name, qty FROM {p}parent WHERE id <= {rng.randint(1, KEYS_MAX)}",
        f"UPDATE {p}log SET amount = amount + {rng.randint(1, 5)} WHERE who = '{who}' RETURNING label",
        f"DELETE FROM {p}log WHERE amount < {amount} AND who = '{who}'",
    ])


def _read(rng: random.Random, p: str) -> str:
    return rng.choice([
        f"SELECT * FROM {p}totals ORDER BY id",
        f"SELECT name, qty, doc ->> '$.k' FROM {p}parent WHERE qty BETWEEN {rng.randint(0, 10)} AND 20 ORDER BY name",
        f"SELECT pid, group_concat(note, ',') FROM (SELECT * FROM {p}child ORDER BY n) GROUP BY pid ORDER BY pid",
        f"SELECT k, v, twice FROM {p}tally ORDER BY k",
        f"SELECT count(*), sum(qty), json_group_array(name) FROM (SELECT * FROM {p}parent ORDER BY id)",
        f"SELECT who, amount, label FROM {p}log ORDER BY who, amount",
    ])


_KINDS: list[tuple[float, Callable[[random.Random, str], str]]] = [
    (0.35, _parent_write), (0.25, _child_write), (0.1, _tally_write), (0.1, _log_write), (0.2, _read),
]


def generated_case(seed: int, statements: int) -> Case:
    """The schema, one DDL statement a step, then `statements` drawn from `seed`; the
    tables' names carry the seed, so that cases of several seeds share one replica set."""
    rng = random.Random(seed)
    prefix = f"g{seed}_"
    steps = [[Statement(sql=sql, expect=Expect.AGREE, where=f"seed {seed}, schema {i}")]
             for i, sql in enumerate(schema(prefix))]
    weights = [weight for weight, _ in _KINDS]
    drawn = 0
    while drawn < statements:
        size = min(rng.randint(1, STEP_STATEMENTS_MAX), statements - drawn)
        step = []
        for _ in range(size):
            (make,) = rng.choices([kind for _, kind in _KINDS], weights)
            step.append(Statement(sql=make(rng, prefix), expect=Expect.AGREE, where=f"seed {seed}, statement {drawn}"))
            drawn += 1
        steps.append(step)
    return Case(name=f"seed {seed}", steps=steps)
