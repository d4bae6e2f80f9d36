"""The shipped alert rules and dashboard (deploy/), checked by promtool and fed series scraped
from ATF's own /metrics during a real run: workers killed, a lambda without workers, a dead
letter, a consumer gone."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tasks_core import atf
from tasks_core.models import TaskAttempt, TaskEntity
from tests.acceptance.test_workers import FAST
from tests.conftest import ROOT, Processes, subprocess_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RULES = ROOT / "deploy" / "prometheus" / "atf-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "atf-dashboard.json"
#: Gauges that are ages: once they grew between the two scrapes, they go on growing.
AGES = {"atf_oldest_due_task_seconds", "atf_consumer_pass_age_seconds",
        "atf_queue_oldest_age_seconds"}
#: Minutes of history given to promtool after the two scrapes, one sample a minute.
MINUTES = 10

Sample = tuple[str, tuple[tuple[str, str], ...]]  #: (name, sorted labels)


@pytest.fixture(scope="module")
def promtool() -> str:
    """promtool, installed as `make test` does it if missing (Debian's `prometheus`)."""
    if shutil.which("promtool") is None:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "ensure_services.py"),
                        "promtool"], check=False, capture_output=True, timeout=600)
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed and could not be (apt-get install prometheus "
                    "needs root and apt-get)")
    return found


def run_promtool(promtool: str, *args: str, cwd: Path) -> str:
    done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_check_and_their_own_unit_tests_pass(promtool: str) -> None:
    assert "SUCCESS: 7 rules found" in run_promtool(promtool, "check", "rules", str(RULES),
                                                    cwd=RULES.parent)
    run_promtool(promtool, "test", "rules", "atf-alerts.test.yml", cwd=RULES.parent)


def scrape(client: Client) -> dict[Sample, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.content.decode())
            for sample in family.samples}


def series(first: dict[Sample, float], second: dict[Sample, float]) -> list[dict[str, str]]:
    """promtool input series: the two scrapes a minute apart, then MINUTES more as the second
    scrape left things (an age that grew goes on growing by a minute a minute)."""
    items = []
    for key in sorted(set(first) | set(second)):
        name, labels = key
        a, b = first.get(key), second.get(key)
        head = f"{'_' if a is None else a} {'_' if b is None else b}"
        if b is None:
            tail = f"_x{MINUTES}"
        elif name in AGES and (a is None or b > a):
            tail = f"{b + 60}+60x{MINUTES - 1}"
        else:
            tail = f"{b}x{MINUTES - 1}"
        label_text = ",".join(f'{k}="{v}"' for k, v in labels)
        items.append({"series": f"{name}{{{label_text}}}", "values": f"{head} {tail}"})
    return items


def expected(alertname: str, lambdas: list[str | None]) -> dict[str, Any]:
    """The alert as promtool should see it, its annotations rendered from the rules file."""
    rule = next(rule for group in yaml.safe_load(RULES.read_text())["groups"]
                for rule in group["rules"] if rule["alert"] == alertname)

    def alert(name: str | None) -> dict[str, Any]:
        render = {key: value.replace("{{ $labels.lambda }}", name or "")
                  for key, value in rule["annotations"].items()}
        labels = {**rule["labels"], **({"lambda": name} if name else {})}
        return {"exp_labels": labels, "exp_annotations": render}

    return {"eval_time": f"{MINUTES + 1}m", "alertname": alertname,
            "exp_alerts": [alert(name) for name in lambdas]}


def status(task: TaskEntity) -> str:
    return TaskEntity.objects.get(pk=task.pk).status


def test_the_alert_rules_fire_on_series_from_a_real_run(
        promtool: str, processes: Processes, tmp_path: Path, settings: Any) -> None:
    settings.ATF_METRICS_PUBLIC = True
    # The scrapes judge workers' liveness by the heartbeat interval the workers use.
    settings.ATF_HEARTBEAT_INTERVAL_S = float(FAST["ATF_HEARTBEAT_INTERVAL_S"])
    client = Client()
    env = subprocess_env(**FAST)
    # Given a consumer, a worker of demo.sleep and demo.fail running a long task, and two
    # tasks of demo.noop, which no worker serves
    sleeper = atf.schedule("demo.sleep", {"seconds": 60}, max_attempts=2)
    waiting = [atf.schedule("demo.noop") for _ in range(2)]
    consumer = processes.start("runconsumer", env=env)
    worker = processes.start("runworker", "demo.sleep", "demo.fail", "--threads", "2", env=env)
    wait_for(lambda: status(sleeper) == "processing", message="the long task running")
    first = scrape(client)
    # When a task of demo.fail dies, the worker is killed mid-task (its attempt is lost when
    # its heartbeat timeout passes), and the consumer is killed
    doomed = atf.schedule("demo.fail", {"mode": "retriable", "times": 5}, max_attempts=1)
    wait_for(lambda: status(doomed) == "dead", message="a dead letter")
    os.killpg(worker.pid, signal.SIGKILL)
    wait_for(lambda: TaskAttempt.objects.filter(task_id=sleeper.pk, outcome="lost").exists(),
             message="the lost attempt recorded")
    os.killpg(consumer.pid, signal.SIGKILL)
    wait_for(lambda: scrape(client).get(("atf_consumer_pass_age_seconds", ()), 0) > 2,
             message="the consumer's pass mark growing old")
    wait_for(lambda: scrape(client)[("atf_lambda_workers", (("lambda", "demo.sleep"),))] == 0,
             message="the killed worker no longer live")
    second = scrape(client)
    assert {status(task) for task in waiting} <= {"new", "enqueued"}
    # Then, on those series, the rules fire for exactly these lambdas
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series(first, second),
            "alert_rule_test": [
                expected("AtfDeadLettersGrowing", ["demo.fail"]),
                expected("AtfHeartbeatLosses", ["demo.sleep"]),
                expected("AtfTasksWaitingTooLong", ["demo.noop", "demo.sleep"]),
                expected("AtfNoWorkerForDueTasks", ["demo.noop", "demo.sleep"]),
                expected("AtfQueueTooOld", ["demo.noop", "demo.sleep"]),
                expected("AtfConsumerNotPassing", [None]),
                expected("AtfQueueDown", []),
            ],
        }],
    }
    (tmp_path / "real-run.test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    run_promtool(promtool, "test", "rules", "real-run.test.yml", cwd=tmp_path)
    # ...and every series the dashboard draws is one that /metrics exposes
    exposed = {name for name, _labels in second}
    drawn = set(re.findall(r"\batf_[a-z_]+", json.dumps(json.loads(DASHBOARD.read_text()))))
    assert drawn - {"atf-overview"} <= exposed, drawn - exposed
