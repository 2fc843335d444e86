"""kill -9 during a write load: every acknowledged row survives, nothing twice."""

from __future__ import annotations

import threading
import time

from replicaset.iproto.errors import ServerError
from tests.server.conftest import BOOTSTRAP_ROWS

WRITERS = 4
LOAD_S = 1.5


def _writer(server, worker: int, acked: list[int], stop: threading.Event) -> None:
    try:
        with server.client(timeout_s=5.0) as client:
            n = 0
            while not stop.is_set() and n < 100_000:
                row_id = worker * 1_000_000 + n
                client.execute("INSERT INTO events(id, worker, payload) VALUES (?, ?, ?)", [row_id, worker, "x" * 64])
                acked.append(row_id)
                n += 1
    except (OSError, ServerError, ConnectionError):
        return  # the server died under us: what was acknowledged is in `acked`


def test_kill_9_under_load_loses_no_acknowledged_row(server):
    with server.client() as client:
        client.execute("CREATE TABLE events(id INTEGER PRIMARY KEY, worker INTEGER, payload TEXT)")
    acked: list[list[int]] = [[] for _ in range(WRITERS)]
    stop = threading.Event()
    threads = [threading.Thread(target=_writer, args=(server, w, acked[w], stop)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    time.sleep(LOAD_S)
    server.kill()
    stop.set()
    for t in threads:
        t.join(10)
    acknowledged = {row_id for worker in acked for row_id in worker}
    assert len(acknowledged) > 100, "the load did not get going"

    server.start()
    with server.client() as client:
        present = [r[0] for r in client.execute("SELECT id FROM events").rows]
        vclock = client.eval("box.info.vclock")[0]
    assert acknowledged <= set(present), f"lost {len(acknowledged - set(present))} acknowledged rows"
    assert len(present) == len(set(present))
    # The bootstrap rows, one LSN for the CREATE TABLE, one for each single-row INSERT
    # present: no more, no less.
    assert vclock[1] == BOOTSTRAP_ROWS + 1 + len(present)
