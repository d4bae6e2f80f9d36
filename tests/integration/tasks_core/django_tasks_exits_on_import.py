"""A module that ends whatever process imports it.

A django-tasks payload naming it must be refused without importing anything
(tests/integration/tasks_core/test_django_tasks.py).
"""

import sys

sys.exit("tests.integration.tasks_core.django_tasks_exits_on_import was imported")
