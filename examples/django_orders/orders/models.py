"""The application's own table."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    receipt_sent = models.BooleanField(default=False)
    reference = models.CharField(max_length=40, unique=True, null=True)
