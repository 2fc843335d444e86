"""The admin console: `box.*` expressions answered with data, printed as YAML.

The server evaluates a small fixed language (no Lua): `box.info`, `box.info.<field>`,
`box.cfg`, `box.cfg.<option>`, and calls `box.snapshot()`, `box.remove(3)`,
`box.remove(3, {force = true})`: arguments are integers, `true`/`false`, and Lua-style
option tables of those. The client prints the answer as YAML, as Tarantool's console does.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import yaml

_PATH = re.compile(r"^\s*(box(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*(\((.*)\))?\s*$")
_INTEGER = re.compile(r"^-?[0-9]{1,20}$")  # an int64 or a uint64 at most: int() of more digits fails
_OPTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+)$")


class ConsoleError(ValueError):
    """The expression is not one the console knows."""


Provider = Callable[[], Any]
Action = Callable[..., Awaitable[Any]]


def _scalar(text: str) -> int | bool:
    if text in ("true", "false"):
        return text == "true"
    if not _INTEGER.match(text):
        raise ConsoleError(f"{text!r:.40} is not an argument the console takes: an integer (20 digits at most), true or false")
    return int(text)


def _arguments(text: str) -> list[Any]:
    """`3, {force = true}` -> `[3, {"force": True}]`."""
    args: list[Any] = []
    rest = text.strip()
    while rest:
        if rest.startswith("{"):
            end = rest.find("}")
            if end < 0:
                raise ConsoleError(f"unclosed option table in {text!r}")
            options = {}
            for item in filter(None, (part.strip() for part in rest[1:end].split(","))):
                option = _OPTION.match(item)
                if option is None:
                    raise ConsoleError(f"{item!r} is not `name = value`")
                options[option.group(1)] = _scalar(option.group(2).strip())
            args.append(options)
            rest = rest[end + 1:].strip()
            if rest and not rest.startswith(","):
                raise ConsoleError(f"expected a comma after the option table in {text!r}")
            rest = rest[1:].strip()
        else:
            head, _, rest = rest.partition(",")
            args.append(_scalar(head.strip()))
            rest = rest.strip()
    return args


async def evaluate(expr: str, values: Mapping[str, Provider], actions: Mapping[str, Action]) -> Any:
    """Answer `box.info.vclock`-style paths from `values` and calls like `box.snapshot()`."""
    match = _PATH.match(expr)
    if not match:
        raise ConsoleError(f"cannot evaluate {expr.strip()!r}: try box.info, box.cfg or box.snapshot()")
    path, call = match.group(1), match.group(2)
    if call:
        action = actions.get(path)
        if action is None:
            raise ConsoleError(f"{path}() is not a known function")
        args = _arguments(match.group(3))
        try:
            return await action(*args)
        except TypeError as exc:
            raise ConsoleError(f"{path}: {exc}") from exc
    parts = path.split(".")
    for depth in range(len(parts), 0, -1):
        provider = values.get(".".join(parts[:depth]))
        if provider is None:
            continue
        value = provider()
        for name in parts[depth:]:
            if not isinstance(value, Mapping) or name not in value:
                raise ConsoleError(f"{path} does not exist")
            value = value[name]
        return value
    raise ConsoleError(f"{path} does not exist")


def to_yaml(value: Any) -> str:
    """Tarantool-style console output: a YAML document of the result list."""
    return yaml.safe_dump([value], explicit_start=True, explicit_end=True, sort_keys=False, default_flow_style=False)
