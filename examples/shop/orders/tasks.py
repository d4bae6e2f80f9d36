"""The shop's Django tasks: `@task` functions that ATF runs (TASKS in settings.py).

On Django 6 `task` is Django's own (`from django.tasks import task`); on Django 5.2 it is the
django-tasks backport's (`from django_tasks import task`). The shop runs on both, so it takes
whichever this Django has from tasks_core.contrib.tasks_compat; a project on one version
imports it from there directly.
"""

from __future__ import annotations

from typing import Any

from orders.models import Order
from tasks_core.contrib.tasks_compat import task


@task(lambda_name="orders.thank_customer", team="shop", max_attempts=3)
def thank_customer(order_id: int) -> dict[str, Any]:
    """Thank the customer for an order. It runs as the ATF lambda `orders.thank_customer`: a
    queue, gate, quota and console row of its own."""
    order = Order.objects.get(pk=order_id)
    return {"order_id": order.pk, "thanked": order.email}
