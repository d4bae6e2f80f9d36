"""A task store sharded across three PostgreSQL 15 clusters (tasks_core.shards).

The clusters are private (tests.shard_clusters), each a shard: shard0 (slot 0), shard1, shard2.
The control data stays in the test database. What a test asserts of where rows are, it reads
with its own connection to each cluster, not through ATF. The journeys run small in the suite;
`make test-full-size` (ATF_FULL_SIZE=1) runs them at the sizes a sharded store is specified
at: 30,000 tasks over REST, a paused gate over 5,000, a backlog of 10,000, 32 remote workers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.apps import apps
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import OperationalError, connections, transaction
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from tasks_api.models import Scope
from tasks_core import (
    atf,
    checks,
    directory,
    latency_buckets,
    outcomes,
    pooling,
    scheduling,
    shards,
    stats,
    store,
    wakeup,
    worker_registry,
)
from tasks_core.claiming import Claimer
from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidTask
from tasks_core.models import Lambda, TaskEntity, Worker
from tests.acceptance.test_priority import RANK, inversions, workers_waiting
from tests.acceptance.test_workers import overlapping
from tests.conftest import Processes, race, subprocess_env, wait_for
from tests.held_sockets import connections_to
from tests.integration.tasks_api.test_api_support import Member, member, token_client
from tests.pooler import PgBouncer
from tests.ports import free_port
from tests.remote import start_api, worker_env, worker_token
from tests.shard_clusters import Clusters
from workers.consumer import Consumer, ShardConsumers

ALIASES = ["shard0", "shard1", "shard2"]
#: The journeys at their full sizes (`make test-full-size`), not the suite's.
FULL = os.environ.get("ATF_FULL_SIZE") == "1"
#: Tasks scheduled over REST (half one by one, half in batches of BATCH).
REST_TASKS, BATCH = (30_000, 100) if FULL else (300, 10)
#: Tasks queued behind a gate that is paused while workers drain them.
GATED_TASKS = 5_000 if FULL else 600
#: Tasks of mixed priorities released at once by a gate.
MIXED_BACKLOG = 10_000 if FULL else 1_500
#: Remote worker processes that drain tasks through the API.
REMOTE_WORKERS = 32 if FULL else 4
#: The shards' aliases are databases of the test (flushed after each, as `default` is).
pytestmark = [pytest.mark.django_db(transaction=True, databases=["default", *ALIASES])]
#: The database of the store on each cluster.
DBNAME = "atf"
TASKS = "tasks_core_taskentity"


@pytest.fixture(scope="module", autouse=True)
def clusters(django_db_setup: None, django_db_blocker: Any) -> Iterator[Clusters]:
    """The three clusters, their databases with the test database's tables, known to Django
    as shard0, shard1 and shard2 (before any test's databases are set up)."""
    made = Clusters(len(ALIASES))
    try:
        with django_db_blocker.unblock():
            source = connections["default"].settings_dict
            made.load_schema(DBNAME, host=source["HOST"] or "127.0.0.1",
                             port=int(source["PORT"] or 5432), source=source["NAME"])
        for slot, alias in enumerate(ALIASES):
            connections.settings[alias] = {**source, "HOST": "127.0.0.1",
                                           "PORT": str(made.nodes[slot].port), "NAME": DBNAME,
                                           "TEST": {**source["TEST"], "NAME": DBNAME}}
        yield made
    finally:
        for alias in ALIASES:
            connections[alias].close()
            connections.settings.pop(alias, None)
        made.stop()


@pytest.fixture
def sharded(clusters: Clusters, transactional_db: None, settings: Any) -> Iterator[Clusters]:
    """ATF_STORE_SHARDS = shard0, shard1, shard2, each empty and prepared (its id sequences
    at its slot, the control rows copied in)."""
    settings.ATF_STORE_SHARDS = list(ALIASES)
    tables = ", ".join(model._meta.db_table
                       for model in apps.get_app_config("tasks_core").get_models())
    for alias in ALIASES:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        shards.prepare(alias)
    return clusters


def ids_on(clusters: Clusters) -> list[set[int]]:
    """The task ids each cluster holds, read by a connection of our own."""
    return [{pk for (pk,) in node.query(f"SELECT id FROM {TASKS}", DBNAME)}
            for node in clusters.nodes]


def statuses_on(clusters: Clusters) -> list[dict[str, int]]:
    return [dict(node.query(f"SELECT status, count(*) FROM {TASKS} GROUP BY status", DBNAME))
            for node in clusters.nodes]


def schedule_in_batches(alias: str, calls: list[Any]) -> None:
    """`calls` scheduled on shard `alias`, in batches of at most 1,000 (a batch's limit)."""
    with transaction.atomic(using=alias):
        for first in range(0, len(calls), 1000):
            atf.schedule_many(calls[first:first + 1000])


@pytest.fixture
def alice(sharded: Clusters) -> Member:
    made = member("alpha")
    shards.mirror()  # a lambda made by hand, not by the sync: copied as the sync would
    return made


# --- ids and placement -----------------------------------------------------------------------


@pytest.fixture
def demo_team(sharded: Clusters) -> Member:
    """A member of the demo lambdas' team, whose lambda is demo.noop (workers run it)."""
    made = member(settings.ATF_DEMO_TEAM, lambda_name="demo.noop")
    shards.mirror()
    return made


@pytest.mark.slow
def test_ids_say_their_shard_and_unkeyed_tasks_spread_evenly_and_all_succeed(
        sharded: Clusters, demo_team: Member, processes: Processes, settings: Any) -> None:
    # (the team's scheduling rate, 1,000 tasks/s, is not what this test is about)
    settings.ATF_API_SCHEDULE_RATE_PER_TEAM = 0
    # When REST_TASKS tasks are scheduled over REST, half one by one and half in batches
    half, client, name = REST_TASKS // 2, demo_team.client, demo_team.lam.name
    single = [client.post("/api/v1/tasks/", {"lambda": name, "payload": {"n": n}},
                          format="json") for n in range(half)]
    batches = [client.post("/api/v1/tasks/batch/", {"tasks": [
        {"lambda": name, "payload": {"b": b, "n": n}} for n in range(BATCH)]},
        format="json") for b in range(half // BATCH)]
    assert {r.status_code for r in single + batches} == {201}
    answered = [r.json()["id"] for r in single] + \
        [task["id"] for r in batches for task in r.json()["tasks"]]
    # Then every id is found on the cluster of its slot, and on no other
    found = ids_on(sharded)
    for slot, ids in enumerate(found):
        assert {shards.slot_of(pk) for pk in ids} <= {slot}
        assert all(pk > slot << shards.SLOT_SHIFT for pk in ids)
    assert sorted(set().union(*found)) == sorted(answered)
    assert TaskEntity.objects.using("default").count() == 0  # control holds no task
    # And the shards took a third each, within 10%
    third = REST_TASKS / len(ALIASES)
    assert all(0.9 * third <= len(ids) <= 1.1 * third for ids in found), \
        [len(ids) for ids in found]
    # And every id stays below 2**53
    assert max(answered) < 2**53
    # And a consumer and two workers run them all, each on its shard
    env = shard_env(sharded, ATF_POLL_INTERVAL_S="0.2")
    processes.start("runconsumer", env=env)
    for _n in range(2):
        processes.start("runworker", name, "--threads", "8", env=env)
    wait_for(lambda: [counts.get("success") for counts in statuses_on(sharded)]
             == [len(ids) for ids in found], timeout_s=60 + REST_TASKS / 100,
             message="every task succeeded")


def test_twenty_concurrent_posts_with_one_key_make_one_row_in_all_clusters(
        sharded: Clusters, alice: Member) -> None:
    answers: list[int] = []

    def post() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {alice.token}")
        response = client.post("/api/v1/tasks/", {"lambda": alice.lam.name,
                                                  "idempotency_key": "order-7"}, format="json")
        assert response.status_code in (200, 201), response.json()
        answers.append(response.json()["id"])

    race(*[post] * 20)
    assert len(answers) == 20 and len(set(answers)) == 1
    found = ids_on(sharded)
    assert sum(len(ids) for ids in found) == 1
    # on the shard its key's bucket names, whatever process asks
    assert found[ALIASES.index(shards.key_alias(alice.lam.id, "order-7"))] == set(answers)


def test_schedule_inside_a_transaction_on_shard2_goes_to_shard2_and_rolls_back_with_it(
        sharded: Clusters) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using="shard2"):
        atf.schedule("demo.noop", {"order": 1})
        raise RuntimeError("the order failed")
    assert ids_on(sharded) == [set(), set(), set()]
    with transaction.atomic(using="shard2"):
        task = atf.schedule("demo.noop", {"order": 2})
    assert ids_on(sharded) == [set(), set(), {task.pk}]
    assert shards.slot_of(task.pk) == 2


def test_a_chain_stays_on_its_shard_and_parents_on_two_shards_are_refused(
        sharded: Clusters) -> None:
    steps = atf.chain(*(atf.call("demo.noop", {"step": n}) for n in range(3)))
    assert len({shards.alias_of(step.pk) for step in steps}) == 1
    with transaction.atomic(using="shard1"):
        first = atf.schedule("demo.noop")
    with transaction.atomic(using="shard2"):
        second = atf.schedule("demo.noop")
    with pytest.raises(InvalidTask) as refused:
        atf.schedule("demo.noop", after=[first.pk, second.pk])
    assert "different shards" in refused.value.errors["after"][0]
    child = atf.schedule("demo.noop", after=[first.pk])
    assert shards.alias_of(child.pk) == "shard1"



def test_a_group_lives_on_one_shard_with_its_keyed_members_and_its_own_key(
        sharded: Clusters) -> None:
    # A plain group: its members, chain steps and callbacks on the group's shard
    made = atf.group([atf.call("demo.noop", {"n": n}) for n in range(6)] +
                     [atf.ChainRequest([atf.call("demo.noop"), atf.call("demo.noop")])],
                     then=atf.call("demo.noop"))
    home = shards.alias_of(made.pk)
    found = ids_on(sharded)
    assert sum(len(ids) for ids in found) == 9  # 6 + a chain of 2 + then
    assert len(found[ALIASES.index(home)]) == 9
    # A keyed group, scheduled twice: one group, on the shard of its key
    lambda_id = directory.by_name("demo.noop").id
    keyed = [atf.group([atf.call("demo.noop")], idempotency_key="album-1") for _ in range(2)]
    assert keyed[0].pk == keyed[1].pk
    assert shards.alias_of(keyed[0].pk) == shards.key_alias(lambda_id, "album-1")
    # Members whose keys live on two shards cannot share a group
    keys = {shards.key_alias(lambda_id, f"photo-{n}"): f"photo-{n}" for n in range(50)}
    assert len(keys) > 1
    with pytest.raises(InvalidTask) as refused:
        atf.group([atf.call("demo.noop", idempotency_key=key) for key in list(keys.values())[:2]])
    assert "different shards" in refused.value.errors["tasks"][0]
    # Keyed members of one shard may: the group goes there
    same = [f"photo-{n}" for n in range(50)
            if shards.key_alias(lambda_id, f"photo-{n}") == "shard1"][:2]
    together = atf.group([atf.call("demo.noop", idempotency_key=key) for key in same])
    assert shards.alias_of(together.pk) == "shard1"

def test_a_batch_whose_collection_cannot_be_copied_into_a_shard_it_writes_stores_nothing(
        sharded: Clusters) -> None:
    # Given a batch with a task on shard2 and then one on shard1, both in a new collection, and
    # shard2 failing when the second part copies the collection's row into it (after the first
    # part inserted its task there, inside the batch's open transaction on shard2)
    lambda_id = directory.by_name("demo.noop").id
    keys = {shards.key_alias(lambda_id, f"k{n}"): f"k{n}" for n in range(100)}
    batch = [atf.call("demo.noop", idempotency_key=keys[alias], collection="brand-new")
             for alias in ("shard2", "shard1")]
    inserted = []

    def collection_copy_fails(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        if sql.startswith('INSERT INTO "tasks_core_collection"'):
            raise OperationalError("server closed the connection unexpectedly")
        inserted.append(sql)
        return execute(sql, *args)

    # When it is scheduled, Then it fails as a whole: no task anywhere (the copy's error was
    # logged and passed over, and shard2's transaction rolled back silently at its end, so the
    # batch returned two tasks of which one was never stored)
    with connections["shard2"].execute_wrapper(collection_copy_fails), \
            pytest.raises(OperationalError):
        atf.schedule_many(batch)
    assert inserted, "shard2's part ran before the copy"
    assert not any(TaskEntity.objects.using(alias).exists() for alias in ALIASES)
    # And once shard2 takes the copy, the same batch is stored whole
    assert len(atf.schedule_many(batch)) == 2
    assert sorted(TaskEntity.objects.using(alias).count() for alias in ALIASES) == [0, 1, 1]


def test_an_idempotency_key_has_one_shard_whatever_the_process() -> None:
    # The bucket is a CRC of the lambda and the key: the same in every process and run.
    assert shards.bucket_of(7, "order-7") == shards.bucket_of(7, "order-7")
    buckets = {shards.bucket_of(7, f"key-{n}") for n in range(5000)}
    assert len(buckets) > shards.BUCKETS * 0.6  # keys spread over the buckets


# --- the store on every shard ----------------------------------------------------------------


def test_a_gate_whose_time_ran_out_reopens_on_every_shard(sharded: Clusters, queue: Any) -> None:
    # A gate paused until a moment ago: the copies every shard's claims read reopen with it
    scheduling.set_gate("demo.noop", "paused", until=timezone.now() + timedelta(seconds=1))
    lambda_id = directory.by_name("demo.noop").id
    assert {Lambda.objects.using(alias).get(pk=lambda_id).gate for alias in ALIASES} == {"paused"}
    Consumer(batch_size=100, poll_interval_s=1, queue=queue, shard="shard1").housekeep(
        timezone.now() + timedelta(seconds=2))
    assert {Lambda.objects.using(alias).get(pk=lambda_id).gate for alias in ALIASES} == {"open"}

def test_the_loops_of_a_consumer_process_do_the_control_databases_chores_once_a_round(
        sharded: Clusters, queue: Any) -> None:
    # A consumer process of three shards: its loops share control's chores
    loops = ShardConsumers(ALIASES, queue=queue).consumers
    assert len({id(loop.chores) for loop in loops}) == 1
    # Whichever loop comes first takes a round (a loop whose shard is down never comes), and
    # the others none until the next is due
    assert loops[2].chores.take_housekeeping(100.0)
    assert not loops[0].chores.take_housekeeping(100.5)
    assert not loops[1].chores.take_housekeeping(100.9)
    assert loops[1].chores.take_housekeeping(101.0)
    # And a periodic look: one at a time
    with loops[1].chores.periodic_look() as first, loops[0].chores.periodic_look() as second:
        assert (first, second) == (True, False)
    with loops[2].chores.periodic_look() as next_one:
        assert not next_one  # not yet due again
    # A loop's housekeeping without the round leaves control alone, with it does control's
    scheduling.set_gate("demo.noop", "paused", until=timezone.now() + timedelta(seconds=1))
    Worker.objects.create(worker_id="h:1", host="h", pid=1, started_at=timezone.now(),
                          last_seen=timezone.now() - timedelta(days=1))
    later = timezone.now() + timedelta(seconds=2)
    loops[0].housekeep(later, control=False)
    assert Lambda.objects.get(name="demo.noop").gate == "paused"
    assert Worker.objects.get(worker_id="h:1").stopped_at is None
    loops[2].housekeep(later)
    assert {Lambda.objects.using(alias).get(name="demo.noop").gate for alias in ALIASES} == {
        "open"}
    assert Worker.objects.get(worker_id="h:1").stopped_at == later


def test_a_paused_gate_holds_tasks_on_every_shard(sharded: Clusters, redis_client: redis.Redis,
                                                  queue: Any) -> None:
    # Given tasks on all three shards, enqueued by a consumer pass on each
    for alias in ALIASES:
        with transaction.atomic(using=alias):
            for n in range(3):
                atf.schedule("demo.noop", {"n": n})
    for alias in ALIASES:
        Consumer(batch_size=100, poll_interval_s=1, queue=queue, shard=alias).run_pass()
    assert [s.get("enqueued") for s in statuses_on(sharded)] == [3, 3, 3]
    # When the lambda's gate is paused, and a worker claims and starts what the queues hold
    scheduling.set_gate("demo.noop", "paused")
    claimer = Claimer(queue=queue, worker_id="w1",
                      lambda_ids={"demo.noop": directory.by_name("demo.noop").id},
                      priorities=atf_settings.priorities)
    claimed: list[store.ClaimedTask] = []
    while taken := claimer.take(100, wait_s=0):  # a pop takes one shard's queue
        claimed += taken
    assert len(claimed) == 9
    started = store.start_many(claimed, now=timezone.now())
    # Then none starts, on any shard: each went back to new
    assert started == [False] * 9
    assert [s.get("new") for s in statuses_on(sharded)] == [3, 3, 3]


def test_a_worker_claims_on_the_shards_in_turn_and_priority_stays_strict(
        sharded: Clusters, queue: Any) -> None:
    # Given a run of due tasks on each shard, each pushed to its shard's queue by its shard's
    # consumer, and one high-priority task on the last shard
    for alias in ALIASES:
        with transaction.atomic(using=alias):
            for n in range(4):
                atf.schedule("demo.noop", {"n": n})
    with transaction.atomic(using=ALIASES[-1]):
        urgent = atf.schedule("demo.noop", {"urgent": True}, priority="high")
    for alias in ALIASES:
        Consumer(batch_size=100, poll_interval_s=1, queue=queue, shard=alias).run_pass()
    assert stats.queue_depths(["demo.noop"], backend=queue) == {
        "demo.noop": {"high": 1, "default": 12, "low": 0}}
    # When a worker takes two tasks at a time until none are left
    claimer = Claimer(queue=queue, worker_id="w1",
                      lambda_ids={"demo.noop": directory.by_name("demo.noop").id},
                      priorities=atf_settings.priorities)
    taken: list[list[store.ClaimedTask]] = []
    while claimed := claimer.take(2, wait_s=0):
        taken.append(claimed)
    # Then the high-priority task came first, and then every round of three claims took from
    # each shard once (not one shard's run of tasks after another's)
    assert [task.task_id for task in taken[0]] == [urgent.pk]
    homes = [{shards.alias_of(task.task_id) for task in claimed} for claimed in taken[1:]]
    assert all(len(home) == 1 for home in homes)
    assert [sorted(set().union(*homes[n:n + 3])) for n in (0, 3)] == [ALIASES, ALIASES]
    assert sum(len(claimed) for claimed in taken) == 13


@pytest.mark.slow
def test_a_mixed_backlog_on_every_shard_released_by_a_gate_starts_in_priority_order(
        sharded: Clusters, processes: Processes, redis_client: redis.Redis) -> None:
    # Given MIXED_BACKLOG tasks of mixed priorities behind a paused gate, a third on each shard
    # (each shard's own queues), scheduled in random order
    scheduling.set_gate("demo.noop", "paused")
    rng, third = random.Random(35), MIXED_BACKLOG // len(ALIASES)
    for alias in ALIASES:
        schedule_in_batches(alias, [{"lambda": "demo.noop", "priority": rng.choice(list(RANK))}
                                    for _n in range(third)])
    assert [sum(counts.values()) for counts in statuses_on(sharded)] == [third] * len(ALIASES)
    # ...a consumer and four single-threaded workers waiting on the queues
    env = shard_env(sharded, ATF_ENQUEUE_TIMEOUT_S="900", ATF_POLL_INTERVAL_S="0.2")
    processes.start("runconsumer", env=env)
    for _n in range(4):
        processes.start("runworker", "demo.noop", "--threads", "1", env=env)
    wait_for(lambda: workers_waiting(redis_client, 4), message="four workers blocked")
    # When the gate opens and the backlog drains
    scheduling.set_gate("demo.noop", "open")
    wait_for(lambda: [counts.get("success") for counts in statuses_on(sharded)]
             == [third] * len(ALIASES), timeout_s=60 + MIXED_BACKLOG / 10,
             message="every task succeeded")
    # Then fewer than 1% of the starts, every shard's together, are priority inversions
    starts = [row for alias in ALIASES
              for row in TaskEntity.objects.using(alias).values_list("started_at", "priority")]
    assert inversions(starts) < len(starts) / 100


def started_after(moment: datetime) -> int:
    """Tasks on every shard that started after `moment`."""
    return sum(TaskEntity.objects.using(alias).filter(started_at__gt=moment).count()
               for alias in ALIASES)


@pytest.mark.slow
def test_a_lambda_paused_while_workers_drain_its_backlog_on_every_shard_starts_nothing_more(
        sharded: Clusters, processes: Processes) -> None:
    # Given GATED_TASKS short tasks, a third on each shard, draining through a consumer and two
    # direct workers
    for alias in ALIASES:
        schedule_in_batches(alias, [atf.call("demo.sleep", {"seconds": 0.05})
                                    for _n in range(GATED_TASKS // len(ALIASES))])
    env = shard_env(sharded, ATF_POLL_INTERVAL_S="0.2", ATF_HEARTBEAT_INTERVAL_S="1")
    processes.start("runconsumer", env=env)
    for _n in range(2):
        processes.start("runworker", "demo.sleep", "--threads", "4", env=env)
    wait_for(lambda: sum(counts.get("success", 0) for counts in statuses_on(sharded)) >= 40,
             timeout_s=60, message="the backlog draining on the shards")
    # When the lambda is paused
    scheduling.set_gate("demo.sleep", "paused")
    paused_at = timezone.now()
    # Then once the call has returned no task starts on any shard, while the workers hand the
    # queued ones back
    wait_for(lambda: sum(counts.get("new", 0) for counts in statuses_on(sharded)) > 100,
             timeout_s=30, message="queued tasks handed back")
    assert started_after(paused_at) == 0
    finished = sum(counts.get("success", 0) for counts in statuses_on(sharded))
    assert finished < GATED_TASKS / 2
    # And once it opens again, every task runs
    scheduling.set_gate("demo.sleep", "open")
    wait_for(lambda: [counts.get("success") for counts in statuses_on(sharded)]
             == [GATED_TASKS // len(ALIASES)] * len(ALIASES), timeout_s=60 + GATED_TASKS / 20,
             message="every task succeeded")


@pytest.mark.slow
def test_remote_workers_drain_every_shard_holding_no_database_connection(
        sharded: Clusters, processes: Processes) -> None:
    # Given the API, a consumer, and REMOTE_WORKERS remote worker processes whose sessions, had
    # they any, would carry a name of their own
    name = "atf-remote-worker"
    env = shard_env(sharded, ATF_POLL_INTERVAL_S="0.2")
    url = start_api(processes, env)
    processes.start("runconsumer", env=env)
    host_env = {key: value for key, value in worker_env(env, worker_token()).items()
                if key != "ATF_SHARD_URLS"}  # a lambda host knows no database
    processes.start("runworker", "demo.noop", "--api", url, "--threads", "2",
                    "--processes", str(REMOTE_WORKERS), env={**host_env, "PGAPPNAME": name})
    # When they drain 100 tasks on each shard
    per_shard = 100
    for alias in ALIASES:
        with transaction.atomic(using=alias):
            atf.schedule_many([atf.call("demo.noop", {"n": n}) for n in range(per_shard)])
    most = most_until_all_succeed(lambda: sessions_named(name, sharded), sharded, per_shard)
    # Then none of them ever held a connection to the control database or to a shard
    assert most == [0] * (1 + len(ALIASES))


def test_each_shards_consumer_sleeps_until_the_next_trigger_on_its_own_shard(
        sharded: Clusters, queue: Any) -> None:
    # Given a delayed task on each shard, due 10, 20 and 30 s from now, and nothing due
    now = timezone.now()
    for n, alias in enumerate(ALIASES):
        with transaction.atomic(using=alias):
            atf.schedule("demo.noop", run_at=now + timedelta(seconds=10 * (n + 1)))
    for n, alias in enumerate(ALIASES):
        # When each shard's consumer loop passes and asks how long to sleep
        consumer = Consumer(batch_size=100, poll_interval_s=60, queue=queue, shard=alias)
        idle = consumer.run_pass()
        # Then until its own shard's task falls due (it read the control database's tasks)
        assert consumer.seconds_to_sleep(idle) == pytest.approx(10 * (n + 1), abs=3)


@pytest.mark.slow
def test_a_consumer_and_a_worker_drain_every_shard(sharded: Clusters, processes: Processes,
                                                   redis_client: redis.Redis) -> None:
    env = shard_env(sharded)
    processes.start("runconsumer", "--poll-interval", "0.2", env=env)
    processes.start("runworker", "demo.noop", "--threads", "4", env=env)
    tasks = [atf.schedule("demo.noop", {"n": n}) for n in range(30)]
    assert {shards.alias_of(task.pk) for task in tasks} == set(ALIASES)
    wait_for(lambda: [s.get("success") for s in statuses_on(sharded)] == [10, 10, 10],
             timeout_s=60, message="every shard's tasks succeeded")


def sessions_named(name: str, clusters: Clusters) -> list[int]:
    """Sessions of application `name` on the control database and on each shard's cluster."""
    sql = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'"
    with connections["default"].cursor() as cursor:
        cursor.execute(sql)
        (on_control,) = cursor.fetchone()
    return [on_control, *(node.query(sql, DBNAME)[0][0] for node in clusters.nodes)]


def most_until_all_succeed(sample: Callable[[], list[int]], clusters: Clusters, per_shard: int,
                           *, timeout_s: float = 120) -> list[int]:
    """The most of each of `sample()`'s counts seen while the shards' tasks ran, sampled
    until each shard holds `per_shard` successes."""
    most, deadline = sample(), time.monotonic() + timeout_s
    while [counts.get("success") for counts in statuses_on(clusters)] != \
            [per_shard] * len(clusters.nodes):
        assert time.monotonic() < deadline, f"not every task succeeded: {statuses_on(clusters)}"
        most = [max(pair) for pair in zip(most, sample(), strict=True)]
    return most


@pytest.mark.slow
@pytest.mark.parametrize("pooled", [1, 2])
def test_a_direct_worker_holds_at_most_its_pools_connections_to_each_database(
        sharded: Clusters, processes: Processes, redis_client: redis.Redis,
        pooled: int) -> None:
    # Given a direct worker of 16 threads with ATF_WORKER_DB_CONNECTIONS = `pooled`, and a
    # consumer, once the worker has started (at its start it asks each database, on two
    # connections it then closes, whether connections keep their session: tasks_core.pooling)
    env = shard_env(sharded, ATF_HEARTBEAT_INTERVAL_S="0.5", ATF_HEARTBEAT_TIMEOUT_S="5",
                    ATF_POLL_INTERVAL_S="0.2")
    processes.start("runconsumer", env=env)
    worker = processes.start("runworker", "demo.record", "--threads", "16",
                             env={**env, "ATF_WORKER_DB_CONNECTIONS": str(pooled)})
    wait_for(lambda: workers_waiting(redis_client, 1), message="the worker waiting on its queues")
    # When it drains 300 short tasks on each shard (claims, results and heartbeats at once)
    for alias in ALIASES:
        with transaction.atomic(using=alias):
            atf.schedule_many([{"lambda": "demo.record",
                                "payload": {"key": "demo:pooled", "seconds": 0.05}}] * 300)
    # (the connections the process holds, read on its side: the server lists a session it
    # closed until the backend has exited, which a busy machine can make outlast the next)
    ports = [int(connections["default"].settings_dict["PORT"] or 5432),
             *(node.port for node in sharded.nodes)]
    most = most_until_all_succeed(lambda: connections_to(worker.pid, ports), sharded, 300)
    # Then it never held more than its pool's connections to any database (each thread kept
    # its own before: four or five a shard), and it used each
    assert max(most) <= pooled and min(most[1:]) >= 1, most


@pytest.mark.parametrize("asked", [None, True])
def test_the_store_prepares_its_statements_only_where_every_shard_keeps_its_session(
        sharded: Clusters, asked: bool | None) -> None:
    before = atf_settings.db_prepared_statements
    settings.ATF_DB_PREPARED_STATEMENTS = asked
    shard = connections["shard1"].settings_dict
    try:
        # Given every shard reached directly: the store's statements are prepared
        pooling.forget()
        assert pooling.prepare_statements() is True
        # When one shard is reached through PgBouncer in transaction mode: nowhere
        bouncer = PgBouncer("transaction", host=shard["HOST"] or "127.0.0.1",
                            port=int(shard["PORT"]))
        try:
            with moved("shard1", bouncer.port):
                pooling.forget()
                assert pooling.prepare_statements() is False
        finally:
            bouncer.stop()
        # ...and when one shard cannot be reached at the moment it is asked
        with unreachable("shard1"):
            pooling.forget()
            assert pooling.prepare_statements() is False
    finally:
        settings.ATF_DB_PREPARED_STATEMENTS = before
        pooling.forget()


@contextlib.contextmanager
def moved(alias: str, port: int | str) -> Iterator[None]:
    """Within it, `alias`'s connections go to `port` (a pooler in front of it, or nothing)."""
    shard = connections[alias]
    shard.close()
    before = shard.settings_dict["PORT"]
    shard.settings_dict["PORT"] = str(port)
    try:
        yield
    finally:
        shard.close()
        shard.settings_dict["PORT"] = before


def unreachable(alias: str) -> contextlib.AbstractContextManager[None]:
    """Within it, `alias`'s connections go to a port nothing listens on (as to a shard that
    is down)."""
    return moved(alias, free_port())


def test_a_shard_that_is_down_costs_only_its_own_tasks(sharded: Clusters, alice: Member,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shards, "turns", type(shards.turns)())  # no shard passed over yet
    key = next(f"k{n}" for n in range(1000) if shards.key_alias(alice.lam.id, f"k{n}") == "shard1")
    with unreachable("shard1"):
        # unkeyed tasks go to the shards that answer
        unkeyed = [alice.client.post("/api/v1/tasks/", {"lambda": alice.lam.name},
                                     format="json") for _n in range(6)]
        # a keyed one whose bucket is on the shard that is down: try again later
        keyed = alice.client.post("/api/v1/tasks/", {"lambda": alice.lam.name,
                                                     "idempotency_key": key}, format="json")
    assert [r.status_code for r in unkeyed] == [201] * 6
    found = ids_on(sharded)
    assert not found[1] and len(found[0]) + len(found[2]) == 6
    assert keyed.status_code == 503 and keyed["Retry-After"] == "5"


def test_a_task_in_turn_for_a_dead_shard_waits_not_for_its_pool_and_goes_elsewhere(
        sharded: Clusters, alice: Member, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a process whose connections come from pools (the API under gunicorn), a new task
    placed on a shard that is down only because it was its turn waited the pool's timeout
    (10 s) each time the shard's down-mark had run out, and the first task of a new collection
    as long to copy the collection's row there; each now waits POOL_WAIT_S at most."""
    monkeypatch.setattr(shards, "turns", type(shards.turns)())
    monkeypatch.setattr(shards, "DOWN_S", 0.0)  # every turn tries the dead shard again
    shard = connections["shard1"]
    shard.close()
    monkeypatch.setitem(shard.settings_dict, "CONN_MAX_AGE", 0)
    monkeypatch.setitem(shard.settings_dict, "OPTIONS",
                        {**shard.settings_dict["OPTIONS"], "pool": {"timeout": 10}})
    answers, took = [], []
    try:
        with unreachable("shard1"):
            for _n in range(6):
                started = time.monotonic()
                answers.append(alice.client.post("/api/v1/tasks/", {"lambda": alice.lam.name},
                                                 format="json"))
                took.append(time.monotonic() - started)
    finally:
        shard.close_pool()
    assert [r.status_code for r in answers] == [201] * 6
    assert max(took) < 3, took  # not the pool's 10 s
    found = ids_on(sharded)
    assert not found[1] and len(found[0]) + len(found[2]) == 6


def running_on_every_shard() -> dict[int, int]:
    """A task of demo.noop running on each shard for worker w1: its lease by id."""
    leases = {}
    for alias in ALIASES:
        with transaction.atomic(using=alias):
            pk = atf.schedule("demo.noop").pk
        TaskEntity.objects.using(alias).filter(pk=pk).update(status="processing", worker="w1",
                                                             lease=7)
        leases[pk] = 7
    return leases


def test_a_workers_heartbeat_spares_a_shard_that_is_down(sharded: Clusters,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shards, "outages", type(shards.outages)())
    # "not tried again" below holds whatever the machine's load (at load 5 the 1 s ran out)
    monkeypatch.setattr(shards, "pass_over_s", lambda: 60.0)
    # Given a running task on each shard
    leases = running_on_every_shard()
    on_one = next(pk for pk in leases if shards.alias_of(pk) == "shard1")
    with unreachable("shard1"):
        # A heartbeat that must reach every shard fails
        with pytest.raises(OperationalError):
            store.heartbeat(leases, now=timezone.now())
        # One that spares: the others renewed, shard1's neither renewed nor lost
        unreached: set[int] = set()
        assert store.heartbeat(leases, now=timezone.now(), unreached=unreached) == set()
        assert unreached == {on_one}
        # and within its pass-over time it is not tried again (no connection attempt, no wait)
        again: set[int] = set()
        monkeypatch.setattr(connections["shard1"], "ensure_connection", None)
        assert store.heartbeat(leases, now=timezone.now(), unreached=again) == set()
        assert again == {on_one}


def test_a_worker_that_cannot_reach_a_shard_leaves_that_shards_queue_to_the_others(
        sharded: Clusters, queue: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shards, "outages", type(shards.outages)())
    monkeypatch.setattr(shards, "pass_over_s", lambda: 60.0)
    # Given a task in each shard's queue, and a worker whose heartbeat found shard1 down
    for alias in ALIASES:
        with transaction.atomic(using=alias):
            atf.schedule("demo.noop")
        Consumer(batch_size=100, poll_interval_s=1, queue=queue, shard=alias).run_pass()
    leases = running_on_every_shard()
    claimer = Claimer(queue=queue, worker_id="w2",
                      lambda_ids={"demo.noop": directory.by_name("demo.noop").id},
                      priorities=atf_settings.priorities, start=True)
    with unreachable("shard1"):
        store.heartbeat(leases, now=timezone.now(), unreached=set())
        # When it claims until nothing more comes
        claimed = []
        while taken := claimer.take(1, wait_s=0, unreached=set()):
            claimed += taken
    # Then it claimed the tasks of the shards it reaches, and shard1's message still waits
    assert sorted(shards.alias_of(task.task_id) for task in claimed) == ["shard0", "shard2"]
    assert stats.queue_depths(["demo.noop"], backend=queue)["demo.noop"]["default"] == 1
    # for a worker that reaches shard1, which claims it at once
    shards.outages.answered("shard1")
    (task,) = claimer.take(5, wait_s=0, unreached=set())
    assert shards.alias_of(task.task_id) == "shard1"


def test_a_claim_that_cannot_reach_a_shard_says_how_many_of_its_messages_it_dropped(
        sharded: Clusters, queue: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A claim that popped a shard's messages and then found the shard down drops them, and
    the shard's consumer enqueues their tasks again at their enqueue timeout: a delay of up to
    a minute that no line said (the pools' slow start made it happen unseen, 8651e81)."""
    monkeypatch.setattr(shards, "outages", type(shards.outages)())
    monkeypatch.setattr(shards, "pass_over_s", lambda: 60.0)
    # Given a task in each shard's queue, and a direct worker's claimer
    ids = {}
    for alias in ALIASES:
        with transaction.atomic(using=alias):
            ids[alias] = atf.schedule("demo.noop").pk
        Consumer(batch_size=100, poll_interval_s=1, queue=queue, shard=alias).run_pass()
    claimer = Claimer(queue=queue, worker_id="w1",
                      lambda_ids={"demo.noop": directory.by_name("demo.noop").id},
                      priorities=atf_settings.priorities, start=True)
    with unreachable("shard1"), caplog.at_level(logging.WARNING, logger="tasks_core.claiming"):
        # When it claims while shard1 is down, not known to be (a pop takes one queue's)
        claimed = [task for _n in range(2 * len(ALIASES))
                   for task in claimer.take(1, wait_s=0, unreached=set())]
    # Then it claimed the tasks of the shards that answer, and said what it dropped
    assert sorted(shards.alias_of(task.task_id) for task in claimed) == ["shard0", "shard2"]
    assert stats.queue_depths(["demo.noop"], backend=queue)["demo.noop"]["default"] == 0
    assert [record.getMessage() for record in caplog.records] == [
        f"dropped 1 message(s) of tasks on a shard that could not be reached (task "
        f"{ids['shard1']}, ...): it enqueues them again within 60s"]


def test_a_heartbeat_renews_a_shard_whose_open_connection_broke_on_a_new_one(
        sharded: Clusters, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failover (or a restart) of a shard breaks every connection open to it, while its new
    primary answers a new one at once. A heartbeat whose connection broke counted the shard
    unreached and passed it over (for every thread of the process) until its worker stopped
    the shard's tasks; it now tries once more on a new connection."""
    monkeypatch.setattr(shards, "outages", type(shards.outages)())
    leases = running_on_every_shard()
    assert store.heartbeat(leases, now=timezone.now(), unreached=set()) == set()
    # Given this thread's connection to shard1 broken by the server (as a failover breaks it)
    with connections["shard1"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with sharded.nodes[1].connect() as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    # When the next heartbeat runs, every shard is reached and every lease renewed
    renewed_at = timezone.now()
    unreached: set[int] = set()
    assert store.heartbeat(leases, now=renewed_at, unreached=unreached) == set()
    assert unreached == set()
    assert not shards.outages.down("shard1")
    assert {alias: TaskEntity.objects.using(alias).get().heartbeat_at for alias in ALIASES} \
        == dict.fromkeys(ALIASES, renewed_at)
    with connections["shard1"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid


def test_a_shard_that_failed_is_passed_over_at_most_half_a_heartbeat_interval(
        settings: Any) -> None:
    settings.ATF_HEARTBEAT_INTERVAL_S = 5.0
    assert shards.pass_over_s() == shards.RETRY_S == 1.0
    settings.ATF_HEARTBEAT_INTERVAL_S = 0.5  # the chaos run's
    assert shards.pass_over_s() == 0.25


def test_the_worker_api_answers_the_shards_it_reaches_and_names_the_tasks_of_one_it_cannot(
        sharded: Clusters, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shards, "outages", type(shards.outages)())
    # Given a remote worker of team alpha running a task on each of shard1 and shard2
    who = member("alpha")
    shards.mirror()
    client = token_client(who.user, who.team, scope=Scope.WORKER)
    assert client.post("/api/v1/worker/register/", {
        "worker": "w1", "host": "h", "pid": 1, "lambdas": [who.lam.name], "threads": 2},
        format="json").status_code == 201
    running = {}
    for alias in ("shard1", "shard2"):
        with transaction.atomic(using=alias):
            pk = atf.schedule(who.lam.name).pk
        TaskEntity.objects.using(alias).filter(pk=pk).update(
            status="processing", worker="w1", lease=7, started_at=timezone.now())
        running[alias] = pk
    leases = [{"id": pk, "lease": 7} for pk in running.values()]
    ends = [{**lease, "outcome": "success", "result": None} for lease in leases]
    with unreachable("shard1"):
        # When the worker's heartbeat and results reach the API while shard1 is down
        beat = client.post("/api/v1/worker/heartbeat/", {"worker": "w1", "tasks": leases},
                           format="json").json()
        finished = client.post("/api/v1/worker/finish/", {"worker": "w1", "results": ends},
                               format="json").json()
    # Then shard2's task is renewed and finished, and shard1's is named unreached: neither
    # lost nor refused (its result is answered null, to be sent again)
    assert beat == {"lost": [], "cancel": [], "unreached": [running["shard1"]]}
    assert finished == {"results": [{"id": running["shard1"], "status": None},
                                    {"id": running["shard2"], "status": "success"}],
                        "unreached": [running["shard1"]]}
    assert statuses_on_nodes(sharded, [1, 2]) == {1: {"processing": 1}, 2: {"success": 1}}
    # And once shard1 answers again, the answers are as they always were
    monkeypatch.setattr(shards, "outages", type(shards.outages)())
    again = client.post("/api/v1/worker/finish/", {"worker": "w1", "results": ends[:1]},
                        format="json").json()
    assert again == {"results": [{"id": running["shard1"], "status": "success"}]}


def test_a_tokens_bound_counts_what_its_workers_hold_on_every_shard(sharded: Clusters) -> None:
    # Given two workers of one token (registered in control), holding tasks on shard1 and
    # shard2, and one task on shard0 held by a worker of no token
    for worker_id, credential in (("w1", "token:1"), ("w2", "token:1"), ("w3", "")):
        worker_registry.register(worker_id=worker_id, host="h", pid=1, lambda_names=["demo.noop"],
                                 threads=1, now=timezone.now(), credential=credential)
    for alias, worker_id, count in (("shard1", "w1", 2), ("shard2", "w2", 3), ("shard0", "w3", 1)):
        with transaction.atomic(using=alias):
            ids = [atf.schedule("demo.noop").pk for _n in range(count)]
        TaskEntity.objects.using(alias).filter(pk__in=ids).update(status="processing",
                                                                  worker=worker_id)
    # Then the token's count is every shard's (it was slot 0's alone: 0)
    assert store.held("w1", [], credential="token:1") == (2, 5)
    assert store.held("w3", []) == (1, 0)


def done_on(clusters: Clusters, slots: list[int]) -> int:
    """Tasks that succeeded on the clusters of `slots` (which must be up)."""
    return sum(statuses_on_nodes(clusters, slots)[slot].get("success", 0) for slot in slots)


def statuses_on_nodes(clusters: Clusters, slots: list[int]) -> dict[int, dict[str, int]]:
    return {slot: dict(clusters.nodes[slot].query(
        f"SELECT status, count(*) FROM {TASKS} GROUP BY status", DBNAME)) for slot in slots}


def shard_env(sharded: Clusters, **variables: str) -> dict[str, str]:
    """A child process's environment on the three shards (ATF_SHARD_URLS), with `variables`."""
    urls = ",".join(sharded.url(slot, DBNAME) for slot in range(len(ALIASES)))
    return subprocess_env(ATF_SHARD_URLS=urls, **variables)


@pytest.mark.slow
@pytest.mark.drill
def test_a_shard_killed_mid_drain_costs_the_others_nothing_and_its_tasks_finish_when_back(
        sharded: Clusters, processes: Processes, redis_client: redis.Redis) -> None:
    # Given 400 tasks on each shard, drained by a consumer and a direct worker
    env = shard_env(sharded, ATF_HEARTBEAT_INTERVAL_S="1", ATF_HEARTBEAT_TIMEOUT_S="5",
                    ATF_ENQUEUE_TIMEOUT_S="5", ATF_POLL_INTERVAL_S="0.2")
    per_shard, key = 400, "demo:shard-kill"
    for alias in ALIASES:
        with transaction.atomic(using=alias):
            atf.schedule_many([{"lambda": "demo.record",
                                "payload": {"key": key, "seconds": 0.03}}] * per_shard)
    survivors, victim = [0, 2], sharded.nodes[1]
    # (small consumer batches: each shard's messages are spread through the queue)
    consumer = processes.start("runconsumer", "--batch-size", "20", env=env)
    worker = processes.start("runworker", "demo.record", "--threads", "4", env=env)
    wait_for(lambda: done_on(sharded, survivors) >= 20, timeout_s=60, message="a drain going")
    began_s, began = time.monotonic(), done_on(sharded, survivors)
    wait_for(lambda: done_on(sharded, survivors) >= 200, timeout_s=60, message="a quarter done")
    rate_before = (done_on(sharded, survivors) - began) / (time.monotonic() - began_s)
    assert statuses_on_nodes(sharded, [1])[1].get("success", 0) < per_shard / 2
    # When shard1's server dies mid-drain
    victim.fence()
    try:
        killed_s, left = time.monotonic(), 2 * per_shard - done_on(sharded, survivors)
        wait_for(lambda: done_on(sharded, survivors) == 2 * per_shard, timeout_s=120,
                 message="the other shards' tasks done")
        rate_after = left / (time.monotonic() - killed_s)
    finally:
        victim.start()
        connections["shard1"].close()  # the test's own, broken by the kill
    # Then the other shards' tasks finish at about the rate they had (the old code: 0.14x
    # here: every claim and every batch of results that took one of shard1's tasks failed)
    assert rate_after >= 0.5 * rate_before, (rate_before, rate_after)
    # and neither the worker nor the consumer gave up on the shards that answer
    worker_log = Path(worker.log_path).read_text()  # type: ignore[attr-defined]
    assert "so no task can run twice at once" not in worker_log
    # (the dead shard's consumer loop says so once, not at every try)
    consumer_log = Path(consumer.log_path).read_text()  # type: ignore[attr-defined]
    outage = [line for line in consumer_log.splitlines() if "database" in line
              and ("unavailable" in line or "cannot reach" in line)]
    assert 1 <= len(outage) <= 2, outage
    # And once shard1 is back, its tasks finish too: every task once at least, none twice at
    # the same time
    wait_for(lambda: statuses_on_nodes(sharded, [1])[1].get("success", 0) == per_shard,
             timeout_s=120, message="shard1's tasks done after its return")
    lines = [json.loads(line) for line in redis_client.lrange(key, 0, -1)]
    assert {line["task_id"] for line in lines} == set().union(*ids_on(sharded))
    assert overlapping(lines) == []


def schedule_short_on_the_live_shards(key: str, n: int) -> None:
    """`n` short demo.record tasks on each of shard0 and shard2 (shard1 is the one down)."""
    for alias in ("shard0", "shard2"):
        with transaction.atomic(using=alias):
            atf.schedule_many([{"lambda": "demo.record",
                                "payload": {"key": key, "seconds": 0.01}}] * n)


@pytest.mark.slow
@pytest.mark.drill
def test_a_worker_stops_a_dead_shards_running_tasks_and_keeps_the_others(
        sharded: Clusters, processes: Processes, redis_client: redis.Redis) -> None:
    # Given three long tasks running on shard1 and a stream of short ones on shard0 and shard2
    env = shard_env(sharded, ATF_HEARTBEAT_INTERVAL_S="2", ATF_HEARTBEAT_TIMEOUT_S="10",
                    ATF_ENQUEUE_TIMEOUT_S="5", ATF_POLL_INTERVAL_S="0.2")
    with transaction.atomic(using="shard1"):
        # (30 s on the first attempt, which shard1's death cuts short; none on the rerun)
        long = [atf.schedule("demo.record", {"key": "demo:long", "started_key": "demo:began",
                                             "seconds": 30, "retry_seconds": 0}).pk
                for _n in range(3)]
    victim = sharded.nodes[1]
    consumer = processes.start("runconsumer", env=env)
    worker = processes.start("runworker", "demo.record", "--threads", "5", env=env)
    wait_for(lambda: redis_client.llen("demo:began") == 3, timeout_s=60,
             message="the long tasks running")
    # When shard1's server dies, and short tasks keep coming to the others
    victim.fence()
    try:
        schedule_short_on_the_live_shards("demo:short", 100)
        # Then the worker stops shard1's lambdas within its heartbeat budget (two intervals,
        # and each lambda's next second), before shard1 is back, without ending the process
        log = Path(worker.log_path)  # type: ignore[attr-defined]
        wait_for(lambda: log.read_text().count("its lambda stopped") == 3, timeout_s=30,
                 message="shard1's lambdas stopped")
        assert "so no task can run twice at once" not in log.read_text()
        # and the other shards' tasks all run meanwhile, on the two threads left and the three
        # freed
        wait_for(lambda: done_on(sharded, [0, 2]) == 200, timeout_s=60,
                 message="the other shards' tasks done while shard1 is down")
    finally:
        victim.start()
        connections["shard1"].close()
    # And once shard1 is back, its tasks run again (after their heartbeat timeout) and succeed
    wait_for(lambda: statuses_on_nodes(sharded, [1])[1] == {"success": 3}, timeout_s=120,
             message="the long tasks done after shard1's return")
    assert {json.loads(line)["task_id"] for line in redis_client.lrange("demo:long", 0, -1)} \
        == set(long)
    assert "so no task can run twice at once" not in log.read_text()
    assert consumer.poll() is None


@pytest.mark.slow
@pytest.mark.drill
def test_a_remote_worker_spares_a_dead_shard_through_the_api_without_replacing_itself(
        sharded: Clusters, processes: Processes, redis_client: redis.Redis) -> None:
    # Given the API under gunicorn (its connections from a pool per shard), a consumer, and a
    # remote worker running two long tasks on shard1 and two shorter ones on shard2
    env = shard_env(sharded, ATF_HEARTBEAT_INTERVAL_S="1", ATF_HEARTBEAT_TIMEOUT_S="6",
                    ATF_ENQUEUE_TIMEOUT_S="5", ATF_POLL_INTERVAL_S="0.2")
    held = {"shard1": {"seconds": 12}, "shard2": {"seconds": 6}}
    ids = {}
    for alias, payload in held.items():
        with transaction.atomic(using=alias):
            ids[alias] = {atf.schedule("demo.record", {"key": "demo:ran", "started_key":
                                                       "demo:began", **payload}).pk
                          for _n in range(2)}
    url = start_api(processes, env)
    processes.start("runconsumer", env=env)
    host_env = {key: value for key, value in worker_env(env, worker_token()).items()
                if key != "ATF_SHARD_URLS"}  # a lambda host knows no database
    worker = processes.start("runworker", "demo.record", "--threads", "6", "--api", url,
                             env=host_env)
    wait_for(lambda: redis_client.llen("demo:began") == 4, timeout_s=60,
             message="the four tasks running")
    victim, log = sharded.nodes[1], Path(worker.log_path)  # type: ignore[attr-defined]
    # When shard1's server dies, and short tasks keep coming to shard0 and shard2
    victim.fence()
    try:
        schedule_short_on_the_live_shards("demo:ran", 50)
        # Then the worker stops shard1's two lambdas within its budget for that shard
        wait_for(lambda: log.read_text().count("its lambda stopped") == 2, timeout_s=30,
                 message="shard1's lambdas stopped")
        # and the other shards' tasks all finish meanwhile, shard2's long ones included
        wait_for(lambda: done_on(sharded, [0, 2]) == 102, timeout_s=60,
                 message="the other shards' tasks done while shard1 is down")
        # without the worker replacing itself: its heartbeats kept renewing shard2's tasks
        assert "so no task can run twice at once" not in log.read_text()
        assert worker.poll() is None
    finally:
        victim.start()
        connections["shard1"].close()
    # And once shard1 is back, its tasks run again (after their heartbeat timeout) and succeed
    wait_for(lambda: statuses_on_nodes(sharded, [1])[1] == {"success": 2}, timeout_s=120,
             message="shard1's tasks done after its return")
    lines = [json.loads(line) for line in redis_client.lrange("demo:ran", 0, -1)]
    assert {line["task_id"] for line in lines} == set().union(*ids_on(sharded))
    assert {line["task_id"] for line in lines} >= ids["shard1"] | ids["shard2"]
    assert overlapping(lines) == []
    assert "so no task can run twice at once" not in log.read_text()
    assert worker.poll() is None


# --- reads -----------------------------------------------------------------------------------


def test_lists_merge_every_shard_and_counts_add_up(sharded: Clusters, alice: Member) -> None:
    made = [alice.client.post("/api/v1/tasks/", {"lambda": alice.lam.name}, format="json")
            .json()["id"] for _n in range(12)]
    seen: list[int] = []
    page = alice.client.get("/api/v1/tasks/?page_size=5").json()
    while True:
        seen += [task["id"] for task in page["results"]]
        if not page["next"]:
            break
        page = alice.client.get(page["next"]).json()
    assert seen == sorted(made, reverse=True)
    assert alice.client.get(f"/api/v1/tasks/{made[-1]}/").json()["id"] == made[-1]
    assert stats.status_counts()["new"] == 12


def test_delivery_latency_adds_every_shards_buckets_before_its_percentiles(
        sharded: Clusters) -> None:
    # Given three first attempts 1 s late on shard1 (folded) and one 10 s late on shard2 (not)
    now = timezone.now()
    for alias, latencies in (("shard1", (1.0, 1.0, 1.0)), ("shard2", (10.0,))):
        for latency_s in latencies:
            with transaction.atomic(using=alias):
                task = atf.schedule("demo.noop")
            with shards.using(alias):
                TaskEntity.objects.filter(pk=task.pk).update(
                    status="success", attempts=1, run_at=now - timedelta(seconds=latency_s + 60),
                    started_at=now - timedelta(seconds=60), finished_at=now - timedelta(seconds=59))
    with shards.using("shard1"):
        outcomes.fold(now=now, budget_s=math.inf)
    # When the latency is read across the shards
    latency = stats.delivery_latency(since=now - timedelta(minutes=5))
    # Then all four count, and the median is the 1 s of three of them (within the buckets'
    # error), not an average of each shard's
    assert latency.count == 4
    assert latency.p50_s == pytest.approx(1.0, rel=latency_buckets.ERROR)
    assert latency.p99_s == pytest.approx(10.0 - 0.03 * 9.0, rel=latency_buckets.ERROR)


def test_atf_shards_lists_each_shard_and_fails_on_one_it_cannot_reach(
        sharded: Clusters, capsys: pytest.CaptureFixture[str]) -> None:
    with transaction.atomic(using="shard1"):
        atf.schedule("demo.noop")
    call_command("atf_shards")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SLOT", "ALIAS", "FIRST", "ID", "REACHABLE", "LIVE", "FINISHED"]
    assert [line.split() for line in lines[1:]] == [
        ["0", "shard0", "0", "yes", "0", "0"],
        ["1", "shard1", str(1 << 44), "yes", "1", "0"],
        ["2", "shard2", str(2 << 44), "yes", "0", "0"]]
    # When shard2 cannot be reached
    with unreachable("shard2"), pytest.raises(CommandError, match="unreachable: shard2"):
        call_command("atf_shards")
    assert capsys.readouterr().out.splitlines()[-1].split() == ["2", "shard2", str(2 << 44),
                                                                "no", "-", "-"]


def test_one_alias_is_the_store_as_before() -> None:
    # Without ATF_STORE_SHARDS the one database is slot 0: today's ids, today's wake-ups
    assert shards.aliases() == ("default",) and not shards.sharded()
    task = atf.schedule("demo.noop")
    assert shards.slot_of(task.pk) == 0 and shards.alias_of(task.pk) == "default"
    assert wakeup.channel() == f"{atf_settings.queue_prefix}:wakeup"
    # and an id past every slot is looked for where it cannot be, not refused with an error
    assert shards.alias_of(5 << shards.SLOT_SHIFT) == "default"


def test_the_console_shows_a_tasks_shard_and_filters_by_it(sharded: Clusters,
                                                          admin_client: Any) -> None:
    with transaction.atomic(using="shard2"):
        on_two = atf.schedule("demo.noop")
    with transaction.atomic(using="shard1"):
        on_one = atf.schedule("demo.noop")
    tasks = reverse("admin:tasks_core_taskentity_changelist")
    listed = admin_client.get(f"{tasks}?shard=shard2")
    assert listed.status_code == 200
    body = listed.content.decode()
    assert f"/taskentity/{on_two.pk}/change/" in body
    assert f"/taskentity/{on_one.pk}/change/" not in body
    assert ">shard2<" in body  # its column
    shown = admin_client.get(reverse("admin:tasks_core_taskentity_change", args=[on_one.pk]))
    assert shown.status_code == 200
    assert "shard1" in shown.content.decode()


def test_a_shard_setting_that_cannot_work_is_a_system_check_error(settings: Any) -> None:
    settings.ATF_STORE_SHARDS = ["default", "nowhere", "default"]
    assert [error.msg for error in checks.settings_errors() if error.id == "atf.E010"] == [
        "ATF_STORE_SHARDS names no database of DATABASES: nowhere",
        "ATF_STORE_SHARDS names an alias twice"]
    settings.ATF_STORE_SHARDS = ["default", *ALIASES]
    assert not [error for error in checks.settings_errors() if error.id == "atf.E010"]
    settings.DATABASE_ROUTERS = []
    assert [error.msg for error in checks.settings_errors() if error.id == "atf.E010"] == [
        "ATF_STORE_SHARDS is set without 'tasks_core.shards.Router' in DATABASE_ROUTERS"]
