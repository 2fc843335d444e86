"""A Jepsen-style fault harness over real members (issue 14, `tools/chaos.py`).

- `proxy`: one fault-injecting proxy per ordered pair of members, TCP and UDP on one port.
"""
