"""factory-boy factories. Tasks go through the store, so each gets its assoc row."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from tasks_core import store
from tasks_core.models import Lambda, TaskEntity, Team
from tasks_core.states import FINAL, TaskStatus


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"team{n}")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw")


class LambdaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Lambda
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"tests.lambda{n}")
    team = factory.SubFactory(TeamFactory)
    max_attempts = 3
    heartbeat_timeout_s = 30.0


class TaskFactory(factory.Factory):
    """Builds a task through store.create; pass `status=`/`lease=` to place it mid-lifecycle."""

    class Meta:
        model = TaskEntity

    lambda_ref = factory.SubFactory(LambdaFactory)
    collection = "default"
    priority = "default"
    payload = factory.LazyFunction(dict)
    max_attempts = 3

    @classmethod
    def _create(cls, model_class: type, *args: Any, **kwargs: Any) -> TaskEntity:
        status = kwargs.pop("status", None)
        extra = {key: kwargs.pop(key) for key in list(kwargs) if key not in
                 {"lambda_ref", "collection", "priority", "payload", "max_attempts", "run_at",
                  "idempotency_key"}}
        now = timezone.now()
        if status is not None and TaskStatus(status) in FINAL:
            extra.setdefault("finished_at", now)  # as the store sets it on every final status
        entity = store.create([store.NewTask(
            lambda_id=kwargs["lambda_ref"].pk, collection=kwargs["collection"],
            priority=kwargs["priority"], payload=kwargs["payload"],
            run_at=kwargs.get("run_at") or now, max_attempts=kwargs["max_attempts"],
            idempotency_key=kwargs.get("idempotency_key"),
        )], now=now)[0]
        if status is not None or extra:
            changes = {"status": status or entity.status, **extra}
            TaskEntity.objects.filter(pk=entity.pk).update(**changes)
            if status is not None:
                from tasks_core import states

                if states.TaskStatus(status) in states.ASSOC_DELETED:  # as its finish does
                    entity.assoc.delete()
                else:
                    entity.assoc.status = states.LIFECYCLE[states.TaskStatus(status)].assoc
                    entity.assoc.save(update_fields=["status"])
            entity.refresh_from_db()
        return entity
