"""Scraping a /metrics endpoint the way Prometheus does, for the metrics tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, timeout: float = 5.0) -> Samples:
    """Every sample at `url`: (name, labels) -> value."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample `name` with exactly these labels (None if absent)."""
    return samples.get((name, frozenset(labels.items())))


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}
