"""The short path of ATF's backend for Django's tasks framework:

    TASKS = {"default": {"BACKEND": "tasks_core.backend.ATFBackend"}}

is `tasks_core.contrib.django_tasks.ATFBackend`, which docs/lambdas.md describes.
"""

from __future__ import annotations

from tasks_core.contrib.django_tasks import ATFBackend

__all__ = ["ATFBackend"]
