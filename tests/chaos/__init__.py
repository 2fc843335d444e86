"""Tests of the fault harness (`replicaset.testing.chaos`)."""

# The time limit of a seeded run of the harness: its schedule, the members' starts and the
# convergence, on a loaded machine (tests carry `pytest.mark.timeout` with it).
CHAOS_RUN_TIMEOUT_S = 600
