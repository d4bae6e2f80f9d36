"""What one team can learn or make through the API: empty teams, workers, parents, collections,
and list pages without payloads."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.test import Client, override_settings

from tasks_api import serializers
from tasks_core.models import Collection, TaskDependency, TaskEntity, Worker
from tests.factories import TaskFactory, TeamFactory
from tests.integration.tasks_api.test_api_support import Member, schedule, token_client
from tests.integration.tasks_console.test_console_permissions import staff_of

pytestmark = pytest.mark.django_db


def test_a_team_without_lambdas_reads_stats_metrics_and_the_dashboard(client: Client) -> None:
    # Given a staff member of a team that has no lambda at all
    team = TeamFactory(name="lonely")
    user = staff_of()
    team.members.add(user)
    api = token_client(user, team)
    # When they read the stats, the metrics and the dashboard
    stats = api.get("/api/v1/stats/")
    metrics = api.get("/metrics")
    client.force_login(user)
    dashboard = client.get("/admin/")
    # Then each answers, with nothing in it
    assert stats.status_code == 200, stats.content[:300]
    assert stats.json()["delivery_latency"]["count"] == 0
    assert metrics.status_code == 200
    assert dashboard.status_code == 200


def test_worker_counts_are_those_serving_the_callers_lambdas(alice: Member, bob: Member,
                                                             now: datetime) -> None:
    # Given a worker of alice's lambda, one of bob's and one serving every lambda
    for name, lambdas in (("a", [alice.lam.name]), ("b", [bob.lam.name]), ("all", [])):
        Worker.objects.create(worker_id=name, host="h", pid=1, lambdas=lambdas,
                              started_at=now, last_seen=now)
    # Then alice counts hers and the shared one, in the stats and the metrics
    assert alice.client.get("/api/v1/stats/").json()["live_workers"] == 2
    assert "atf_workers 2.0" in alice.client.get("/metrics").content.decode()


def test_after_answers_alike_for_another_teams_task_and_a_missing_one(alice: Member,
                                                                      bob: Member) -> None:
    # Given a task of bob's team and an id that no task has
    theirs = TaskFactory(lambda_ref=bob.lam).pk
    missing = theirs + 1000
    # When alice names each as a parent, alone or beside another bad field
    answers = [schedule(alice, after=[parent], **extra).json()
               for extra in ({}, {"max_attempts": 0}) for parent in (theirs, missing)]
    # Then the answers differ only by the id
    shown = [str(answer).replace(str(missing), "ID").replace(str(theirs), "ID")
             for answer in answers]
    assert shown[0] == shown[1] and shown[2] == shown[3], answers
    assert "after" in answers[0]


def test_a_repeated_parent_is_a_400(alice: Member) -> None:
    parent = schedule(alice).json()["id"]
    for path, body in (("/api/v1/tasks/", {"lambda": alice.lam.name, "after": [parent, parent]}),
                       ("/api/v1/tasks/batch/", {"tasks": [{"lambda": alice.lam.name,
                                                            "after": [parent, parent]}]})):
        response = alice.client.post(path, body, format="json")
        assert response.status_code == 400, response.content
        assert "once" in str(response.json())
    assert TaskEntity.objects.count() == 1


@pytest.mark.parametrize("name", ["\u202eevil", "has space", "a/b", "", "x" * 101, "-dash",
                                  "caf\u00e9"])
def test_collection_names_outside_the_character_set_are_refused(alice: Member,
                                                                name: str) -> None:
    scheduled = schedule(alice, collection=name) if name else None
    gated = alice.client.post(f"/api/v1/lambdas/{alice.lam.name}/collections/{name}/gate/",
                              {"state": "paused"}, format="json")
    if scheduled is not None:
        assert scheduled.status_code == 400 and "collection" in scheduled.json()
    assert gated.status_code in (400, 404)
    assert not Collection.objects.exclude(name="default").exists()


@pytest.mark.parametrize("name", ["monthly", "v1.2_beta:eu-west", "A" * 100])
def test_collection_names_in_the_character_set_are_taken(alice: Member, name: str) -> None:
    assert schedule(alice, collection=name).status_code == 201
    gated = alice.client.post(f"/api/v1/lambdas/{alice.lam.name}/collections/{name}/gate/",
                              {"state": "paused"}, format="json")
    assert gated.status_code == 200


@override_settings(ATF_MAX_NEW_COLLECTIONS=3)
def test_a_batch_creates_a_bounded_number_of_collections(alice: Member) -> None:
    # Given a collection that exists already
    assert schedule(alice, collection="old").status_code == 201

    def batch(*names: str) -> int:
        body = {"tasks": [{"lambda": alice.lam.name, "collection": n} for n in names]}
        return alice.client.post("/api/v1/tasks/batch/", body, format="json").status_code

    # Then a batch may name it and three new ones, but not four new ones
    assert batch("c1", "c2", "c3", "c4") == 400
    assert not Collection.objects.filter(name__startswith="c").exists()
    assert batch("old", "c1", "c2", "c3") == 201


def test_a_batch_writes_a_bounded_number_of_dependency_rows(alice: Member) -> None:
    # Given 100 parent tasks
    body = {"tasks": [{"lambda": alice.lam.name}] * 100}
    parents = [t["id"] for t in alice.client.post("/api/v1/tasks/batch/", body,
                                                  format="json").json()["tasks"]]
    # When a batch of 1,000 tasks names all 100 as parents of each (100,000 links)
    body = {"tasks": [{"lambda": alice.lam.name, "after": parents}] * 1000}
    answer = alice.client.post("/api/v1/tasks/batch/", body, format="json")
    # Then it is refused, naming the limit, and nothing of it is written
    assert answer.status_code == 400
    assert answer.json() == {"tasks": [
        "At most 10000 parents (after) per batch in all; got 100000."]}
    assert TaskEntity.objects.count() == 100 and not TaskDependency.objects.exists()
    # And a batch within it is scheduled with its links
    body = {"tasks": [{"lambda": alice.lam.name, "after": parents}] * 100}
    assert alice.client.post("/api/v1/tasks/batch/", body, format="json").status_code == 201
    assert TaskDependency.objects.count() == 10_000


def test_lists_leave_payloads_and_results_out_unless_asked(alice: Member) -> None:
    # Given 25 dead tasks, each with a payload and a result
    body = {"tasks": [{"lambda": alice.lam.name, "payload": {"big": "x" * 1000}}] * 25}
    created = alice.client.post("/api/v1/tasks/batch/", body, format="json").json()["tasks"]
    TaskEntity.objects.filter(pk__in=[t["id"] for t in created]).update(
        status="dead", result={"out": "y" * 1000})
    for path in ("/api/v1/tasks/", "/api/v1/dead-letters/"):
        # Then a list leaves payloads and results out, and shows what it is asked for
        def page(fields: str = "", path: str = path) -> list[dict]:
            return alice.client.get(path + fields).json()["results"]

        plain, payloads = page(), page("?fields=payload")
        results, both = page("?fields=result&page_size=1000"), page("?fields=payload,result")
        assert len(plain) == 25 and not {"payload", "result"} & set(plain[0])
        assert payloads[0]["payload"] == {"big": "x" * 1000} and "result" not in payloads[0]
        assert results[0]["result"] == {"out": "y" * 1000} and "payload" not in results[0]
        assert both[0]["payload"] == {"big": "x" * 1000} and both[0]["result"]
        # And a page that shows them holds at most 20 tasks, whatever page_size asks
        assert {len(payloads), len(results), len(both)} == {serializers.BODY_PAGE_SIZE}
        assert alice.client.get(path + "?fields=secret").status_code == 400
    # And the task itself still shows both
    shown = alice.client.get(f"/api/v1/tasks/{created[0]['id']}/").json()
    assert (shown["payload"], shown["result"]) == ({"big": "x" * 1000}, {"out": "y" * 1000})


def test_a_batch_sent_again_answers_the_same_tasks(alice: Member) -> None:
    # Given a batch whose tasks all carry idempotency keys
    body = {"tasks": [{"lambda": alice.lam.name, "idempotency_key": f"k{n}"} for n in range(3)]}
    first = alice.client.post("/api/v1/tasks/batch/", body, format="json")
    # When it is sent again (every task exists already)
    again = alice.client.post("/api/v1/tasks/batch/", body, format="json")
    # Then the same tasks come back, and no new ones were made
    assert first.status_code == 201 and again.status_code in (200, 201), again.content[:300]
    assert [t["id"] for t in again.json()["tasks"]] == [t["id"] for t in first.json()["tasks"]]
    assert TaskEntity.objects.count() == 3
