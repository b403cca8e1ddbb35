"""The writer process of tests/faults/test_group_commit_kill.py.

`python -m tests.faults.group_writer DB_PATH LOG ROUND`: 8 threads run store transactions
that insert one row each into `rows` (some sleep inside the block, so the others queue
for the turn and groups form; one in five raises after its insert). After a `with` block
returns, the thread appends "ok <name>" to LOG; after one raised, "failed <name>" (one
`os.write` of a short line to an O_APPEND file: whole lines, whenever the process dies).
Runs until killed.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import alkstore

THREADS = 8


def main(path: str, log: str, round_: str) -> None:
    store = alkstore.connect(f"sqlite:///{path}")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(tag: str, name: str) -> None:
        os.write(fd, f"{tag} {name}\n".encode())

    def work(t: int) -> None:
        rng = random.Random(f"{round_}-{t}")
        i = 0
        while True:
            name = f"{round_}-{t}-{i}"
            i += 1
            fail = rng.random() < 0.2
            try:
                with store.transaction() as tx:
                    tx.connection.execute("INSERT INTO rows (name) VALUES (?)", (name,))
                    tx.enqueue("q", {"name": name})
                    if rng.random() < 0.3:
                        time.sleep(rng.uniform(0, 0.003))
                    if fail:
                        raise RuntimeError("rolled back")
            except RuntimeError:
                write("failed", name)
                continue
            write("ok", name)

    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
