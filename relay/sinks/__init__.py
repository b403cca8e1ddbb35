"""Broker sinks: the relay publishes sink subscriptions' events to NATS JetStream,
RabbitMQ or Redis Streams (docs/adr/0026). Each broker's client is an optional extra
(`alkstore[nats]`, `alkstore[rabbitmq]`, `alkstore[redis]`), imported only when a
subscription needs it."""

from relay.sinks._base import ENVELOPE, Message, Sink, SinkError, Template, envelope
from relay.sinks._loop import ClientMissing, SinkLoop, knows, open_sink

__all__ = [
    "ENVELOPE",
    "ClientMissing",
    "Message",
    "Sink",
    "SinkError",
    "SinkLoop",
    "Template",
    "envelope",
    "knows",
    "open_sink",
]
