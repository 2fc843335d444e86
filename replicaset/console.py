"""The admin console: what a Tarantool operator types at `box`, answered with data, printed
as YAML.

The server evaluates a small fixed language, not Lua, but written as Lua so that what an
operator types at Tarantool's prompt, or a connector sends as EVAL (`return box.info.status`),
evaluates here: one expression, after an optional `return`, starting at `box` and going on
with any of

- `.name` and `[key]` (`key` an integer or a string): a field of a table. Arrays count from 1,
  as in Lua; a field a table lacks is nil (YAML's null), and indexing nil or a scalar is an
  error naming the path that held it, as in Lua;
- `(args)` and Lua's call with a table, `f{...}`: a call of a function under `box`.

Arguments are integers (20 digits at most), finite numbers, strings in single or double
quotes, `true`, `false`, `nil`, and tables of those (`{force = true}`, `{"a", "b"}`,
`{["wal.group_commit_rows_max"] = 8}`), nested 8 deep at most.

What `box` holds is the caller's (`Entry`): tables read only when an expression reaches them,
functions, and entries that are both, as Tarantool's `box.cfg` (a table, and `box.cfg{...}`)
and `box.info.gc` (a table, and `box.info.gc()`). A table whose keys hold dots
(`box.cfg`'s `wal.group_commit_rows_max`) is reached by the path those dots spell:
`box.cfg.wal.group_commit_rows_max`.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

Provider = Callable[[], Any]
Action = Callable[..., Awaitable[Any]]

INTEGER_DIGITS_MAX = 20  # an int64 or a uint64 at most: int() of thousands of digits fails
TABLE_DEPTH_MAX = 8

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
  | (?P<punct>[.\[\](){},;=-])
""", re.VERBOSE)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}
_KEYWORDS = {"true": True, "false": False, "nil": None}


class ConsoleError(ValueError):
    """The expression is not one the console evaluates, or it failed; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """A name under `box`: `read` gives its value as a table when an expression reaches it,
    `call` is what calling it does, `fields` are names under it that are entries of their
    own (functions, or tables that can also be called)."""

    read: Provider | None = None
    call: Action | None = None
    fields: Mapping[str, Entry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # name, number, string, punct, end
    text: str
    value: Any = None


@dataclass(frozen=True, slots=True)
class _Step:
    """One step along the path: `.name` or `[key]` (kind "index", `key`), or a call."""

    kind: str  # index, call
    key: Any = None
    args: tuple[Any, ...] = ()
    dotted: bool = False  # `.name`, which may join the names after it (`box.cfg.wal.x`)


TRY = "try box.info, box.cfg or box.snapshot()"


def _tokens(expr: str) -> list[_Token]:
    tokens, position = [], 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ConsoleError(f"cannot evaluate {expr.strip()!r:.60}: unexpected {expr[position]!r} at {position + 1} "
                               f"({TRY})")
        position = match.end()
        kind = match.lastgroup
        text = match.group()
        if kind == "space":
            continue
        if kind == "string":
            tokens.append(_Token("string", text, _unquote(text)))
        else:
            tokens.append(_Token(kind or "", text))
    tokens.append(_Token("end", "the end"))
    return tokens


def _unquote(text: str) -> str:
    def escape(match: re.Match[str]) -> str:
        char = match.group(1)
        if char not in _ESCAPES:
            raise ConsoleError(f"unknown escape \\{char} in {text:.40}")
        return _ESCAPES[char]

    return re.sub(r"\\(.)", escape, text[1:-1])


def _number(text: str, negative: bool) -> int | float:
    if re.fullmatch(r"[0-9]+", text):
        if len(text) > INTEGER_DIGITS_MAX:
            raise ConsoleError(f"{text:.40} is too long: integers have {INTEGER_DIGITS_MAX} digits at most")
        return -int(text) if negative else int(text)
    value = float(text)
    if not math.isfinite(value):
        raise ConsoleError(f"{text:.40} is not a finite number")
    return -value if negative else value


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = _tokens(expr)
        self.at = 0

    def peek(self, text: str | None = None) -> bool:
        token = self.tokens[self.at]
        return text is None or (token.kind in ("punct", "name") and token.text == text)

    def next(self) -> _Token:
        token = self.tokens[self.at]
        if token.kind != "end":
            self.at += 1
        return token

    def expect(self, text: str) -> None:
        token = self.next()
        if token.text != text or token.kind not in ("punct", "name"):
            raise self.error(f"expected {text!r}, found {token.text!r:.40}")

    def error(self, why: str) -> ConsoleError:
        return ConsoleError(f"cannot evaluate {self.expr.strip()!r:.60}: {why}")

    def chunk(self) -> list[_Step]:
        """`[return] box<steps> [;]`."""
        if self.peek("return"):
            self.next()
        head = self.next()
        if head.kind != "name" or head.text != "box":
            raise self.error(TRY)
        steps = []
        while True:
            token = self.tokens[self.at]
            if token.kind == "punct" and token.text == ".":
                self.next()
                name = self.next()
                if name.kind != "name":
                    raise self.error(f"expected a name after '.', found {name.text!r:.40}")
                steps.append(_Step("index", name.text, dotted=True))
            elif token.kind == "punct" and token.text == "[":
                self.next()
                key = self.value(0)
                if not isinstance(key, (int, str)) or isinstance(key, bool):
                    raise self.error(f"a key is an integer or a string, got {key!r:.40}")
                self.expect("]")
                steps.append(_Step("index", key))
            elif token.kind == "punct" and token.text == "(":
                self.next()
                args = []
                if not self.peek(")"):
                    args.append(self.value(0))
                    while self.peek(","):
                        self.next()
                        args.append(self.value(0))
                self.expect(")")
                steps.append(_Step("call", args=tuple(args)))
            elif token.kind == "punct" and token.text == "{":
                steps.append(_Step("call", args=(self.table(0),)))
            else:
                break
        if self.peek(";"):
            self.next()
        if self.tokens[self.at].kind != "end":
            raise self.error(f"unexpected {self.tokens[self.at].text!r:.40}")
        return steps

    def value(self, depth: int) -> Any:
        token = self.next()
        if token.kind == "number":
            return _number(token.text, negative=False)
        if token.kind == "punct" and token.text == "-":
            number = self.next()
            if number.kind != "number":
                raise self.error(f"expected a number after '-', found {number.text!r:.40}")
            return _number(number.text, negative=True)
        if token.kind == "string":
            return token.value
        if token.kind == "name" and token.text in _KEYWORDS:
            return _KEYWORDS[token.text]
        if token.kind == "punct" and token.text == "{":
            self.at -= 1
            return self.table(depth + 1)
        raise self.error(f"{token.text!r:.40} is not a value the console takes: a number, a string, true, false, "
                         "nil or a table")

    def table(self, depth: int) -> dict[Any, Any] | list[Any]:
        """A Lua table: named fields make a dict, positional ones a list, none an empty dict."""
        if depth >= TABLE_DEPTH_MAX:
            raise self.error(f"tables nest {TABLE_DEPTH_MAX} deep at most")
        self.expect("{")
        named: dict[Any, Any] = {}
        listed: list[Any] = []
        while not self.peek("}"):
            token, after = self.tokens[self.at], self.tokens[self.at + 1]
            if token.kind == "name" and after.kind == "punct" and after.text == "=":
                self.at += 2
                key: Any = token.text
            elif token.kind == "punct" and token.text == "[":
                self.next()
                key = self.value(depth)
                if key is None or isinstance(key, (dict, list)):
                    raise self.error(f"a table key is a number, a string or a boolean, got {key!r:.40}")
                self.expect("]")
                self.expect("=")
            else:
                key = len(listed) + 1
            value = self.value(depth)
            if key == len(listed) + 1 and not isinstance(key, (str, bool)):
                listed.append(value)
            elif value is not None:  # Lua: a field set to nil is no field
                named[key] = value
            if not self.peek(",") and not self.peek(";"):
                break
            self.next()
        self.expect("}")
        if named and listed:
            raise self.error("a table mixes named and positional fields")
        return listed or named


def parse(expr: str) -> list[_Step]:
    """The steps an expression takes from `box`; a ConsoleError says what is wrong with it."""
    return _Parser(expr).chunk()


def _path_of(path: str, step: _Step) -> str:
    if step.kind == "call":
        return f"{path}(...)" if step.args else f"{path}()"
    return f"{path}.{step.key}" if step.dotted else f"{path}[{step.key!r}]"


def _index(value: Any, steps: Sequence[_Step], at: int, path: str) -> tuple[Any, int, str]:
    """`value[key]` for the step at `at`, as Lua indexes it; a run of `.name` steps may name
    one dotted key. Returns the value, the next step and the path so far."""
    step = steps[at]
    if value is None or isinstance(value, (bool, int, float, str)):
        kind = "nil" if value is None else "boolean" if isinstance(value, bool) else (
            "string" if isinstance(value, str) else "number")
        raise ConsoleError(f"attempt to index {path} (a {kind} value)")
    if isinstance(value, Mapping):
        if step.dotted:
            names = []
            for later in steps[at:]:
                if later.kind != "index" or not later.dotted:
                    break
                names.append(later.key)
            for count in range(len(names), 1, -1):
                key = ".".join(names[:count])
                if key in value:
                    return value[key], at + count, f"{path}.{key}"
        return value.get(step.key), at + 1, _path_of(path, step)
    if isinstance(value, Sequence) and isinstance(step.key, int) and not isinstance(step.key, bool):
        found = value[step.key - 1] if 1 <= step.key <= len(value) else None
        return found, at + 1, _path_of(path, step)
    return None, at + 1, _path_of(path, step)


async def _call(entry: Any, step: _Step, path: str) -> Any:
    if not isinstance(entry, Entry) or entry.call is None:
        raise ConsoleError(f"attempt to call {path} (not a function)")
    try:
        inspect.signature(entry.call).bind(*step.args)
    except TypeError as exc:
        raise ConsoleError(f"{path}: {exc}") from None
    return await entry.call(*step.args)


def _read(entry: Entry, path: str) -> Any:
    if entry.read is not None:
        return entry.read()
    if entry.call is not None:
        raise ConsoleError(f"{path} is a function: call it, {path}()")
    raise ConsoleError(f"{path} is not a value: try {', '.join(f'{path}.{name}' for name in entry.fields)}")


async def evaluate(expr: str, box: Entry) -> Any:
    """The value of `expr`, an expression starting at `box` (see the module's docstring)."""
    steps = parse(expr)
    value: Any = box
    path = "box"
    at = 0
    while at < len(steps):
        step = steps[at]
        if step.kind == "call":
            value = await _call(value, step, path)
            path, at = _path_of(path, step), at + 1
            continue
        if isinstance(value, Entry):
            if (step.dotted and step.key in value.fields) or value.read is None:
                value, path, at = value.fields.get(step.key), _path_of(path, step), at + 1
                continue
            value = _read(value, path)
        value, at, path = _index(value, steps, at, path)
    return _read(value, path) if isinstance(value, Entry) else value


def to_yaml(value: Any) -> str:
    """Tarantool-style console output: a YAML document of the result list."""
    return yaml.safe_dump([value], explicit_start=True, explicit_end=True, sort_keys=False, default_flow_style=False)
