"""Sans-IO protocol cores: plain classes that take events and return actions.

Nothing under this package may import trio, socket, os, time or the global random
module; time and randomness come in as arguments (tests/test_core_purity.py checks).
"""
