"""What the simulation tests share: one seeded run, checked, with its seed in any failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replicaset.sim import Simulation


def simulate(tmp_path: Path, seed: int, **kwargs: Any) -> Simulation:
    sim = Simulation(tmp_path / f"seed{seed}", seed=seed, **kwargs)
    try:
        sim.run()
        sim.check()
    except BaseException as exc:
        raise AssertionError(f"simulation failed; reproduce with seed={seed} {kwargs}: {exc}") from exc
    finally:
        sim.close()
    return sim
