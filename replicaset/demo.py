"""`replicaset demo`: start a local three-member replica set, run a mixed workload on all
three, show each box.info and whether vclocks and table digests agree.

It uses only what a user would: the CLI to start the server, the iproto client to write
and read, and the console to show `box.info`; everything it starts, it stops.
"""

from __future__ import annotations

import random
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import xxhash

from replicaset.console import to_yaml
from replicaset.iproto.client import Client
from replicaset.testing.processes import start_instance, stop_instance

CONVERGE_TIMEOUT_S = 30.0


def run_workload(client: Client, rows: int, *, seed: int, tag: str) -> dict[str, int]:
    """Inserts (ids left to the database), updates and deletes on the demo's table."""
    rng = random.Random(seed)
    counts = {"insert": 0, "update": 0, "delete": 0}
    ids: list[int] = []
    for i in range(rows):
        roll = rng.random()
        if roll < 0.6 or not ids:
            ids.extend(client.execute("INSERT INTO accounts(owner, balance) VALUES (?, ?)", [f"{tag}-{i}", rng.randint(0, 1000)]).autoincrement_ids)
            counts["insert"] += 1
        elif roll < 0.9:
            client.execute("UPDATE accounts SET balance = balance + ? WHERE id = ?", [rng.randint(-50, 50), rng.choice(ids)])
            counts["update"] += 1
        else:
            client.execute("DELETE FROM accounts WHERE id = ?", [ids.pop(rng.randrange(len(ids)))])
            counts["delete"] += 1
    return counts


def table_digest(client: Client) -> str:
    """A digest of every user table's rows, to compare members from the outside."""
    digest = xxhash.xxh3_64()
    tables = client.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_rs\\_%' ESCAPE '\\' ORDER BY name").rows
    for (table,) in tables:
        for row in client.execute(f'SELECT * FROM "{table}" ORDER BY 1').rows:
            digest.update(repr(row).encode())
    return digest.hexdigest()


def wait_converged(ports: list[int], timeout_s: float = CONVERGE_TIMEOUT_S) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        infos = []
        for port in ports:
            with Client.connect("127.0.0.1", port) as client:
                infos.append(client.eval("box.info")[0])
        if all(i["vclock"] == infos[0]["vclock"] for i in infos) or time.monotonic() > deadline:
            return infos
        time.sleep(0.05)


def run_demo(data_dir: Path | None, rows: int) -> int:
    with tempfile.TemporaryDirectory(prefix="replicaset-demo-") as tmp:
        root = Path(data_dir) if data_dir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        config = root / "demo.toml"
        config.write_text("replication_timeout = 0.2\nreplication_connect_timeout = 5\n")
        rs_uuid = str(uuid.uuid4())
        procs: list[subprocess.Popen[bytes]] = []
        try:
            print(f"starting a three-member replica set {rs_uuid} in {root}")
            proc, first = start_instance(["bootstrap", "--data-dir", str(root / "m1"), "--uuid", rs_uuid, "--config", str(config)], root / "m1.log")
            procs.append(proc)
            with Client.connect("127.0.0.1", first) as client:
                client.execute("CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT UNIQUE, balance INTEGER NOT NULL)")
            ports = [first]
            for n in (2, 3):
                proc, port = start_instance(
                    ["join", "--uuid", rs_uuid, "--peer", f"127.0.0.1:{ports[-1]}", "--data-dir", str(root / f"m{n}"), "--config", str(config)],
                    root / f"m{n}.log",
                )
                procs.append(proc)
                ports.append(port)
            wait_converged(ports)
            started = time.monotonic()
            results: dict[int, dict[str, int]] = {}

            def work(n: int, port: int) -> None:
                with Client.connect("127.0.0.1", port) as client:
                    results[n] = run_workload(client, rows, seed=n, tag=f"m{n}")

            threads = [threading.Thread(target=work, args=(n, port)) for n, port in enumerate(ports, start=1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
            infos = wait_converged(ports)
            for n in sorted(results):
                print(f"member {n}: {results[n]}")
            level = infos[0].get("synchro", {}).get("default_consistency", "?")
            print(f"workload: {3 * rows} statements on three members in {elapsed:.2f} s ({3 * rows / elapsed:,.0f}/s), "
                  f"each write at consistency {level}, the default (a majority holds it before the client hears; "
                  '[replication] default_write_consistency = "one" writes asynchronously, as Tarantool)')
            for port, info in zip(ports, infos):
                print(f"box.info of member {info['id']} (127.0.0.1:{port}):")
                print(to_yaml(info), end="")
            digests = []
            for port in ports:
                with Client.connect("127.0.0.1", port) as client:
                    digests.append(table_digest(client))
            vclocks_agree = all(i["vclock"] == infos[0]["vclock"] for i in infos)
            digests_agree = len(set(digests)) == 1
            print(f"vclocks agree: {vclocks_agree}  {infos[0]['vclock']}")
            print(f"table digests agree: {digests_agree}  {digests}")
            ok = vclocks_agree and digests_agree
        finally:
            codes = [stop_instance(p) for p in procs]
        print(f"stopped {len(procs)} instances (exit codes {codes}); logs in {root}" + ("" if data_dir else " (removed)"))
        return 0 if ok and not any(codes) else 1
