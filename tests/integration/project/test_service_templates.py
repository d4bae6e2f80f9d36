"""The standalone service's own templates (top-level templates/): the console's branding and
the error pages outside the API. A host project does not get them (they are not in the wheel:
tests/acceptance/test_distribution.py)."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory

from tasks_api.exceptions import server_error

pytestmark = pytest.mark.django_db


def test_the_admin_is_branded_the_atf_console() -> None:
    page = Client().get("/admin/login/").content.decode()
    assert "<title>Log in | ATF console</title>" in page
    assert '<a href="/admin/">ATF console</a>' in page


def test_an_unknown_page_outside_the_api_has_the_services_error_page() -> None:
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    assert "<h1>404 Not found</h1>" in response.content.decode()


def test_a_server_error_outside_the_api_has_the_services_page() -> None:
    response = server_error(RequestFactory().get("/admin/broken/"))
    assert response.status_code == 500
    assert "<h1>500 Server error</h1>" in response.content.decode()
