"""Property-based run over the OpenAPI schema: generated requests, valid and invalid, against
the WSGI app find no 500 and no answer that breaks the schema."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error, response_schema_conformance

from tasks_core.states import TaskStatus
from tests.factories import TaskFactory
from tests.integration.tasks_api.test_api_support import member

#: Examples per operation and mode; keeps the whole run under a minute on a busy machine.
EXAMPLES = 10


@pytest.fixture
def wsgi_app(db: None) -> Iterator[WSGIHandler]:
    """The real WSGI app, kept from closing the test's connection after each request
    (as Django's test client does)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def api_schema(wsgi_app: WSGIHandler) -> schemathesis.BaseSchema:
    # Some data to find: a lambda of the caller's team with a task and a dead letter.
    alice = member("alpha", lambda_name="alpha.work")
    TaskFactory(lambda_ref=alice.lam)
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD)
    token = alice.token
    loaded = schemathesis.openapi.from_wsgi(
        "/api/schema/?format=json", wsgi_app,
        headers={"Authorization": f"Token {token}"})
    loaded.auth_header = f"Token {token}"  # type: ignore[attr-defined]
    return loaded


@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=str)
@override_settings(ATF_API_THROTTLE_RATE="")
def test_no_500_and_no_answer_off_the_schema(api_schema: schemathesis.BaseSchema,
                                              mode: schemathesis.GenerationMode) -> None:
    headers = {"Authorization": api_schema.auth_header}  # type: ignore[attr-defined]
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 16
    # The schema itself is slow to build and takes no input worth generating.
    operations = [op for op in operations if op.path != "/api/schema/"]

    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case: schemathesis.Case) -> None:
            # Given a generated request, valid or not, with a working token
            # When it is sent to the app
            response = case.call(headers=headers)
            # Then the app does not fail, and its answer matches the schema
            case.validate_response(response,
                                   checks=[not_a_server_error, response_schema_conformance])

        try:
            check()
        except Unsatisfiable:
            # Nothing to make invalid (no parameters, no body): the positive run covers it.
            assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
