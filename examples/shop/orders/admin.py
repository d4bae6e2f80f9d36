from __future__ import annotations

from django.contrib import admin

from orders.models import Order

admin.site.register(Order)
