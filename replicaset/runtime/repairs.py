"""The repairs a member has made, by kind (`core.anti_entropy.Repair`), kept in a small file
of the data directory, `anti_entropy.json`, so that `box.info.anti_entropy.runs` and the
metrics count them across restarts and re-joins. A re-join starts a new data directory: it
takes the file along (`cli._rejoin`), as it takes the config. A file, not the metastore: a
re-join leaves the old metastore behind, and a file is copied whole.

Written durably (temporary name, fsync, rename) whenever a count changed; a crash between a
repair and its write loses that one count, never the others. A file that cannot be read
does not stop the member (the counts are for operators, not for its data): it counts from
zero again and says so."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from replicaset.core.anti_entropy import Repair
from replicaset.identity import write_durably

FILE_NAME = "anti_entropy.json"


class CountsUnreadable(ValueError):
    """The file is there but holds no counts."""


def load(data_dir: Path) -> dict[Repair, int]:
    """The counts kept in `data_dir`, none when there is no file yet."""
    path = data_dir / FILE_NAME
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CountsUnreadable(f"{path} is unreadable: {exc}") from exc
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, dict):
        raise CountsUnreadable(f"{path}: no \"runs\" map of repair kind to count")
    counts: dict[Repair, int] = {}
    for kind in Repair:
        count = runs.get(kind.value, 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise CountsUnreadable(f"{path}: runs.{kind.value} is not a count: {count!r}")
        counts[kind] = count
    return counts


def save(data_dir: Path, runs: Mapping[Repair, int]) -> None:
    write_durably(data_dir / FILE_NAME, json.dumps({"runs": {kind.value: n for kind, n in runs.items()}}) + "\n")
