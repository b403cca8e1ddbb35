"""Small real programs built on alkstore; see examples/README.md."""
