"""`alkstore subscriptions add NAME PATTERN... --sink URL [destination flags]`: a broker
sink subscription from the command line (docs/adr/0026, addendum "the command line
creates and removes sinks").

It is `add` with a URL: the same NAME, PATTERN... and --start as a queue subscription,
so one command creates either, as `store.subscribe` / `store.subscribe_sink` do. The
destination flags are the sinks' options (`--subject`, `--stream`, `--exchange`,
`--routing-key`, `--maxlen`), any other one `--option NAME=VALUE`. The options are
checked here by the sink the relay will build (its client imported, not connected), so
a flag the broker's sink does not take is refused now rather than parking the
subscription once the relay reads it; without the client installed here, the relay
checks them.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import msgspec

import alkstore
from relay.cli._commands import UsageError

_json = msgspec.json.Encoder()
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
FLAGS = {  # flag -> (option, metavar, help)
    "--subject": ("subject", "TEMPLATE", 'NATS: the subject (default "{name}.{type}")'),
    "--stream": (
        "stream",
        "NAME",
        'Redis: the stream (a template, default "{name}"); NATS: the stream that must '
        "store them (refused if another one captures the subject)",
    ),
    "--exchange": ("exchange", "NAME", 'RabbitMQ: the exchange (default "": the default one)'),
    "--routing-key": ("routing_key", "TEMPLATE", 'RabbitMQ: the routing key (default "{name}")'),
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The sink flags of `subscriptions add`."""
    parser.add_argument(
        "--sink",
        metavar="URL",
        help="add: feed this broker instead of a queue (nats://, redis://, amqp://)",
    )
    for flag, (option, metavar, text) in FLAGS.items():
        parser.add_argument(flag, dest=f"sink_{option}", metavar=metavar, help=f"--sink: {text}")
    parser.add_argument(
        "--maxlen", dest="sink_maxlen", type=int, metavar="N", help="--sink: Redis: MAXLEN ~ N"
    )
    parser.add_argument(
        "--option",
        dest="sink_options",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="--sink: any other option, e.g. persistent=false (RabbitMQ); VALUE: true, false "
        "or a number as such, else a string",
    )


def options(args: argparse.Namespace) -> dict[str, Any]:
    """The sink options the flags give (UsageError: a sink flag without --sink)."""
    found: dict[str, Any] = {}
    for option, _, _ in FLAGS.values():
        if getattr(args, f"sink_{option}") is not None:
            found[option] = getattr(args, f"sink_{option}")
    if args.sink_maxlen is not None:
        found["maxlen"] = args.sink_maxlen
    for text in args.sink_options:
        name, eq, value = text.partition("=")
        if not eq or not _NAME.fullmatch(name):
            raise UsageError(f"--option takes NAME=VALUE (a lower-case NAME), got {text!r}")
        if name in found:
            raise UsageError(f"sink option {name} is given twice")
        found[name] = _scalar(value)
    if found and args.sink is None:
        given = ", ".join(sorted(found))
        raise UsageError(f"sink options ({given}) go with subscriptions add --sink URL")
    return found


def _scalar(text: str) -> Any:
    """true, false, an integer or a number as such; anything else the string itself."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def check(url: str, patterns: list[str], found: dict[str, Any], name: str, ns: str) -> None:
    """Refuse options the relay's sink for `url` would park on (InvalidArgument); say on
    stderr when its client is not installed here to check them."""
    from relay import sinks  # the sinks' loader only: a client is imported for its URL

    if not sinks.knows(url):
        return  # not a broker URL: the store refuses it, saying which ones are
    probe = alkstore.SinkSubscription(name, url, patterns, found, 0)
    try:
        sinks.open_sink(probe, ns)
    except sinks.ClientMissing as exc:
        print(f"alkstore: note: options not checked here: {exc.reason}", file=sys.stderr)
    except sinks.SinkError as exc:
        raise alkstore.InvalidArgument(f"sink {name!r}: {exc.reason}") from None


def add(store: alkstore.Store, args: argparse.Namespace, start: Any) -> None:
    """`subscriptions add NAME PATTERN... --sink URL ...`."""
    name, url = args.queue, args.sink
    found = options(args)
    check(url, list(args.events), found, name, store.namespace)
    existed = any(s.name == name for s in store.sink_subscriptions())
    sub = store.subscribe_sink(name, url, args.events, start=start, **found)
    if args.json:
        sys.stdout.write(_json.encode(sub).decode() + "\n")
    elif existed:
        print(
            f"updated sink {name}: {','.join(sub.events)} -> {sub.sink} {describe(sub)}"
            f"(checkpoint kept at {sub.checkpoint})"
        )
    else:
        print(
            f"subscribed sink {name} to {','.join(sub.events)} after position "
            f"{sub.checkpoint} -> {sub.sink} {describe(sub)}".rstrip()
        )


def describe(sub: alkstore.SinkSubscription) -> str:
    """The options as `name=value` words (with a trailing space), or nothing."""
    return "".join(f"{k}={_text(v)} " for k, v in sorted(sub.options.items()))


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
