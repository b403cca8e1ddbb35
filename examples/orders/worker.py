"""The worker for the command line: `alkstore worker examples.orders.worker:worker`.

`alkstore worker --db URL` sets $ALKSTORE_DB before it imports this module, so the
`alkstore.connect()` below opens that database.
"""

from __future__ import annotations

import alkstore
from examples.orders import jobs

worker = jobs.build_worker(alkstore.connect())
