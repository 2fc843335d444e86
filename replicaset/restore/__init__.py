"""Point-in-time restore (docs/restore.md); `base` and `logs` are also what the audit's
convergence check replays with."""
