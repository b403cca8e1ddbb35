"""The HTTP API (Starlette): `POST /orders {"email": ..., "total_cents": ...}`.

Run it on its own with uvicorn (`$ALKSTORE_DB` says where the store is):

    uvicorn --factory examples.orders.app:create_app --port 8000
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import alkstore
from examples.orders import shop, tracing


def create_app(store: alkstore.Store | None = None) -> Starlette:
    """The app on `store`, or on a store of its own from `alkstore.connect()`."""
    own = store is None
    db = alkstore.connect() if store is None else store

    def place(email: str, total: int) -> int:
        return shop.place_order(db, email, total)

    async def place_order(request: Request) -> JSONResponse:
        body = await request.json()
        email, total = body.get("email"), body.get("total_cents")
        if not isinstance(email, str) or not isinstance(total, int) or total <= 0:
            return JSONResponse({"error": "need an email and total_cents > 0"}, status_code=422)
        try:  # the store blocks: run it off the event loop
            order_id = await run_in_threadpool(tracing.traced, "POST /orders", place, email, total)
        except shop.Declined as exc:
            return JSONResponse({"error": str(exc)}, status_code=402)
        return JSONResponse({"order_id": order_id}, status_code=201)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if own:
            db.close()

    return Starlette(routes=[Route("/orders", place_order, methods=["POST"])], lifespan=lifespan)
