"""A worker module for tests/acceptance/test_cli_metrics.py, run as a user runs it:
`python -m relay.cli worker tests.acceptance.metrics_worker:worker --db URL --namespace NS
--metrics-port 0`. Its handler of queue "metered" takes OrderPlaced events and does nothing.

Importing this module connects to the database, so nothing but the CLI imports it.
"""

from __future__ import annotations

import alkstore
import relay
from tests.events import OrderPlaced

worker = relay.Worker(alkstore.connect(), poll=0.2)


@worker.handler("metered")
def handle(job: alkstore.Job[OrderPlaced]) -> None:
    pass
