"""Keeping the store's Lambda rows in step with the lambdas registered in code."""

from __future__ import annotations

import logging

from tasks_core import directory, lambda_options, registry, shards
from tasks_core.models import Lambda, Team

logger = logging.getLogger(__name__)


def sync_to_store() -> None:
    """Create or update a Lambda row per registered lambda; mark rows the code lost `in_code=False`.

    The row's option columns hold the code's values and nothing else: operators' overrides
    live in LambdaOverride rows and gates in their own columns, which this never writes. An
    option the code left to its default is listed in `defaulted`, and every process reads it
    from its own settings (so the process that synced last does not decide it for the rest).
    """
    lambdas = [registry.get(name) for name in registry.names()]
    teams = {name: Team.objects.get_or_create(name=name)[0] for name in
             {lam.options.team for lam in lambdas}}
    for lam in lambdas:
        Lambda.objects.update_or_create(
            name=lam.name,
            defaults={
                "team": teams[lam.options.team],
                # Each option's code value, in the column lambda_options declares for it.
                **{option.column: getattr(lam.options, option.column)
                   for option in lambda_options.OPTIONS},
                "defaulted": sorted(lam.options.defaulted),
                "in_code": True,
            },
        )
    Lambda.objects.exclude(name__in=[lam.name for lam in lambdas]).update(in_code=False)
    shards.mirror()  # the shards' copies of the teams and lambdas their tasks name
    directory.clear()
    logger.debug("synced %d lambdas to the store", len(lambdas))


def sync_if_registered(name: str) -> bool:
    """Sync when `name` is registered in code but has no row yet; whether it is registered.

    The directory calls this for a name the store does not know (tasks_core.apps wires it), so
    a lambda added to the code can be scheduled before any worker or consumer synced it.
    """
    if name not in registry.names():
        return False
    sync_to_store()
    return True
