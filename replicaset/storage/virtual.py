"""Virtual tables: which modules replicate, and how (docs/design/virtual_tables.md).

A module's shadow tables are derived data: every member runs the CREATE VIRTUAL TABLE
(a DDL row) and maintains its own, so they are never captured nor replicated. What
replicates depends on where a virtual table's rows live:

- FTS5 with its own content and R*Tree own their rows. A client statement's changes to
  them are found through one shadow table that holds a row per logical row (the
  *marker*: `<name>_content` for FTS5, `<name>_rowid` for R*Tree), read back from the
  virtual table once the statement ran, and replicated as rows of the virtual table keyed
  by its rowid. Appliers write them through the module, which keeps its own index.
- FTS5 with external content (`content='docs'`) owns nothing: its rows are those of the
  content table, which replicates as any table. On the member that wrote, the client's
  triggers keep the index (SQLite's documented recipe); wherever rows change with
  triggers off (the apply path and the writer's unique resolution), `IndexUpkeep` does
  what those triggers do (`replicaset.storage.index_upkeep`), so the index follows the content
  on every member.

Contentless FTS5 (`content=''`) cannot give its rows back and other modules are unknown:
both are refused at CREATE, naming what to use instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import apsw

from replicaset.storage.tokens import Kind, quote, tokenize

_CREATE = re.compile(r"^\s*CREATE\s+VIRTUAL\s+TABLE\s.*?\bUSING\s+(\w+)\s*(?:\((.*)\))?\s*;?\s*$",
                     re.IGNORECASE | re.DOTALL)
SUPPORTED = "fts5 and rtree"


@dataclass(frozen=True, slots=True)
class VirtualTable:
    """`key` names the rowid as replicated rows carry it (`rowid` for FTS5, R*Tree's first
    column); `columns` are the key and the columns a row image holds; `marker` is the
    shadow table with one row per logical row, None when the rows live elsewhere;
    `content` and `content_rowid` name an external-content index's table and its rowid."""

    name: str
    module: str
    key: str
    columns: tuple[str, ...]
    marker: str | None
    content: str | None = None
    content_rowid: str = "rowid"
    refusal: str | None = None

    def read_sql(self) -> str:
        return (f"SELECT {', '.join(map(quote, self.columns))} FROM {quote(self.name)}"
                f" WHERE {quote(self.key)} = ?")


# The shadow tables each supported module makes, by suffix (its xShadowName).
SHADOW_SUFFIXES = {"fts5": ("data", "idx", "content", "docsize", "config"),
                   "rtree": ("node", "parent", "rowid"), "rtree_i32": ("node", "parent", "rowid")}
MARKER_SUFFIX = {"fts5": "content", "rtree": "rowid", "rtree_i32": "rowid"}


@dataclass(frozen=True, slots=True)
class Declared:
    """A virtual table as its CREATE statement declares it: read from sqlite_schema alone,
    which the preupdate hook may do even while the module builds the table (asking the
    table itself would construct it again)."""

    name: str
    module: str
    options: dict[str, str]

    @property
    def content(self) -> str | None:
        return self.options.get("content") if self.module == "fts5" else None

    def owns_shadow(self, table: str) -> bool:
        return any(table == f"{self.name}_{suffix}" for suffix in SHADOW_SUFFIXES.get(self.module, ()))

    @property
    def marker(self) -> str | None:
        """The shadow table with one row per logical row, when the table owns its rows."""
        suffix = MARKER_SUFFIX.get(self.module)
        if suffix is None or self.content is not None:
            return None
        return f"{self.name}_{suffix}"


def declared(conn: apsw.Connection) -> dict[str, Declared]:
    """Every virtual table of main, from its CREATE statement."""
    found = {}
    for name, sql in conn.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'"
                                  " AND sql LIKE 'CREATE VIRTUAL TABLE%'").fetchall():
        match = _CREATE.match(sql)
        module = match.group(1).lower() if match else "?"
        args = _split_args(match.group(2) or "") if match else []
        options = {k.strip().lower(): _unquote(v.strip()) for k, sep, v in (a.partition("=") for a in args) if sep}
        found[name] = Declared(name, module, options)
    return found


def describe(conn: apsw.Connection, vt: Declared) -> VirtualTable:
    """What replicates of virtual table `vt`, or why it cannot; asks the table its columns."""
    name, module = vt.name, vt.module
    visible = tuple(r[1] for r in conn.execute(f"PRAGMA main.table_xinfo({quote(name)})") if r[6] == 0)
    if module == "fts5":
        if vt.content == "":
            return VirtualTable(name, module, "rowid", (), None, refusal=(
                f"contentless FTS5 table {name!r} (content='') cannot replicate: its rows cannot be read back; "
                "use external content (content='table') or an FTS5 table with its own content"))
        return VirtualTable(name, module, "rowid", ("rowid", *visible), vt.marker, content=vt.content,
                            content_rowid=vt.options.get("content_rowid", "rowid"))
    if module in ("rtree", "rtree_i32"):
        return VirtualTable(name, module, visible[0], visible, vt.marker)
    return VirtualTable(name, module, "rowid", (), None, refusal=(
        f"virtual table {name!r} uses module {module!r}, which does not replicate: its shadow tables cannot be "
        f"told apart from its rows; supported modules are {SUPPORTED}"))


def _split_args(text: str) -> list[str]:
    """The module arguments, split at commas outside parentheses, quotes and comments."""
    args, current = [], []
    for token in tokenize(text):
        if token.kind is Kind.PUNCT and token.text == "," and token.depth == 0:
            args.append("".join(current))
            current = []
        elif token.kind is not Kind.SPACE or current:
            current.append(token.text)
    args.append("".join(current))
    return [a.strip() for a in args if a.strip()]


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] in "'\"`[" and value[-1] == ("]" if value[0] == "[" else value[0]):
        inner = value[1:-1]
        return inner.replace(value[0] * 2, value[0]) if value[0] != "[" else inner
    return value
