"""Taking tasks for a worker: pop its lambdas' queues, claim the popped tasks, ack them.

A direct worker's controller does this itself; the worker API does it for remote workers, which
reach neither the store nor the queues.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from django.utils import timezone

from tasks_core import queues, store
from tasks_core.states import TaskStatus

logger = logging.getLogger(__name__)


class Claimer:
    """Claims tasks of some lambdas for one worker (`lambda_ids` maps name to id); with
    `start`, each claim also starts its tasks (they go straight to idle executors)."""

    def __init__(self, *, queue: queues.QueueBackend, worker_id: str,
                 lambda_ids: Mapping[str, int], priorities: Sequence[str],
                 start: bool = False) -> None:
        self.queue = queue
        self.start = start
        self.worker_id = worker_id
        self.lambda_ids = dict(lambda_ids)
        # Strict priority within a lambda: the pop takes from the first non-empty list.
        self.queues_by_lambda = [[queue.queue_name(name, priority) for priority in priorities]
                                 for name in sorted(self.lambda_ids)]
        #: Which lambda each queue holds: a claim's flow limits are those of the lambdas its
        #: messages came from (tasks_core.flow), so the others' tasks pay nothing for them.
        self.lambda_of_queue = {queue.queue_name(name, priority): lambda_id
                                for name, lambda_id in self.lambda_ids.items()
                                for priority in priorities}
        self._turn = 0

    def queue_names(self) -> list[str]:
        """This pop's queue order: lambdas take turns coming first, so none starves another."""
        self._turn = (self._turn + 1) % len(self.queues_by_lambda)
        order = self.queues_by_lambda[self._turn:] + self.queues_by_lambda[:self._turn]
        return [name for names in order for name in names]

    def take(self, max_count: int, *, wait_s: float,
             unreached: set[int] | None = None) -> list[store.ClaimedTask]:
        """Up to `max_count` claimed tasks, waiting up to `wait_s` while the queues are empty.
        `unreached`: as `store.finish_and_claim` takes it."""
        popped = self.queue.pop(self.queue_names(), max_count=max_count, wait_s=wait_s)
        return self.claim(popped, unreached=unreached) if popped else []

    def finish_and_take(self, done: Sequence[tuple[store.ClaimedTask, store.Result]],
                        max_count: int, *, unreached: set[int] | None = None,
                        ) -> tuple[list[TaskStatus | None], list[store.ClaimedTask]]:
        """Record attempts' ends and claim up to `max_count` ready tasks in one transaction,
        without waiting (the results' statuses are not held back by a wait for work).
        `unreached`: as `store.finish_and_claim` takes it."""
        popped = self.queue.pop(self.queue_names(), max_count=max_count, wait_s=0)
        return self.finish_and_claim(done, popped, unreached=unreached)

    def claim(self, popped: Sequence[queues.Popped], *,
              unreached: set[int] | None = None) -> list[store.ClaimedTask]:
        """Claim the popped messages whose lease is current; stale ones are dropped."""
        return self.finish_and_claim((), popped, unreached=unreached)[1]

    def put_back(self, popped: Sequence[queues.Popped]) -> None:
        """Push popped messages that will not be claimed back onto their queues (and ack the
        ones taken, where the backend acks)."""
        for queue_name in {item.queue for item in popped}:
            messages = [i.message for i in popped
                        if i.queue == queue_name and i.message is not None]
            if not messages:
                continue
            self.queue.push(queue_name, messages)
            if self.queue.supports_ack:
                self.queue.ack(queue_name, messages)

    def finish_and_claim(self, done: Sequence[tuple[store.ClaimedTask, store.Result]],
                         popped: Sequence[queues.Popped], *,
                         unreached: set[int] | None = None,
                         ) -> tuple[list[TaskStatus | None], list[store.ClaimedTask]]:
        """Record attempts' ends and claim the popped messages whose lease is current in one
        transaction (`store.finish_and_claim`, which takes `unreached`); stale messages are
        dropped, and so are those of a shard that cannot be reached (it enqueues their tasks
        again once it is back)."""
        messages = [item.message for item in popped if item.message is not None]
        for item in popped:
            if item.message is None:
                logger.warning("discarded a message that is not ATF's on %s: %.200r",
                               item.queue, item.raw, extra={"action": "message_corrupt"})
        from_lambdas = [self.lambda_of_queue.get(item.queue) for item in popped]
        statuses, claimed = store.finish_and_claim(
            done, messages, worker=self.worker_id, lambda_ids=self.lambda_ids.values(),
            now=timezone.now(), start=self.start, unreached=unreached,
            from_lambdas=None if None in from_lambdas
            else {lambda_id for lambda_id in from_lambdas if lambda_id is not None})
        if self.queue.supports_ack:
            for queue_name in {item.queue for item in popped}:
                self.queue.ack(queue_name, [i.message for i in popped
                                            if i.queue == queue_name and i.message is not None])
        if len(claimed) < len(messages):
            logger.debug("discarded %d stale message(s)", len(messages) - len(claimed),
                         extra={"action": "message_stale"})
        return statuses, claimed
