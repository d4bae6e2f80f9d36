"""A worker and a consumer while their Redis is down: one warning when the outage starts (not
one per failed try, several a second), and one line when Redis is back. On a private
redis-server, stopped and started again on its port."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from tasks_core import atf, lambda_sync
from tasks_core.conf import atf_settings
from tasks_core.queues.redis import RedisQueue
from tests.chaos.services import PrivateRedis
from tests.conftest import wait_for
from tests.ports import free_port
from workers.consumer import Consumer
from workers.transport import DirectTransport
from workers.worker import WorkerProcess

pytestmark = [pytest.mark.django_db(transaction=True)]

#: How long the test watches the log while Redis is down: many failed tries at the test's
#: retry delay (one per controller, or per pass, each ATF_RESTART_DELAY_S).
WINDOW_S = 1.0


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fast_retries(settings: Any) -> None:
    settings.ATF_RESTART_DELAY_S = 0.05


def _warnings(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == logger and record.levelno >= logging.WARNING]


@pytest.mark.usefixtures("fast_retries")
def test_a_worker_says_once_that_redis_is_down_and_once_that_it_is_back(
        private_redis: PrivateRedis, caplog: pytest.LogCaptureFixture) -> None:
    # Given a worker claiming from a Redis of its own
    lambda_sync.sync_to_store()
    queue = RedisQueue(private_redis.url, atf_settings.queue_prefix)
    worker = WorkerProcess(["demo.noop"], threads=1, transport=DirectTransport(queue))
    running = threading.Thread(target=worker.run)
    caplog.set_level(logging.INFO, logger="workers")
    running.start()
    try:
        wait_for(lambda: worker.transport.worker is not None, message="the worker to start")
        # When Redis stops, and the worker's claims fail for a while
        private_redis.stop()
        wait_for(lambda: _warnings(caplog, "workers.controller"), message="a warning")
        time.sleep(WINDOW_S)  # the window whose warnings are counted
        # Then it said so once
        down = _warnings(caplog, "workers.controller")
        assert len(down) == 1, down
        assert down[0].startswith("cannot claim tasks: redis pop failed")
        # When Redis is back, Then it says so once
        private_redis.start()
        wait_for(lambda: len(_warnings(caplog, "workers.controller")) == 2,
                 message="the line that claims work again")
        assert re.fullmatch(r"can claim tasks again, after \d+ s",
                            _warnings(caplog, "workers.controller")[1])
    finally:
        worker.stop()
        running.join(timeout=30)
        queue.close()


@pytest.mark.usefixtures("fast_retries")
def test_a_consumer_says_once_that_redis_is_down_and_once_that_it_is_back(
        private_redis: PrivateRedis, caplog: pytest.LogCaptureFixture) -> None:
    # Given a consumer pushing to a Redis of its own, and a due task
    lambda_sync.sync_to_store()
    queue = RedisQueue(private_redis.url, atf_settings.queue_prefix)
    later = timezone.now()
    consumer = Consumer(batch_size=100, poll_interval_s=0.1, queue=queue, clock=lambda: later)
    atf.schedule("demo.noop")
    caplog.set_level(logging.INFO, logger="workers")
    try:
        # When Redis stops and passes fail to push the task, again and again
        private_redis.stop()
        for _ in range(5):
            later += timedelta(seconds=1)  # the task is due again after each failed push
            assert consumer.run_pass().push_failed == 1
        # Then the consumer said so once
        down = _warnings(caplog, "workers.consumer")
        assert len(down) == 1, down
        assert down[0].startswith("cannot push tasks to the queues: redis push to ")
        # When Redis is back and a pass pushes the task, Then it says so once
        private_redis.start()
        later += timedelta(seconds=1)
        assert consumer.run_pass().push_failed == 0
        assert queue.depth(queue.queue_name("demo.noop", "default")) == 1
        back = _warnings(caplog, "workers.consumer")[1:]
        assert len(back) == 1 and re.fullmatch(
            r"can push tasks to the queues again, after \d+ s", back[0]), back
    finally:
        queue.close()
