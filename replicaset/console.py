"""The admin console: `box.*` expressions answered with data, printed as YAML.

The server evaluates a small fixed language (no Lua): `box.info`, `box.info.<field>`,
`box.cfg`, `box.cfg.<option>`, `box.snapshot()`. The client prints the answer as YAML,
as Tarantool's console does.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import yaml

_PATH = re.compile(r"^\s*(box(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*(\(\s*\))?\s*$")


class ConsoleError(ValueError):
    """The expression is not one the console knows."""


Provider = Callable[[], Any]
Action = Callable[[], Awaitable[Any]]


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
        return await action()
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
