"""`manage.py alkstore COMMAND ...`: the `alkstore` command line (relay, worker, status,
migrate, ...) on the database Django is configured with (docs/adr/0024)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS

from relay import cli
from relay.django import _settings


class Command(BaseCommand):
    help = (
        "Run the alkstore command line on Django's database: `manage.py alkstore relay`, "
        "`manage.py alkstore worker myapp.jobs:worker`, `manage.py alkstore status`, "
        "`manage.py alkstore migrate` (see `alkstore --help`). Django's own options go "
        "before the alkstore command; a --db after it wins over Django's settings."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--database",
            default=DEFAULT_DB_ALIAS,
            help="the settings.DATABASES alias to use (default: %(default)s)",
        )
        parser.add_argument(
            "command",
            nargs=argparse.REMAINDER,
            metavar="COMMAND ...",
            help="the alkstore command and its options",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        argv = list(options["command"])
        if not argv:
            raise CommandError(
                "name an alkstore command: relay, worker MODULE:OBJECT, status, migrate, ..."
            )
        env = _settings.environment(options["database"])
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)  # the command line reads them; its flags still win
        try:
            code = cli.main(argv)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if code:
            raise SystemExit(code)
