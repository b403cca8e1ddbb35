"""Redis Streams (`redis` >= 5, `pip install 'alkstore[redis]'`; docs/adr/0026).

Each event becomes one stream entry whose id is `<position>-0`. Redis keeps a stream's
ids increasing, so the stream is in log order by construction and an entry written
before (a batch republished after a relay crash) cannot be written again: the broker
itself suppresses the duplicate, however long ago it was written. A batch is one
EVALSHA (one round trip): the script adds the entries in order and stops at the first
refusal, so nothing after a refused entry is written. An entry refused as "equal or
smaller than the top item" is ours already if the stream holds that id with our
`alk-id`; if it holds another (or none, trimmed), someone else writes that stream:
permanent, the subscription parks.

Fields of an entry: the envelope (`alk-id` first, then alk-namespace, alk-type,
alk-key, alk-position, alk-appended-at), `alk-headers` (the event's own headers as
a JSON object: trace context), and `payload` (the msgspec-encoded event).
Options: `stream` (a template, default `{name}`), `maxlen` (approximate trimming,
default none).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import msgspec
import redis.asyncio as aioredis
import redis.exceptions as rerr

from relay.sinks import _base

# KEYS: one stream per entry. ARGV: maxlen (0: none), then per entry: its id, the number
# of field/value items, then those items (alk-id first). Returns {written, duplicates,
# error or ""}; it stops at the first refusal.
_SCRIPT = """
local maxlen = tonumber(ARGV[1])
local a, written, dups = 2, 0, 0
for i = 1, #KEYS do
  local id, n = ARGV[a], tonumber(ARGV[a + 1])
  local args = {'XADD', KEYS[i]}
  if maxlen > 0 then table.insert(args, 'MAXLEN'); table.insert(args, '~');
    table.insert(args, maxlen) end
  table.insert(args, id)
  for j = a + 2, a + 1 + n do table.insert(args, ARGV[j]) end
  local r = redis.pcall(unpack(args))
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'equal or smaller', 1, true) then
      local got = redis.call('XRANGE', KEYS[i], id, id)
      if #got == 1 and got[1][2][2] == ARGV[a + 3] then
        dups = dups + 1
      else
        return {written, dups, 'stream ' .. KEYS[i] .. ' already holds entries past ' ..
          id .. ' that this subscription did not write'}
      end
    else
      return {written, dups, r.err}
    end
  else
    written = written + 1
  end
  a = a + 2 + n
end
return {written, dups, ''}
"""
# Refusals worth retrying: memory full (a consumer may trim), a replica, a busy script.
_TRANSIENT = ("OOM", "BUSY", "LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")
_json = msgspec.json.Encoder()


class RedisSink(_base.Sink):
    schemes = ("redis", "rediss")

    def __init__(self, url: str, options: dict[str, Any], namespace: str, name: str) -> None:
        super().__init__(url, options, namespace, name)
        self.stream = _base.Template(self.option("stream", "{name}", str), namespace, name)
        self.maxlen = int(self.option("maxlen", 0, int) or 0)
        self.no_more_options()
        self._client: aioredis.Redis | None = None
        self._script: Any = None

    async def connect(self) -> None:
        try:
            client = aioredis.Redis.from_url(self.url, socket_connect_timeout=2.0)
            await client.ping()
        except (rerr.ConnectionError, rerr.TimeoutError, OSError) as exc:
            raise _base.unavailable(exc) from exc
        self._client = client
        self._script = client.register_script(_SCRIPT)

    async def publish(self, messages: Sequence[_base.Message], timeout: float) -> int:
        assert self._client is not None, "connect() first"
        keys: list[str] = []
        args: list[Any] = [self.maxlen]
        for m in messages:
            own = {k: v for k, v in m.headers.items() if k not in _base.ENVELOPE}
            items: list[Any] = [
                x for name in _base.ENVELOPE if name in m.headers for x in (name, m.headers[name])
            ]
            items += ["alk-headers", _json.encode(own), "payload", m.body]
            keys.append(self.stream(m))
            args += [f"{m.position}-0", len(items), *items]
        try:
            reply = self._script(keys=keys, args=args)
            written, dups, error = await asyncio.wait_for(reply, timeout)
        except rerr.ResponseError as exc:  # the script itself failed
            raise _classify(str(exc), 0) from exc
        except (rerr.ConnectionError, rerr.TimeoutError, OSError, TimeoutError) as exc:
            raise _base.unavailable(exc) from exc
        if error:
            raise _classify(
                error.decode() if isinstance(error, bytes) else str(error), written + dups
            )
        return int(dups)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except Exception:  # never raises: the connection is dropped either way
                pass


def _classify(error: str, confirmed: int) -> _base.SinkError:
    if error.startswith(_TRANSIENT):
        return _base.SinkError(error, confirmed=confirmed, permanent=False)
    return _base.rejected(f"redis refused entry {confirmed + 1} of the batch: {error}", confirmed)
