"""Taking tasks for a worker: pop its lambdas' queues, claim the popped tasks, ack them.

A direct worker's controller does this itself; the worker API does it for remote workers, which
reach neither the store nor the queues.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence

from django.utils import timezone

from tasks_core import queues, shards, store
from tasks_core.conf import atf_settings
from tasks_core.states import TaskStatus

logger = logging.getLogger(__name__)


#: The pops of this process, every Claimer's together: each pop's number says which lambda,
#: and which shard within each priority, comes first. The worker API makes a Claimer per
#: request, so a count of a Claimer's own would start again at every call.
_pops = itertools.count()


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
        names = sorted(self.lambda_ids)
        #: Per lambda (by name), per priority (highest first), the queues of its shards, by
        #: slot: what a pop takes from (`queue_names`).
        self.queues = [[queue.shard_queues(name, priority, len(shards.aliases()))
                        for priority in priorities] for name in names]
        #: Which lambda each queue holds: a claim's flow limits are those of the lambdas its
        #: messages came from (tasks_core.flow), so the others' tasks pay nothing for them.
        self.lambda_of_queue = {queue_name: self.lambda_ids[name]
                                for name, by_priority in zip(names, self.queues, strict=True)
                                for queue_names in by_priority for queue_name in queue_names}

    def queue_names(self) -> list[str]:
        """This pop's queue order. Strict priority within a lambda: the pop takes from the
        first non-empty queue. The lambdas take turns coming first, so that none starves
        another, and so do the shards within each priority, so that the workers claim on
        every shard side by side rather than drain one shard's run of tasks after another's."""
        turn = next(_pops)
        lambdas = len(self.queues)
        first = turn % lambdas
        passed_over = self._passed_over()
        return [name for by_priority in self.queues[first:] + self.queues[:first]
                for names in by_priority for name in _rotated(names, turn // lambdas)
                if name not in passed_over]

    def _passed_over(self) -> set[str]:
        """The queues of the shards that this process failed to reach a moment ago
        (shards.outages), while it reaches another: their tasks are left to the workers that
        reach them, not popped here to be dropped (the consumer would enqueue them again only
        after their enqueue timeout)."""
        if not self.queue.splits_by_shard:  # every shard's tasks share the queues
            return set()
        down = [slot for slot, alias in enumerate(shards.aliases())
                if shards.outages.down(alias)]
        if not down or len(down) == len(shards.aliases()):
            return set()
        return {names[slot] for by_priority in self.queues for names in by_priority
                for slot in down}

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
        dropped, and so are those of a shard that cannot be reached, said in a warning: the
        shard's consumer enqueues their tasks again at their enqueue timeout. (Not pushed back:
        a shard cut off takes a connection attempt's whole timeout to fail, which the claims
        that popped its messages again would wait through, one after another.)"""
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
        cut_off = [m for m in messages if unreached and m.task_id in unreached]
        if cut_off:
            logger.warning("dropped %d message(s) of tasks on a shard that could not be reached"
                           " (task %d, ...): it enqueues them again within %gs", len(cut_off),
                           cut_off[0].task_id, atf_settings.enqueue_timeout_s,
                           extra={"action": "message_unreached"})
        if len(claimed) + len(cut_off) < len(messages):
            logger.debug("discarded %d stale message(s)",
                         len(messages) - len(claimed) - len(cut_off),
                         extra={"action": "message_stale"})
        return statuses, claimed


def _rotated(items: list[str], turn: int) -> list[str]:
    """`items` from the one at `turn` (modulo their number) on, then the ones before it."""
    first = turn % len(items)
    return items[first:] + items[:first]
