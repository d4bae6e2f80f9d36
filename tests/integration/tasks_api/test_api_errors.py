"""Bad requests get JSON errors: never an HTML page, never a 500."""

from __future__ import annotations

import json

import pytest
from django.test import RequestFactory, override_settings

from tasks_api.exceptions import server_error
from tasks_core.models import TaskEntity
from tests.integration.tasks_api.test_api_support import Member, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def _is_json_error(response: object, status: int) -> bool:
    assert response.status_code == status, response.content  # type: ignore[attr-defined]
    assert response["Content-Type"] == "application/json"  # type: ignore[index]
    assert "detail" in response.json()  # type: ignore[attr-defined]
    return True


@pytest.mark.parametrize("body", [
    b'{"lambda": ',
    b'{"lambda": "alpha.work", "payload": NaN}',
    b"\xff\xfe not utf-8",
    b"[" * 100_000,
])
def test_malformed_json_answers_400(alice: Member, body: bytes) -> None:
    response = alice.client.post("/api/v1/tasks/", body, content_type="application/json")
    assert _is_json_error(response, 400)


@pytest.mark.parametrize("depth", [500, 900, 990])
def test_deeply_nested_payloads_are_stored_or_refused_never_a_500(alice: Member,
                                                                   depth: int) -> None:
    body = '{"lambda": "alpha.work", "payload": ' + "[" * depth + "]" * depth + "}"
    response = alice.client.post("/api/v1/tasks/", body, content_type="application/json")
    assert response.status_code in {201, 400}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_wrong_content_type_answers_415(alice: Member, content_type: str) -> None:
    response = alice.client.post("/api/v1/tasks/", '{"lambda": "alpha.work"}',
                                 content_type=content_type)
    assert _is_json_error(response, 415)


@pytest.mark.parametrize(("method", "path"), [
    ("delete", "/api/v1/tasks/1/"),
    ("put", "/api/v1/tasks/1/"),
    ("get", "/api/v1/tasks/1/cancel/"),
    ("get", "/api/v1/tasks/batch/"),
    ("delete", "/api/v1/lambdas/alpha.work/"),
    ("get", "/api/v1/dead-letters/requeue/"),
    ("post", "/api/v1/stats/"),
    ("post", "/healthz"),
])
def test_wrong_method_answers_405(alice: Member, method: str, path: str) -> None:
    response = getattr(alice.client, method)(path)
    assert _is_json_error(response, 405)


@pytest.mark.parametrize("path", ["/api/v1/nothing/", "/api/v1/tasks/abc/", "/api/elsewhere",
                                  "/api/v1/lambdas/x/collections/"])
def test_unknown_api_paths_answer_json_404(alice: Member, path: str) -> None:
    assert _is_json_error(alice.client.get(path), 404)


def test_an_unknown_page_outside_the_api_stays_html() -> None:
    from django.test import Client

    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_a_client_that_accepts_only_html_gets_json_406(alice: Member) -> None:
    response = alice.client.get("/api/v1/lambdas/", HTTP_ACCEPT="text/html")
    assert _is_json_error(response, 406)


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_body_over_the_limit_answers_413(alice: Member) -> None:
    response = alice.client.post("/api/v1/tasks/", {"lambda": "alpha.work", "payload": "x" * 2000},
                                 format="json")
    assert _is_json_error(response, 413)
    assert not TaskEntity.objects.exists()


@override_settings(ATF_MAX_PAYLOAD_BYTES=100)
def test_the_payload_limit_is_a_setting(alice: Member) -> None:
    small = alice.client.post("/api/v1/tasks/", {"lambda": "alpha.work", "payload": "x" * 50},
                              format="json")
    large = alice.client.post("/api/v1/tasks/", {"lambda": "alpha.work", "payload": "x" * 150},
                              format="json")
    assert (small.status_code, large.status_code) == (201, 400)
    assert "limit is 100" in large.json()["payload"][0]


@pytest.mark.parametrize("body", [["a", "list"], "a string", 42, None])
def test_a_body_that_is_not_an_object_answers_400(alice: Member, body: object) -> None:
    response = alice.client.post("/api/v1/tasks/", body, format="json")
    assert response.status_code == 400


@pytest.mark.parametrize("payload", [{"k\u0000": 1}, "\ud800", ["\u0000"]])
def test_text_the_database_cannot_store_answers_400(alice: Member, payload: object) -> None:
    body = json.dumps({"lambda": "alpha.work", "payload": payload})
    response = alice.client.post("/api/v1/tasks/", body, content_type="application/json")
    assert response.status_code == 400
    assert "payload" in response.json()


@pytest.mark.parametrize("path", ["/api/v1/lambdas/a%00b/", "/api/v1/lambdas/a%ED%A0%80b/"])
def test_unstorable_names_in_paths_answer_404(alice: Member, path: str) -> None:
    assert alice.client.get(path).status_code == 404


@pytest.mark.parametrize("path", [
    "/api/v1/tasks/", "/api/v1/tasks/batch/", "/api/v1/tasks/1/", "/api/v1/tasks/1/cancel/",
    "/api/v1/lambdas/", "/api/v1/lambdas/alpha.work/", "/api/v1/lambdas/alpha.work/gate/",
    "/api/v1/lambdas/alpha.work/collections/c/gate/", "/api/v1/dead-letters/",
    "/api/v1/dead-letters/requeue/", "/api/v1/stats/", "/healthz", "/readyz", "/metrics",
])
def test_options_and_head_answer_without_failing(alice: Member, path: str) -> None:
    options = alice.client.options(path)
    head = alice.client.head(path)
    assert options.status_code == 200
    assert options["Content-Type"] == "application/json"
    assert head.status_code in {200, 404, 405}


@pytest.mark.parametrize(("path", "json_expected"), [("/api/v1/tasks/", True), ("/metrics", True),
                                                     ("/admin/", False)])
def test_the_server_error_page_is_json_for_the_api_only(path: str, json_expected: bool) -> None:
    # When Django answers an unexpected failure of a request to `path`
    response = server_error(RequestFactory().get(path))
    # Then the API gets a JSON 500, and other pages keep Django's own
    assert response.status_code == 500
    assert (response["Content-Type"] == "application/json") is json_expected
