"""A worker module for tests/acceptance/test_cli_edges.py, run as a user runs it:
`python -m relay.cli worker tests.acceptance.edge_worker:worker [--db URL] [--namespace NS]`.

It connects with a plain `alkstore.connect()`: the database and namespace are whatever
`$ALKSTORE_DB` / `$ALKSTORE_NAMESPACE` say once the CLI has applied its flags — unless
`$EDGE_NAMESPACE` names one in code, as an application may. The handler of queue
"edge" appends each job's payload to the file `$EDGE_DONE`.

Importing this module connects to the database, so nothing but the CLI imports it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import alkstore
import relay

worker = relay.Worker(alkstore.connect(namespace=os.environ.get("EDGE_NAMESPACE")), poll=0.2)


@worker.handler("edge")
def handle(job: alkstore.Job[Any]) -> None:
    with open(os.environ["EDGE_DONE"], "a") as f:
        f.write(json.dumps(job.payload) + "\n")
