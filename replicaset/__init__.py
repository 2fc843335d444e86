"""replicaset: a Tarantool-style replica-set server keeping a full SQLite copy on every member."""

__version__ = "0.1.0"
