"""Placing an order: the Order row and its receipt task commit or roll back together."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from orders.models import Order
from orders.tasks import thank_customer
from tasks_core import atf

#: Most items of one kind an order may take (the shop's whole stock).
STOCK = 10


class OutOfStock(Exception):
    """The order asks for more than the shop has."""


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """POST {"email", "item", "quantity"}: 201 with the order, its receipt task and the result
    id of its thank-you (a Django task), or 409."""
    try:
        body = json.loads(request.body)
        email, item, quantity = body["email"], body["item"], int(body["quantity"])
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"detail": "Send JSON with email, item and quantity."}, status=400)
    try:
        with transaction.atomic():
            order = Order.objects.create(email=email, item=item, quantity=quantity)
            task = atf.schedule("orders.send_receipt", {"order_id": order.pk})
            thanks = thank_customer.enqueue(order.pk)
            if quantity > STOCK:
                # Rolls back the order and both its tasks alike: no receipt for it, ever.
                raise OutOfStock
    except OutOfStock:
        return JsonResponse({"detail": f"Only {STOCK} in stock."}, status=409)
    return JsonResponse({"order": order.pk, "task": task.id, "thanks": thanks.id}, status=201)
