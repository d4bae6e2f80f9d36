"""The shop's lambdas: ATF finds this module in every installed app, like admin.py."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from orders.models import Order
from tasks_core import atf

logger = logging.getLogger(__name__)


@atf.register("orders.send_receipt", team="shop", max_attempts=5)
def send_receipt(ctx: atf.TaskContext, payload: Any) -> dict[str, Any]:
    """Send the receipt of an order (here: record when it was sent)."""
    order = Order.objects.get(pk=payload["order_id"])
    logger.info("receipt of %s sent (attempt %d)", order, ctx.attempt)
    Order.objects.filter(pk=order.pk).update(receipt_sent_at=timezone.now())
    return {"order_id": order.pk, "sent_to": order.email}
