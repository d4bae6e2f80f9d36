"""The dashboard: numbers from tasks_core.stats, drawn as inline SVG, redrawn from JSON."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tasks_console import charts, dashboard
from tasks_core import latency_buckets, queues
from tasks_core.models import TaskAssoc, Worker
from tasks_core.queues.base import Message
from tasks_core.states import AssocStatus, TaskStatus
from tests.factories import LambdaFactory, TaskFactory

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("tasks_console:dashboard")


@pytest.fixture
def busy_hour(now: datetime, queue: queues.QueueBackend) -> None:
    """A lambda that ran tasks in the last hour, failed some, has a queue and a live worker."""
    lam = LambdaFactory(name="shop.checkout", gate="paused")
    for minutes_ago, latency_s in ((30, 0.2), (30, 0.4), (5, 1.5)):
        started = now - timedelta(minutes=minutes_ago)
        TaskFactory(lambda_ref=lam, status=TaskStatus.SUCCESS, attempts=1,
                    run_at=started - timedelta(seconds=latency_s), started_at=started,
                    finished_at=started + timedelta(seconds=1))
    TaskFactory(lambda_ref=lam, status=TaskStatus.DEAD, attempts=3, finished_at=now)
    TaskFactory(lambda_ref=lam)  # due, held back by the paused gate
    queued = TaskFactory(lambda_ref=lam, status=TaskStatus.ENQUEUED)  # goes back when taken
    TaskAssoc.objects.filter(task=queued).update(status=AssocStatus.STARTED,
                                                 next_trigger_at=now + timedelta(minutes=1))
    running = TaskFactory(lambda_ref=lam, status=TaskStatus.PROCESSING)  # runs to its end
    TaskAssoc.objects.filter(task=running).update(status=AssocStatus.STARTED,
                                                  next_trigger_at=now - timedelta(seconds=1))
    queue.push(queue.queue_name("shop.checkout", "high"),
               [Message(task_id=n, lease=1) for n in range(7)])
    Worker.objects.create(worker_id="host-a:1", host="host-a", pid=1, lambdas=["shop.checkout"],
                          started_at=now, last_seen=now)


def test_dashboard_draws_every_panel(admin_client: Client, busy_hour: None) -> None:
    # Given an hour of work (fixture)
    # When the dashboard opens
    page = admin_client.get(DASHBOARD)
    # Then every panel is an inline SVG chart or a table with the numbers
    text = page.content.decode()
    assert page.status_code == 200
    for panel in ("status", "queues", "throughput", "latency", "failures", "workers"):
        assert f'id="atf-{panel}"' in text
    assert text.count("<svg xmlns") >= 5
    assert "shop.checkout · high" in text  # queue depth per <lambda, priority>
    assert "host-a:1" in text  # live worker
    cards = dict(page.context["cards"])
    assert cards["live workers"] == 1 and cards["dead letters"] == 1
    assert cards["failures (1 h)"] == 1
    # (the first attempts were 0.2, 0.4 and 1.5 s late: the median within the rollup's error)
    assert float(cards["latency p50"].removesuffix(" ms")) == pytest.approx(
        400, rel=latency_buckets.ERROR)
    # And the closed gate is listed with the tasks it holds back: the due one and the queued one
    assert page.context["gated"][0]["held_back"] == 2


def test_dashboard_is_the_admin_front_page_and_lists_the_models(admin_client: Client) -> None:
    # When the admin's front page opens
    page = admin_client.get(reverse("admin:index"))
    # Then it is the dashboard, with links to the models under it
    text = page.content.decode()
    assert "ATF dashboard" in text
    assert reverse("admin:tasks_console_deadletter_changelist") in text


def test_json_endpoint_returns_the_panels_for_the_redraw(admin_client: Client,
                                                         busy_hour: None) -> None:
    # When the page's script polls for fresh panels
    data = admin_client.get(reverse("tasks_console:dashboard-data")).json()
    # Then it gets the same panels, freshly drawn
    assert 'id="atf-throughput"' in data["panels"] and "<svg" in data["panels"]
    assert data["updated"]


def test_latency_chart_has_one_point_per_minute_with_a_started_task(admin_client: Client,
                                                                   busy_hour: None) -> None:
    # When the dashboard opens
    page = admin_client.get(DASHBOARD)
    # Then the p50 line joins the two minutes in which tasks started
    latency_svg = str(page.context["charts"]["latency"])
    p50_points = latency_svg.split('<polyline points="')[1].split('"')[0].split()
    assert len(p50_points) == 2


def test_charts_escape_labels() -> None:
    # Given a label with markup
    bar = charts.Bar(label="<script>x</script>", value=3)
    # When it is drawn
    svg = str(charts.bars([bar], title="t"))
    # Then the markup is text
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_the_finished_per_minute_card_averages_the_minutes_the_chart_draws(
        admin_user: Any) -> None:
    # Given tasks that finished in the chart's 31st minute, and others a few seconds more than
    # an hour ago, before the chart's first minute (the card counted those too: 3.3 beside a
    # chart of 85 a minute)
    now = datetime.now().astimezone().replace(second=45, microsecond=0)
    first_minute = now.replace(second=0) - timedelta(minutes=59)
    lam = LambdaFactory(name="shop.card")
    for finished in [now - timedelta(seconds=3595)] * 6 + [first_minute + timedelta(
            minutes=30, seconds=10)] * 12:
        TaskFactory(lambda_ref=lam, status=TaskStatus.SUCCESS, attempts=1, finished_at=finished)
    # When the dashboard is built
    built = dashboard.build(admin_user, now)
    # Then the card is the average of the chart's 60 minutes (a bar titled for each busy one)
    bars = [float(v) for v in re.findall(r"<title>\d\d:\d\d: ([\d.]+)</title>",
                                         built["charts"]["throughput"])]
    assert sum(bars) == 12
    assert dict(built["cards"])["finished / min (1 h)"] == charts.number(sum(bars) / 60)
