"""The API's DRF policy and what its OpenAPI document says of itself, as plain data.

`tasks_api.policy.ApiPolicy` gives every API view these classes, so the API behaves the same in
any project, whatever that project's REST_FRAMEWORK says. The standalone service also uses them
as its REST_FRAMEWORK and SPECTACULAR_SETTINGS (for `manage.py spectacular`). Dotted paths, so
that a settings module can import this without importing DRF.
"""

from __future__ import annotations

from typing import Any

from tasks_core.states import TaskStatus

REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tasks_api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # FullAccess: worker-scoped tokens may only make the worker calls (tasks_api/scopes.py).
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated",
                                   "tasks_api.scopes.FullAccess"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["tasks_api.parsers.SafeJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["tasks_api.throttling.TokenRateThrottle"],
    "EXCEPTION_HANDLER": "tasks_api.exceptions.exception_handler",
}

SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "ATF for Django",
    "DESCRIPTION": "Schedule and follow asynchronous tasks.",
    "VERSION": "1.0.0",
    "COMPONENT_SPLIT_REQUEST": True,
    # Choice sets that share a field name with another ("state", "status") get names of their own.
    "ENUM_NAME_OVERRIDES": {"GateStateEnum": ["open", "paused", "dropped"],
                            "GroupStatusEnum": ["running", "succeeded", "failed"],
                            "TaskStatusEnum": [status.value for status in TaskStatus]},
}
