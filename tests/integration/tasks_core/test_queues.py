"""The queue contract, run against Redis, a 3-node Redis Cluster and SQS (moto's server mode).

Each test gets a fresh queue prefix, so tests never see each other's messages, and the
servers the tests start (cluster, moto) live for the whole session.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from django.conf import settings
from pytest_django.fixtures import Settings

from tasks_core import queues
from tasks_core.conf import atf_settings
from tasks_core.exceptions import ConfigurationError, QueueUnavailable
from tasks_core.queues import Message, Popped, QueueBackend
from tasks_core.queues.redis import RedisQueue
from tasks_core.queues.sqs import SqsQueue, sqs_queue_name
from tests import queue_servers
from tests.conftest import wait_for
from tests.ports import free_port

BACKENDS = ["redis", "redis-cluster", "sqs"]


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with queue_servers.redis_cluster(tmp_path_factory.mktemp("redis-cluster")) as url:
        yield url


@pytest.fixture(scope="session")
def sqs_endpoint_url() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in queue_servers.DUMMY_AWS_ENV.items():
            patch.setenv(name, value)
        with queue_servers.moto_sqs() as endpoint_url:
            yield endpoint_url


@pytest.fixture
def prefix() -> str:
    return f"{atf_settings.queue_prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, prefix: str) -> Iterator[QueueBackend]:
    if request.param == "redis":
        request.getfixturevalue("redis_client")  # pings, and flushes our database around the test
        queue: QueueBackend = RedisQueue(settings.REDIS_URL, prefix)
    elif request.param == "redis-cluster":
        queue = RedisQueue(request.getfixturevalue("redis_cluster_url"), prefix, cluster=True)
    else:
        queue = SqsQueue(prefix=prefix, endpoint_url=request.getfixturevalue("sqs_endpoint_url"),
                         region="us-east-1")
    yield queue
    queue.close()


def messages(*task_ids: int, lease: int = 1) -> list[Message]:
    return [Message(task_id=task_id, lease=lease) for task_id in task_ids]


def ids(popped: list[Popped]) -> list[int]:
    return [p.message.task_id for p in popped if p.message is not None]


def pop_all(backend: QueueBackend, queue_names: list[str], count: int) -> list[Popped]:
    """Pop until `count` messages came back (SQS may hand out fewer than asked per call)."""
    popped: list[Popped] = []

    def more() -> bool:
        popped.extend(backend.pop(queue_names, max_count=count - len(popped), wait_s=0.5))
        return len(popped) >= count

    wait_for(more, timeout_s=15, message=f"{count} messages from {queue_names}")
    return popped


def push_raw(backend: QueueBackend, queue: str, body: str) -> None:
    """Put a body that is not an ATF message on a queue, the way a stranger would."""
    if isinstance(backend, SqsQueue):
        backend.client.send_message(QueueUrl=backend.url(queue), MessageBody=body)
    else:
        assert isinstance(backend, RedisQueue)
        backend.client.lpush(queue, body)


def test_push_then_pop_returns_the_messages(backend: QueueBackend) -> None:
    # Given 25 messages pushed in one call (more than one SQS batch)
    queue = backend.queue_name("demo.noop", "default")
    backend.push(queue, messages(*range(1, 26), lease=3))
    # When they are popped
    popped = pop_all(backend, [queue], 25)
    # Then each comes back once, from that queue, with its lease and raw body
    assert sorted(ids(popped)) == list(range(1, 26))
    assert {p.queue for p in popped} == {queue}
    assert all(p.message is not None and p.message.lease == 3 for p in popped)
    assert all(p.raw == p.message.encode() for p in popped if p.message is not None)
    assert backend.pop([queue], max_count=10, wait_s=0) == []


def test_pop_takes_priorities_strictly_in_order(backend: QueueBackend) -> None:
    # Given messages in every priority of one lambda, the low ones pushed first
    high, default, low = (backend.queue_name("demo.noop", p) for p in ("high", "default", "low"))
    backend.push(low, messages(31, 32))
    backend.push(default, messages(21, 22))
    backend.push(high, messages(11, 12))
    order = [high, default, low]
    # When a worker pops three times across the lambda's queues in priority order
    first, second, third = (pop_all(backend, order, 2) for _ in range(3))
    # Then each pop empties one priority, highest first, and never mixes priorities
    assert (sorted(ids(first)), sorted(ids(second)), sorted(ids(third))) == (
        [11, 12], [21, 22], [31, 32])
    assert [{p.queue for p in batch} for batch in (first, second, third)] == [
        {high}, {default}, {low}]


def test_pop_spans_several_lambdas_in_list_order(backend: QueueBackend) -> None:
    # Given two lambdas (two hash slots on a cluster), with work only in the later queues
    a_high, a_low = backend.queue_name("demo.a", "high"), backend.queue_name("demo.a", "low")
    b_high = backend.queue_name("demo.b", "high")
    backend.push(b_high, messages(2))
    backend.push(a_low, messages(1))
    # When a worker serving both pops in the order it was given
    popped = [pop_all(backend, [a_high, b_high, a_low], 1) for _ in range(2)]
    # Then it gets B's high message before A's low one
    assert [ids(batch) for batch in popped] == [[2], [1]]


def test_pop_respects_max_count(backend: QueueBackend) -> None:
    # Given five waiting messages
    queue = backend.queue_name("demo.noop", "default")
    backend.push(queue, messages(1, 2, 3, 4, 5))
    # When a worker asks for at most two, and for none
    popped = backend.pop([queue], max_count=2, wait_s=1)
    none = backend.pop([queue], max_count=0, wait_s=1)
    # Then it gets one or two, then nothing, and the rest stay queued
    assert 1 <= len(popped) <= 2
    assert none == []
    assert len(pop_all(backend, [queue], 5 - len(popped))) == 5 - len(popped)


def test_each_shard_has_its_queues_where_the_backend_splits_them(backend: QueueBackend,
                                                                  prefix: str) -> None:
    # Given a <lambda, priority> of a store with three shards
    queues = backend.shard_queues("demo.noop", "default", 3)
    # Then slot 0's queue is the one a store of one shard has always had
    assert queues[0] == backend.queue_name("demo.noop", "default") == (
        f"{prefix}:{{demo.noop}}:default")
    if not backend.splits_by_shard:  # SQS: every shard's tasks in the one queue
        assert queues == [queues[0]]
        return
    # And each other shard's is its own, beside it (one hash slot: popped in one command)
    assert queues[1:] == [f"{queues[0]}:shard1", f"{queues[0]}:shard2"]
    backend.push(queues[2], messages(7))
    backend.push(queues[1], messages(8))
    assert ids(pop_all(backend, queues, 1)) == [8]
    assert [backend.depth(queue) for queue in queues] == [0, 0, 1]


def test_the_depths_of_several_queues_come_in_their_order(backend: QueueBackend) -> None:
    # Given three queues (of two lambdas, on a cluster in two hash slots) holding 2, 0 and 1
    queues = [backend.queue_name("demo.noop", "high"), backend.queue_name("demo.noop", "low"),
              backend.queue_name("demo.record", "high")]
    backend.push(queues[0], messages(1, 2))
    backend.push(queues[2], messages(3))
    # Then one call reads each (as depth does), and none for no queue
    assert backend.depths(queues) == [backend.depth(queue) for queue in queues] == [2, 0, 1]
    assert backend.depths([]) == []


def test_pop_on_empty_queues_returns_nothing_after_the_wait(backend: QueueBackend) -> None:
    # Given empty queues of two lambdas
    names = [backend.queue_name("demo.a", "high"), backend.queue_name("demo.b", "high")]
    # When a worker pops with a short wait, and with none
    started = time.monotonic()
    waited = backend.pop(names, max_count=10, wait_s=1.2)
    elapsed_s = time.monotonic() - started
    # Then both come back empty, the first one after about its wait
    assert waited == []
    assert backend.pop(names, max_count=10, wait_s=0) == []
    assert 1.0 <= elapsed_s < 5.0


def test_blocked_pop_wakes_up_for_a_new_message(backend: QueueBackend) -> None:
    # Given a worker blocked on the queues of two lambdas
    names = [backend.queue_name("demo.a", "high"), backend.queue_name("demo.b", "high")]
    backend.pop(names, max_count=1, wait_s=0)  # creates the SQS queues before the clock runs
    result: list[list[Popped]] = []
    worker = threading.Thread(
        target=lambda: result.append(backend.pop(names, max_count=1, wait_s=15)), daemon=True
    )
    started = time.monotonic()
    worker.start()
    # When a message arrives on the second lambda's queue
    backend.push(names[1], messages(9))
    # Then the pop returns it long before its wait is over
    worker.join(timeout=15)
    assert [ids(popped) for popped in result] == [[9]]
    assert time.monotonic() - started < 5.0


def test_depth_counts_waiting_messages(backend: QueueBackend) -> None:
    # Given three messages in one queue and none in another
    queue, other = backend.queue_name("demo.noop", "high"), backend.queue_name("demo.noop", "low")
    backend.push(queue, messages(1, 2, 3))
    # When one is popped
    pop_all(backend, [queue], 1)
    # Then depth counts the two still waiting
    assert backend.depth(queue) == 2
    assert backend.depth(other) == 0


def test_purge_empties_a_queue(backend: QueueBackend) -> None:
    # Given messages in two queues
    queue, other = backend.queue_name("demo.noop", "high"), backend.queue_name("demo.noop", "low")
    backend.push(queue, messages(1, 2, 3))
    backend.push(other, messages(4))
    # When one queue is purged
    backend.purge(queue)
    # Then it is empty and the other is untouched
    assert backend.depth(queue) == 0
    assert backend.pop([queue], max_count=10, wait_s=0) == []
    assert backend.depth(other) == 1


def test_a_message_still_waiting_is_not_pushed_again(backend: QueueBackend) -> None:
    # Given three messages waiting in a queue
    queue = backend.queue_name("demo.noop", "default")
    backend.push(queue, messages(1, 2, 3))
    # When the same three are pushed again, twice (tasks re-enqueued after their timeout)
    backend.push(queue, messages(1, 2, 3))
    backend.push(queue, messages(3, 2, 1, 1))
    # Then Redis holds one copy of each; SQS, which cannot tell, holds every copy
    assert backend.supports_dedupe is not isinstance(backend, SqsQueue)
    expected = 3 if backend.supports_dedupe else 10
    wait_for(lambda: backend.depth(queue) == expected, timeout_s=5,
             message=f"{expected} messages in {queue}")
    assert sorted(ids(pop_all(backend, [queue], expected))) == sorted(
        [1, 2, 3] if backend.supports_dedupe else [1, 2, 3] * 3 + [1])


def test_a_popped_or_new_lease_message_is_pushed_again(backend: QueueBackend) -> None:
    if not backend.supports_dedupe:
        pytest.skip("SQS pushes every copy")
    # Given tasks 1 to 3 pushed, and task 1's message popped (the oldest)
    queue = backend.queue_name("demo.noop", "default")
    backend.push(queue, messages(1, 2, 3))
    assert ids(pop_all(backend, [queue], 1)) == [1]
    # When all three are pushed again, with task 4 and a new lease of task 2
    backend.push(queue, messages(1, 2, 3, 4) + messages(2, lease=2))
    # Then the popped one, the new one and the new lease go in; 2 and 3 stay one copy each
    popped = pop_all(backend, [queue], 5)
    assert [(p.message.task_id, p.message.lease) for p in popped if p.message] == [
        (2, 1), (3, 1), (1, 1), (4, 1), (2, 2)]
    assert backend.depth(queue) == 0


@pytest.mark.parametrize("loss", ["flushdb", "list deleted"])
def test_a_message_lost_from_redis_is_pushed_again(loss: str, backend: QueueBackend) -> None:
    if not isinstance(backend, RedisQueue):
        pytest.skip("Redis's own ways of losing a list")
    if loss == "flushdb" and backend.cluster:
        pytest.skip("FLUSHDB is one node's; the cluster case is the list deleted")
    # Given two messages waiting
    queue = backend.queue_name("demo.noop", "default")
    backend.push(queue, messages(1, 2))
    # When Redis loses them: the database flushed, or only the list gone (its markers kept)
    if loss == "flushdb":
        backend.client.flushdb()
    else:
        backend.client.delete(queue)
    # Then pushing them again puts both back, once each, and only once
    backend.push(queue, messages(1, 2))
    backend.push(queue, messages(1, 2))
    assert backend.depth(queue) == 2
    assert ids(pop_all(backend, [queue], 2)) == [1, 2]


def test_unreadable_body_comes_back_without_a_message(backend: QueueBackend) -> None:
    # Given a body that is not an ATF message
    queue = backend.queue_name("demo.noop", "default")
    push_raw(backend, queue, "not json {")
    # When it is popped
    popped = pop_all(backend, [queue], 1)
    # Then it comes back as raw text without a message, and is gone from the queue
    assert popped == [Popped(queue=queue, message=None, raw="not json {")]
    assert backend.depth(queue) == 0
    assert backend.pop([queue], max_count=10, wait_s=0) == []


def test_sqs_acked_messages_do_not_come_back(sqs_endpoint_url: str, prefix: str) -> None:
    # Given two messages popped from SQS with a one-second visibility timeout
    backend = SqsQueue(prefix=prefix, endpoint_url=sqs_endpoint_url, region="us-east-1",
                       visibility_timeout_s=1)
    queue = backend.queue_name("demo.noop", "default")
    backend.push(queue, messages(1, 2))
    popped = pop_all(backend, [queue], 2)
    assert all(p.message is not None and p.message.receipt for p in popped)
    # When only task 1 is acknowledged
    backend.ack(queue, [p.message for p in popped if p.message and p.message.task_id == 1])
    # Then task 2 comes back after the timeout, and task 1 never does
    back = pop_all(backend, [queue], 1)
    assert ids(back) == [2]
    backend.ack(queue, [p.message for p in back if p.message is not None])
    assert backend.pop([queue], max_count=10, wait_s=2) == []
    backend.close()


def test_redis_ack_is_not_needed(backend: QueueBackend) -> None:
    # Given a popped message
    queue = backend.queue_name("demo.noop", "default")
    backend.push(queue, messages(1))
    popped = pop_all(backend, [queue], 1)
    # When it is acknowledged (a no-op where the pop removed it already)
    backend.ack(queue, [p.message for p in popped if p.message is not None])
    # Then the queue is empty either way
    assert backend.supports_ack is isinstance(backend, SqsQueue)
    assert backend.depth(queue) == 0


def closed_port_url() -> str:
    return f"127.0.0.1:{free_port()}"


UNREACHABLE: dict[str, Callable[[], QueueBackend]] = {
    "redis": lambda: RedisQueue(f"redis://{closed_port_url()}/0", "atf"),
    "redis-cluster": lambda: RedisQueue(f"redis://{closed_port_url()}/0", "atf", cluster=True),
    "sqs": lambda: SqsQueue(prefix="atf", endpoint_url=f"http://{closed_port_url()}",
                            region="us-east-1"),
}


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("operation", ["ping", "push", "pop", "depth", "purge"])
def test_unreachable_server_raises_queue_unavailable(
    kind: str, operation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a backend pointed at a port nobody listens on
    for name, value in queue_servers.DUMMY_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    backend = UNREACHABLE[kind]()
    queue = backend.queue_name("demo.noop", "high")
    calls: dict[str, Callable[[], object]] = {
        "ping": backend.ping,
        "push": lambda: backend.push(queue, messages(1)),
        "pop": lambda: backend.pop([queue], max_count=1, wait_s=0.1),
        "depth": lambda: backend.depth(queue),
        "purge": lambda: backend.purge(queue),
    }
    # When it is used, then it raises our error, caused by the client's
    with pytest.raises(QueueUnavailable) as raised:
        calls[operation]()
    assert raised.value.__cause__ is not None
    backend.close()


def test_unknown_backend_is_a_configuration_error(settings: Settings) -> None:
    # Given a backend name ATF does not know
    settings.ATF_QUEUE_BACKEND = "rabbitmq"
    # When the queues are opened, then the error names the value and the choices
    with pytest.raises(ConfigurationError, match=r"ATF_QUEUE_BACKEND 'rabbitmq'.*'redis' or 'sqs'"):
        queues.backend()


def test_settings_pick_the_backend(settings: Settings, redis_cluster_url: str) -> None:
    # Given SQS, then Redis Cluster, then plain Redis in the settings
    settings.ATF_QUEUE_BACKEND, settings.ATF_SQS_VISIBILITY_TIMEOUT_S = "sqs", 7
    sqs = queues.backend()
    settings.ATF_QUEUE_BACKEND, settings.ATF_REDIS_CLUSTER = "redis", True
    settings.ATF_REDIS_URL = redis_cluster_url
    cluster = queues.backend()
    settings.ATF_REDIS_CLUSTER = False
    plain = queues.backend()
    # Then each is the right class, configured from the settings
    assert isinstance(sqs, SqsQueue) and sqs.visibility_timeout_s == 7
    assert isinstance(cluster, RedisQueue) and isinstance(cluster.client, redis.RedisCluster)
    assert isinstance(plain, RedisQueue) and type(plain.client) is redis.Redis
    for backend in (sqs, cluster, plain):
        backend.close()


@pytest.mark.parametrize("queue", [
    "atf:{demo.noop}:high",
    "atf:{billing.send_invoice}:default",
    "x" * 200 + ":{a}:low",
])
def test_sqs_queue_names_are_valid_and_stable(queue: str) -> None:
    # When an ATF queue name is mapped to an SQS name
    name = sqs_queue_name(queue)
    # Then it is a valid SQS name, the same every time, and keeps similar names apart
    assert len(name) <= 80
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    assert name == sqs_queue_name(queue)
    assert name != sqs_queue_name(queue.replace(":", "_"))
