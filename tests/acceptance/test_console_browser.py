"""The console in a real browser: headless Chromium (Debian's) driven by Playwright.

A live server, the store consumer and a worker run for real. The test logs in, pauses a lambda
and sees its task stay `new`, resumes it and sees it run, requeues a dead task and opens the
dashboard, saving a screenshot of each page in a folder it prints.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from tasks_core import queues, scheduling
from tasks_core.models import Lambda, TaskEntity
from tasks_core.queues.base import Message
from tasks_core.states import TaskStatus
from tests.conftest import ROOT, Processes, wait_for
from tests.factories import TaskFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
#: Where the README's screenshots live; with ATF_REFRESH_DOCS_SCREENSHOTS=1 the test refreshes
#: the dashboard and dead-letter ones (a plain test run leaves the repository as it was).
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BrowserContext]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make test does)")
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # still plain synchronous calls, so Django's async-safety check does not apply.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000},
        )
        yield context
        context.close()
        # The test's queries ran while Playwright's event loop ran in this thread, so Django
        # gave them connections of that loop's context, not the ones pytest-django closes:
        # closed here, in it, or they would keep the test database from being dropped.
        connections.close_all()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ATF_SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {folder}")
    return folder


def an_hour_of_history(now: datetime, queue: queues.QueueBackend) -> None:
    """Work finished over the last hour, dead letters of two kinds, messages in two queues."""
    sleep, fail = (Lambda.objects.get(name=name) for name in ("demo.sleep", "demo.fail"))
    for minute in range(2, 60, 2):
        started = now - timedelta(minutes=minute)
        for n in range(1 + minute % 5):
            latency = timedelta(seconds=0.04 + 0.03 * ((minute * 7 + n) % 9))
            TaskFactory(lambda_ref=sleep, status=TaskStatus.SUCCESS, attempts=1,
                        run_at=started - latency, started_at=started,
                        finished_at=started + timedelta(seconds=1))
    errors = [("ConnectionError", "smtp refused")] * 4 + [("KeyError", "'customer_id'")] * 2
    for n, (kind, message) in enumerate(errors):
        TaskFactory(lambda_ref=fail, status=TaskStatus.DEAD, attempts=3, max_attempts=3,
                    finished_at=now - timedelta(minutes=7 * n + 1),
                    last_error={"type": kind, "message": message,
                                "traceback": f"Traceback …\n{kind}: {message}"})
    for priority, count in (("high", 12), ("low", 30)):
        queue.push(queue.queue_name("demo.record", priority),
                   [Message(task_id=10_000 + n, lease=1) for n in range(count)])


def status_of(task: TaskEntity) -> str:
    return TaskEntity.objects.values_list("status", flat=True).get(pk=task.pk)


def press_gate_button(page: Page, base: str, lam: Lambda, action: str) -> None:
    page.goto(f"{base}/admin/tasks_core/lambda/{lam.pk}/change/")
    page.click(f'button[data-action="{action}"]')


def test_operator_pauses_resumes_requeues_and_reads_the_dashboard(
        live_server: object, browser: BrowserContext, processes: Processes,
        queue: queues.QueueBackend, shots: Path) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    # Given an operator, the consumer and a worker for the demo lambdas
    get_user_model().objects.create_superuser("oncall", "oncall@example.com", "pw")
    processes.start("runconsumer", "--poll-interval", "0.2")
    processes.start("runworker", "demo.noop", "demo.sleep", "--threads", "2")
    noop = Lambda.objects.get(name="demo.noop")
    page = browser.new_page()
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "oncall")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_contain_text("ATF dashboard")

    # When the operator pauses demo.noop from its page (no "until")
    press_gate_button(page, base, noop, "pause_gate")
    expect(page.locator("h1")).to_contain_text("Pause gates")
    page.screenshot(path=shots / "01-pause-form.png", full_page=True)
    page.click("input[type=submit][value=Pause]")
    expect(page.locator(".messagelist")).to_contain_text("Gate paused: demo.noop")
    # And a task of demo.noop and one of another lambda come due
    held, control = (scheduling.schedule(scheduling.TaskRequest(name, {}))[0]
                     for name in ("demo.noop", "demo.sleep"))
    # Then the other lambda's task runs, while demo.noop's stays new behind the gate
    wait_for(lambda: status_of(control) == TaskStatus.SUCCESS, timeout_s=60,
             message="the control task to run:\n" + processes.logs())
    assert status_of(held) == TaskStatus.NEW
    page.goto(f"{base}/admin/tasks_core/taskentity/{held.pk}/change/")
    expect(page.locator("div.fieldBox.field-status_badge")).to_contain_text("new")
    page.goto(f"{base}/admin/tasks_core/lambda/")
    expect(page.locator("#result_list")).to_contain_text("paused")
    page.screenshot(path=shots / "02-lambda-paused.png", full_page=True)

    # When the operator resumes it
    press_gate_button(page, base, noop, "resume_gate")
    expect(page.locator(".messagelist")).to_contain_text("Gate open: demo.noop")
    # Then the held task runs
    wait_for(lambda: status_of(held) == TaskStatus.SUCCESS, timeout_s=60,
             message="the held task to run after resume:\n" + processes.logs())
    page.goto(f"{base}/admin/tasks_core/taskentity/{held.pk}/change/")
    expect(page.locator("div.fieldBox.field-status_badge")).to_contain_text("success")
    page.screenshot(path=shots / "03-task-after-resume.png", full_page=True)

    # Given an hour of history, and a dead task of demo.noop
    an_hour_of_history(timezone.now(), queue)
    dead = TaskFactory(lambda_ref=noop, status=TaskStatus.DEAD, attempts=3, max_attempts=3,
                       last_error={"type": "ConnectionError", "message": "smtp refused",
                                   "traceback": "Traceback …\nConnectionError: smtp refused"})
    # When the operator requeues it from the dead-letter page
    page.goto(f"{base}/admin/tasks_console/deadletter/")
    expect(page.locator(".atf-dead-summary")).to_contain_text("smtp refused")
    page.screenshot(path=shots / "04-dead-letters.png", full_page=True)
    page.check(f'input.action-select[value="{dead.pk}"]')
    page.select_option('select[name="action"]', "requeue_dead")
    page.click('button[name="index"]')
    expect(page.locator(".messagelist")).to_contain_text("Requeued 1 task(s)")
    # Then it leaves the dead-letter queue and runs again
    wait_for(lambda: status_of(dead) == TaskStatus.SUCCESS, timeout_s=60,
             message="the requeued task to run:\n" + processes.logs())

    # When the operator opens the dashboard
    page.goto(f"{base}/admin/")
    # Then it shows the charts of the work just done
    expect(page.locator("#atf-throughput svg")).to_be_visible()
    expect(page.locator("#atf-status svg")).to_contain_text("success")
    page.screenshot(path=shots / "05-dashboard.png", full_page=True)
    if os.environ.get("ATF_REFRESH_DOCS_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(shots / "05-dashboard.png", DOCS_SCREENSHOTS / "dashboard.png")
        shutil.copy(shots / "04-dead-letters.png", DOCS_SCREENSHOTS / "dead-letters.png")
