"""The Django app that carries `manage.py alkstore`."""

from __future__ import annotations

from django.apps import AppConfig


class AlkstoreConfig(AppConfig):
    name = "relay.django"
    label = "alkstore"
    verbose_name = "alkstore"
