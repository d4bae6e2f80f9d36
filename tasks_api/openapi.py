"""`extend_schema` for ATF's views, on drf-spectacular's AutoSchema in any project.

drf-spectacular's decorator builds a decorated method's schema on the project's
REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]; in a project that keeps DRF's own class there, ATF's
schema could not be generated. Here a method without a schema of its own starts from
drf-spectacular's, as the views themselves do (`tasks_api.policy.ApiPolicy.schema`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular import utils
from drf_spectacular.openapi import AutoSchema

F = TypeVar("F", bound=Callable[..., Any])


def extend_schema(**kwargs: Any) -> Callable[[F], F]:
    """drf_spectacular.utils.extend_schema, whose methods' base schema is AutoSchema."""
    decorate = utils.extend_schema(**kwargs)

    def decorator(target: F) -> F:
        if not inspect.isclass(target) and not getattr(target, "kwargs", {}).get("schema"):
            # The decorator's second choice of base, after a `schema` attribute. A function
            # attribute, as DRF's @action sets one: the type of F does not declare it.
            kwargs = {**getattr(target, "kwargs", {}), "schema": AutoSchema}
            target.kwargs = kwargs  # type: ignore[attr-defined]
        return decorate(target)

    return decorator
