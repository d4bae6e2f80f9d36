"""An order of the example shop."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    email = models.EmailField()
    item = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    #: Set by the lambda `orders.send_receipt`.
    receipt_sent_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"order {self.pk}: {self.quantity} x {self.item} for {self.email}"
