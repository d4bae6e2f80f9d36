"""Bad input on the queue, worker and store side: a clear error each time, no lost or stuck task.

Tasks go through the real pipeline in process: the consumer's pass pushes to Redis, the
controller pops and claims, an executor runs the lambda and records the outcome. Test-only
lambdas are registered here, not in demo/lambdas.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from tasks_core import atf, directory, lambda_sync, registry, store
from tasks_core.claiming import Claimer
from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidTask
from tasks_core.gating import Decision
from tasks_core.models import TaskEntity
from tasks_core.queues import Message, QueueBackend
from tests.conftest import wait_for
from tests.integration.tasks_api.test_api_support import Member, member
from workers.batching import BatchWriterThread
from workers.buffer import WorkBuffer
from workers.consumer import Consumer
from workers.executor import ExecutorThread, result_writer
from workers.heartbeat import HeartbeatThread
from workers.results import Tally
from workers.transport import DirectTransport

# Results are written by the real result-writer thread, so tests commit for real.
pytestmark = [pytest.mark.django_db(transaction=True)]

#: Test-only lambdas whose return value cannot be stored, and the error each attempt ends with.
ODD_RESULTS: dict[str, tuple[Callable[[], Any], str]] = {
    "tests.bad_input.returns_set": (lambda: {1, 2}, "ResultNotJSON"),
    "tests.bad_input.returns_nan": (lambda: {"ratio": float("nan")}, "ResultNotJSON"),
    "tests.bad_input.returns_object": (lambda: object(), "ResultNotJSON"),
    "tests.bad_input.returns_bytes": (lambda: b"\xff\xfe", "ResultNotJSON"),
    "tests.bad_input.returns_too_much": (
        lambda: payload_of_size(atf_settings.max_result_bytes + 1), "ResultTooLarge"),
}


@pytest.fixture
def odd_lambdas() -> Iterator[list[str]]:
    """Test-only lambdas whose return value cannot be stored."""
    for name, (value, _error) in ODD_RESULTS.items():
        def returns(ctx: atf.TaskContext, payload: Any, value: Any = value) -> Any:
            return value()

        registry.register(name, team=settings.ATF_DEMO_TEAM, max_attempts=3)(returns)
    lambda_sync.sync_to_store()
    yield list(ODD_RESULTS)
    for name in ODD_RESULTS:
        registry.unregister(name)
    lambda_sync.sync_to_store()


@dataclass
class Pipeline:
    """One consumer, one claimer and one executor of the real code, driven step by step."""

    queue: QueueBackend
    consumer: Consumer
    claimer: Claimer
    executor: ExecutorThread
    buffer: WorkBuffer
    results: BatchWriterThread

    def deliver(self) -> list[store.ClaimedTask]:
        """One consumer pass, then pop and claim what it pushed; the claimed tasks."""
        self.consumer.run_pass()
        self.buffer.put(self.claimer.take(100, wait_s=0.2))
        claimed = []
        while (task := self.buffer.take(timeout_s=0)) is not None:
            claimed.append(task)
        return claimed

    def watch(self, *names: str) -> None:
        """Let the claimer take these lambdas' queues too (lambdas registered by a test)."""
        self.claimer = Claimer(
            queue=self.queue, worker_id=self.claimer.worker_id,
            lambda_ids={**self.claimer.lambda_ids,
                        **{name: directory.by_name(name).id for name in names}},
            priorities=atf_settings.priorities, start=True,
        )

    def run(self) -> list[store.ClaimedTask]:
        """Deliver and execute until nothing more is due (a pop takes one queue at a time)."""
        done: list[store.ClaimedTask] = []
        while claimed := self.deliver():
            for task in claimed:
                self.execute(task)
            done.extend(claimed)
        return done

    def execute(self, task: store.ClaimedTask) -> None:
        """Run one task on the executor; its result is written behind it: wait until durable."""
        self.executor.execute(task)
        wait_for(lambda: self.buffer.running_count() == 0, message="the result written")


@pytest.fixture
def pipeline(queue: QueueBackend) -> Iterator[Pipeline]:
    lambda_sync.sync_to_store()
    buffer = WorkBuffer(priorities=atf_settings.priorities, executors=100)
    transport = DirectTransport(queue)
    heartbeat = HeartbeatThread(buffer=buffer, interval_s=1.0, transport=transport)
    claimer = Claimer(
        queue=queue, worker_id="tests:1:bad",
        lambda_ids={name: directory.by_name(name).id for name in registry.names()},
        priorities=atf_settings.priorities, start=True,
    )
    results = result_writer(transport)
    results.start()
    executor = ExecutorThread(index=0, buffer=buffer, heartbeat=heartbeat,
                              worker_id="tests:1:bad", results=results, tally=Tally())
    consumer = Consumer(batch_size=500, poll_interval_s=0.1, queue=queue)
    yield Pipeline(queue=queue, consumer=consumer, claimer=claimer, executor=executor,
                   buffer=buffer, results=results)
    results.stop()
    transport.let_go()
    results.join(10)


def status(task_id: int) -> str:
    return TaskEntity.objects.values_list("status", flat=True).get(pk=task_id)


def payload_of_size(size: int) -> dict[str, str]:
    """A payload whose compact JSON text is exactly `size` bytes."""
    overhead = len(json.dumps({"x": ""}, separators=(",", ":")))
    return {"x": "a" * (size - overhead)}


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# --- payload size and shape ----------------------------------------------------------------


def test_a_payload_at_the_size_limit_is_accepted_and_runs(pipeline: Pipeline) -> None:
    # Given a payload exactly as large as the limit
    limit = atf_settings.max_payload_bytes
    task = atf.schedule("demo.noop", payload_of_size(limit))
    # When the pipeline delivers and runs it
    claimed = pipeline.run()
    # Then it is claimed with its payload intact and succeeds
    assert [c.task_id for c in claimed] == [task.pk]
    assert len(json.dumps(claimed[0].payload, separators=(",", ":"))) == limit
    assert status(task.pk) == "success"


def test_a_payload_one_byte_over_the_limit_is_refused_naming_both_sizes() -> None:
    # Given a payload one byte over the limit
    limit = atf_settings.max_payload_bytes
    # When it is scheduled
    with pytest.raises(InvalidTask) as caught:
        atf.schedule("demo.noop", payload_of_size(limit + 1))
    # Then the error names the payload, its size and the limit, and no task exists
    assert caught.value.errors["payload"] == [
        f"Payload is {limit + 1} bytes; the limit is {limit}."
    ]
    assert not TaskEntity.objects.exists()


def test_a_huge_payload_is_refused_without_storing_anything() -> None:
    # When a payload of ten times the limit is scheduled in a batch with a good task
    huge = payload_of_size(10 * atf_settings.max_payload_bytes)
    calls = [{"lambda": "demo.noop", "payload": {}}, {"lambda": "demo.noop", "payload": huge}]
    with pytest.raises(InvalidTask) as caught:
        atf.schedule_many(calls)
    # Then the whole batch is refused, naming the bad item
    assert list(caught.value.errors) == ["tasks[1].payload"]
    assert not TaskEntity.objects.exists()


def test_a_deeply_nested_payload_is_refused_clearly() -> None:
    # When a payload nested far deeper than any JSON parser allows is scheduled
    with pytest.raises(InvalidTask) as caught:
        atf.schedule("demo.noop", nested(100_000))
    # Then it is refused as too deeply nested, and nothing is stored
    assert caught.value.errors["payload"] == ["Payload is nested too deeply."]
    assert not TaskEntity.objects.exists()


def test_a_nested_payload_within_reach_runs(pipeline: Pipeline) -> None:
    # Given a payload nested as deep as ATF_MAX_PAYLOAD_DEPTH allows
    task = atf.schedule("demo.noop", nested(atf_settings.max_payload_depth - 1))
    # When the pipeline runs it
    pipeline.run()
    # Then it succeeds
    assert status(task.pk) == "success"


def test_every_nesting_depth_is_either_refused_clearly_or_stored_and_run(
    pipeline: Pipeline
) -> None:
    # Given payloads nested from deeper than any parser allows down to shallow ones
    accepted = None
    for depth in range(1000, 0, -1):
        # When each is scheduled until one is accepted
        try:
            accepted = atf.schedule("demo.noop", nested(depth))
            break
        except InvalidTask as exc:
            # Then each refused one is refused as too deeply nested...
            assert exc.errors["payload"] == ["Payload is nested too deeply."]
    # ...and the deepest accepted one is stored and runs to success
    assert accepted is not None
    pipeline.run()
    assert status(accepted.pk) == "success"


@pytest.mark.parametrize("payload", [{"k\u0000": 1}, "\ud800", ["a", {"b": "\u0000"}]])
def test_text_the_database_cannot_store_is_refused_by_schedule(payload: object) -> None:
    # When Python code schedules a payload whose text PostgreSQL cannot store
    with pytest.raises(InvalidTask) as caught:
        atf.schedule("demo.noop", payload)
    # Then scheduling refuses it with a field error (not a database error), storing nothing
    assert caught.value.errors == {"payload": [
        "Strings may not contain NUL (\\u0000) characters or lone surrogates."]}
    assert not TaskEntity.objects.exists()


def test_a_huge_batch_is_refused_whole() -> None:
    # When a batch one over the limit is scheduled
    calls = [{"lambda": "demo.noop"}] * (atf_settings.max_batch_size + 1)
    with pytest.raises(InvalidTask) as caught:
        atf.schedule_many(calls)
    # Then nothing is created and the error says the limit
    assert caught.value.errors == {
        "tasks": [f"At most {atf_settings.max_batch_size} tasks per batch; got {len(calls)}."]
    }
    assert not TaskEntity.objects.exists()


def test_a_payload_that_is_not_json_is_refused() -> None:
    with pytest.raises(InvalidTask) as caught:
        atf.schedule("demo.noop", {"when": timezone.now(), "ratio": float("inf")})
    assert caught.value.errors["payload"][0].startswith("Payload must be JSON")


# --- queues and workers --------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    b"\xff\xfe\x00 not utf-8",
    b"not json at all",
    b'{"id": "7", "lease": 1}',
    b'{"id": 7}',
    b"[1, 2, 3]",
    b"",
])
def test_a_corrupted_message_is_discarded_and_the_good_ones_run(
    pipeline: Pipeline, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a corrupted message in a worker's queue, ahead of a real one
    task = atf.schedule("demo.noop", {"n": 1})
    queue_name = pipeline.queue.queue_name("demo.noop", "default")
    pipeline.queue.client.lpush(queue_name, body)
    # When the pipeline delivers and runs what is due
    with caplog.at_level(logging.WARNING, logger="workers.controller"):
        pipeline.run()
    # Then the corrupted message is logged and dropped, and the real task succeeds
    assert "discarded a message that is not ATF's" in caplog.text
    assert status(task.pk) == "success"
    assert pipeline.queue.depth(queue_name) == 0


def test_a_message_for_another_lambdas_task_is_not_claimed_and_the_task_is_not_lost(
    pipeline: Pipeline, queue: QueueBackend
) -> None:
    # Given a task of demo.sleep whose message sits in demo.noop's queue instead of its own
    task = atf.schedule("demo.sleep", {"seconds": 0})
    batch = store.enqueue_due(directory.by_name("demo.sleep").id, limit=10, now=timezone.now(),
                              skip_collections=[], decide=lambda _collection: Decision.ENQUEUE)
    (_priority, message), = batch.messages
    queue.push(queue.queue_name("demo.noop", "default"), [message])
    # When a worker that runs only demo.noop pops it
    noop_only = Claimer(queue=queue, worker_id="tests:2:noop",
                        lambda_ids={"demo.noop": directory.by_name("demo.noop").id},
                        priorities=atf_settings.priorities)
    pipeline.buffer.put(noop_only.take(10, wait_s=0.1))
    # Then it does not claim it: the task stays enqueued for its own workers
    assert pipeline.buffer.take(timeout_s=0) is None
    assert status(task.pk) == "enqueued"
    # And once the enqueue timeout passes, the consumer enqueues it again in its own queue
    later = timezone.now() + timedelta(seconds=atf_settings.enqueue_timeout_s + 1)
    pipeline.consumer.clock = lambda: later
    pipeline.run()
    assert status(task.pk) == "success"


def test_a_message_for_a_task_that_no_longer_exists_is_dropped(pipeline: Pipeline,
                                                               queue: QueueBackend) -> None:
    # Given a well-formed message whose task was deleted
    queue.push(queue.queue_name("demo.noop", "default"), [Message(task_id=987654, lease=1)])
    task = atf.schedule("demo.noop")
    # When the pipeline runs
    pipeline.run()
    # Then nothing is claimed for it, and the real task still runs
    assert status(task.pk) == "success"
    assert queue.depth(queue.queue_name("demo.noop", "default")) == 0


def test_a_worker_for_an_unknown_lambda_refuses_to_start() -> None:
    with pytest.raises(CommandError,
                       match=r"lambda no\.such\.lambda is not registered; registered:"):
        call_command("runworker", "no.such.lambda")


def test_a_lambda_the_code_no_longer_has_fails_retriably_with_its_name(pipeline: Pipeline) -> None:
    # Given a task of a lambda that was registered when scheduled but is gone from the code
    registry.register("tests.bad_input.vanishing", team=settings.ATF_DEMO_TEAM)(
        lambda ctx, payload: {})
    lambda_sync.sync_to_store()
    try:
        task = atf.schedule("tests.bad_input.vanishing")
        pipeline.watch("tests.bad_input.vanishing")
        claimed = pipeline.deliver()
    finally:
        registry.unregister("tests.bad_input.vanishing")
    # When an executor runs it
    pipeline.execute(claimed[0])
    # Then the attempt fails retriably, saying which lambda is unknown (another worker may have it)
    row = TaskEntity.objects.get(pk=task.pk)
    assert row.status == "retrying"
    assert row.last_error["type"] == "LambdaNotFound"
    assert "tests.bad_input.vanishing" in row.last_error["message"]


def test_a_lambda_returning_something_that_cannot_be_stored_fails_clearly(
    pipeline: Pipeline, odd_lambdas: list[str]
) -> None:
    # Given one task per lambda whose result is not JSON, or over ATF_MAX_RESULT_BYTES
    tasks = {name: atf.schedule(name) for name in odd_lambdas}
    pipeline.watch(*odd_lambdas)
    # When the pipeline runs them
    pipeline.run()
    # Then each ends fatal_failure (retrying would not help) with an error that says why
    for name, task in tasks.items():
        row = TaskEntity.objects.get(pk=task.pk)
        assert (row.status, row.result) == ("fatal_failure", None)
        assert row.last_error["type"] == ODD_RESULTS[name][1]
        assert row.last_error["message"]


# --- the API, where bad bytes first arrive --------------------------------------------------


@pytest.fixture
def demo_member() -> Member:
    return member(settings.ATF_DEMO_TEAM, lambda_name="demo.noop")


@pytest.mark.parametrize("body", [
    b'{"lambda": "demo.noop", "payload": {"s": "\xff\xfe"}}',
    b'{"lambda": "demo.noop", "payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"lambda": "demo.noop", "payload": NaN}',
    b'{"lambda": "demo.noop"',
])
def test_the_api_answers_bad_bodies_with_400_json(demo_member: Member, body: bytes) -> None:
    # When a body that is not valid UTF-8 / JSON, or nests absurdly deep, is posted
    response = demo_member.client.generic("POST", "/api/v1/tasks/", body,
                                          content_type="application/json")
    # Then the answer is a JSON 400 saying why, and no task exists
    assert response.status_code == 400
    assert "detail" in response.json()
    assert not TaskEntity.objects.exists()


def test_the_api_refuses_a_batch_body_over_the_upload_limit(demo_member: Member) -> None:
    # Given a batch body larger than the request limit
    item = {"lambda": "demo.noop", "payload": payload_of_size(200_000)}
    body = json.dumps({"tasks": [item] * 100}).encode()
    assert len(body) > (settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0)
    # When it is posted
    response = demo_member.client.generic("POST", "/api/v1/tasks/batch/", body,
                                          content_type="application/json")
    # Then it is refused with a JSON error, and nothing is created
    assert response.status_code in (400, 413)
    assert "detail" in response.json()
    assert not TaskEntity.objects.exists()


def test_a_worker_for_a_malformed_lambda_name_says_so_in_one_line() -> None:
    with pytest.raises(CommandError, match=r"^'billing/send invoice' is not a lambda name: use "
                                           r"1 to 200 ASCII letters, digits and _ - \. :\.$"):
        call_command("runworker", "billing/send invoice")
