"""`python -m relay.cli`: the `alkstore` command."""

from relay.cli import main

raise SystemExit(main())
