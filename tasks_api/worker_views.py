"""The worker API: remote workers claim, start, renew and finish their team's tasks over HTTP.

Batch-shaped, so one request serves many tasks; the service runs the store's batch statements
and pops the queues itself. Every call needs a worker token (tasks_api/scopes.py), and acts
only on its team's lambdas and tasks: another team's task is reported as not started, lost or
refused, and another team's worker is not found.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tasks_api import fair_share, held_tasks, worker_forms
from tasks_api import worker_serializers as shapes
from tasks_api.memory import ShortMemory
from tasks_api.openapi import extend_schema
from tasks_api.policy import ApiPolicy
from tasks_api.scopes import WorkerOnly, worker_credential, worker_team_id
from tasks_api.views import _errors
from tasks_core import queues, remote_workers, tracing
from tasks_core.conf import atf_settings
from tasks_core.exceptions import LambdaNotFound
from tasks_core.models import Worker
from tasks_core.states import TaskStatus

#: Running workers by id, team and credential, read once per ATF_API_AUTH_CACHE_S rather than
#: per call (claim, heartbeat and finish each name their worker).
_workers: ShortMemory[tuple[str, remote_workers.Teams, str], Worker] = ShortMemory()

#: Redis connections of the queue client that serves the requests that do not wait (a thread
#: that finds them all taken waits for one rather than failing).
REQUEST_CONNECTIONS = 100

_queue_lock = threading.Lock()
_queues: dict[str, queues.QueueBackend] = {}


def _shared_queue(kind: str = "requests") -> queues.QueueBackend:
    """One queue client per server process and kind: "requests" (its pool serves every
    request thread), or "waits" (the waiting claims' pool of their own, as many connections as
    ATF_API_WAITING_CLAIMS lets claims wait, so they never take the others' connections)."""
    with _queue_lock:
        if kind not in _queues:
            connections = (atf_settings.api_waiting_claims or None if kind == "waits"
                           else REQUEST_CONNECTIONS)
            _queues[kind] = queues.backend(connections=connections)
        return _queues[kind]


def _form(serializer_class: type[shapes.StrictSerializer], request: Request) -> Any:
    """The body read as `serializer_class` reads it (the hot ones in plain code)."""
    return worker_forms.read(serializer_class, request.data)


def _finished(statuses: Mapping[int, TaskStatus | None]) -> list[dict[str, Any]]:
    """Results as finish/ (and a claim that carried them) answers them: per task its new
    status, null where refused."""
    return [{"id": pk, "status": None if s is None else str(s)} for pk, s in statuses.items()]


def _with_unreached(answer: dict[str, Any], unreached: set[int]) -> dict[str, Any]:
    """`answer`, and where a shard of a sharded store could not be reached, `unreached`: the
    ids of the request's tasks on it (neither renewed, written nor lost; the worker applies
    its per-shard heartbeat budget to them). Absent otherwise: an answer is as it always was."""
    if unreached:
        answer["unreached"] = sorted(unreached)
    return answer


class WorkerView(ApiPolicy, APIView):
    """Base of the worker API's views: a worker token's team, and its registered worker."""

    permission_classes = [IsAuthenticated, WorkerOnly]

    def teams(self) -> remote_workers.Teams:
        team_id = worker_team_id(self.request)
        assert team_id is not None, "WorkerOnly lets only worker tokens in"
        return frozenset({team_id})

    def credential(self) -> str:
        return worker_credential(self.request)

    def worker(self, form: Any) -> Worker:
        """The caller's running worker named in `form` (a read body), registered with the
        caller's token (404 otherwise: another token's worker is refused like a missing one).
        Remembered for ATF_API_AUTH_CACHE_S seconds: a worker marked stopped by another process
        (the consumer, for one not seen for ATF_WORKER_STALE_S) is refused at most that much
        later."""
        key = (form.validated_data["worker"], self.teams(), self.credential())
        if (row := _workers.get(key)) is None:
            row = remote_workers.worker(*key)
            _workers.put(key, row)
        return row


@extend_schema(tags=["worker"])
class LambdasView(WorkerView):
    """Which of these lambdas a worker may run (its team's), with their heartbeat timeouts."""

    @extend_schema(request=shapes.LambdaNamesSerializer,
                   responses={200: shapes.LambdaTimeoutsSerializer, **_errors(400, 413, 415)})
    def post(self, request: Request) -> Response:
        names = _form(shapes.LambdaNamesSerializer, request).validated_data["lambdas"]
        found, missing = remote_workers.split_lambdas(names, self.teams())
        return Response({"lambdas": [{"name": name, "heartbeat_timeout_s":
                                      info.heartbeat_timeout_s} for name, info in found.items()],
                         "unknown": missing})


@extend_schema(tags=["worker"])
class RegisterView(WorkerView):
    """Add a worker to the registry before it claims anything."""

    @extend_schema(request=shapes.RegisterSerializer,
                   responses={201: shapes.WorkerIdSerializer, **_errors(400, 409, 413, 415)})
    def post(self, request: Request) -> Response:
        data = _form(shapes.RegisterSerializer, request).validated_data
        try:
            row = remote_workers.register(
                worker_id=data["worker"], host=data["host"], pid=data["pid"],
                lambda_names=data["lambdas"], threads=data["threads"], teams=self.teams(),
                credential=self.credential())
        except LambdaNotFound as exc:
            raise ValidationError({"lambdas": [str(exc)]}) from exc
        return Response({"worker": row.worker_id}, status=status.HTTP_201_CREATED)


@extend_schema(tags=["worker"])
class ClaimView(WorkerView):
    """Claim up to `max` tasks of the worker's lambdas, waiting up to `wait_s` for one (a
    long poll). Each comes with the lease that every later call about it presents. A claim
    may carry `results` as finish/ takes them: they are recorded in the claim's commit, with
    the same checks, answered in `results` as finish/ answers them, and the claim answers at
    once. A worker gets no more tasks than its bound (ATF_API_HELD_TASKS_PER_THREAD) and its
    token's ceiling (ATF_API_HELD_TASKS_PER_TOKEN) leave: none, and no results carried, is a
    429 naming the setting. A shard that cannot be reached costs only its own part: its
    carried results are answered null and named in `unreached`, its tasks are not claimed."""

    @extend_schema(request=shapes.ClaimSerializer,
                   responses={200: shapes.ClaimedSerializer, **_errors(400, 404, 413, 415)})
    def post(self, request: Request) -> Response:
        form = _form(shapes.ClaimSerializer, request)
        worker, wanted = self.worker(form), form.validated_data["max"]
        start, ends = form.validated_data["start"], form.reported_ends()
        unreached: set[int] = set()
        with held_tasks.counted(worker, wanted, ends, refuse=not ends,
                                unreached=unreached) as room:
            claimed, statuses = remote_workers.claim(
                worker, queue=_shared_queue(), teams=self.teams(), start=start,
                max_count=room.count, reported_ends=ends, unreached=unreached)
        if not claimed and not ends and form.validated_data["wait_s"] > 0:
            # Only a claim that must wait takes a waiting share: a ready task is always served.
            with (self.waiting(fair_share.waiting_claim_shares(request)),
                  held_tasks.waiting(worker, wanted, held=room.held) as max_count):
                popped = remote_workers.wait_for_work(
                    worker, queue=_shared_queue("waits"), max_count=max_count,
                    wait_s=form.validated_data["wait_s"])
            if popped:
                # (no results carried: a shard that cannot be reached has nothing to name)
                with held_tasks.counted(worker, len(popped), refuse=False,
                                        unreached=set()) as room:
                    claimed = remote_workers.claim_popped(
                        worker, popped, queue=_shared_queue("waits"), max_count=room.count,
                        start=start, unreached=set())
        if form.validated_data.get("trace"):
            claimed = tracing.with_context(claimed)
        return Response(_with_unreached({"tasks": [task.as_json() for task in claimed],
                                         "results": _finished(statuses)},
                                        unreached & {end.task_id for end in ends}))


@extend_schema(tags=["worker"])
class StartView(WorkerView):
    """claimed -> processing for many tasks; a task reported not started must not run."""

    @extend_schema(request=shapes.LeasesSerializer,
                   responses={200: shapes.StartedListSerializer, **_errors(400, 413, 415)})
    def post(self, request: Request) -> Response:
        started = remote_workers.start(_form(shapes.LeasesSerializer, request).leases(),
                                       self.teams(), self.credential())
        return Response({"tasks": [{"id": pk, "started": ok} for pk, ok in started.items()]})


@extend_schema(tags=["worker"])
class HeartbeatView(WorkerView):
    """Renew the leases of running tasks and the worker's last_seen; answers the lost ones,
    those a cancel asks to stop, and (`unreached`) those of a shard that could not be reached."""

    @extend_schema(request=shapes.WorkerLeasesSerializer,
                   responses={200: shapes.LostSerializer, **_errors(400, 404, 413, 415)})
    def post(self, request: Request) -> Response:
        form = _form(shapes.WorkerLeasesSerializer, request)
        beat = remote_workers.heartbeat(self.worker(form), form.leases(), self.teams(),
                                        seen=form.validated_data["seen"])
        return Response(_with_unreached({"lost": sorted(beat.lost),
                                         "cancel": sorted(beat.cancel)}, beat.unreached))


@extend_schema(tags=["worker"])
class FinishView(WorkerView):
    """Record many attempts' ends; a result whose lease moved on is refused (status null), one
    whose shard could not be reached is not written (status null, its id in `unreached`)."""

    @extend_schema(request=shapes.FinishSerializer,
                   responses={200: shapes.FinishedListSerializer, **_errors(400, 404, 413, 415)})
    def post(self, request: Request) -> Response:
        form = _form(shapes.FinishSerializer, request)
        unreached: set[int] = set()
        statuses = remote_workers.finish(self.worker(form), form.reported_ends(), self.teams(),
                                         unreached)
        return Response(_with_unreached({"results": _finished(statuses)}, unreached))


@extend_schema(tags=["worker"])
class ReleaseView(WorkerView):
    """Hand back claimed tasks that never started (a stopping worker): due again at once."""

    @extend_schema(request=shapes.LeasesSerializer,
                   responses={200: shapes.ReleasedSerializer, **_errors(400, 413, 415)})
    def post(self, request: Request) -> Response:
        leases = _form(shapes.LeasesSerializer, request).leases()
        return Response({"released": remote_workers.release(leases, self.teams(),
                                                            self.credential())})


@extend_schema(tags=["worker"])
class StoppedView(WorkerView):
    """Mark the worker stopped in the registry."""

    @extend_schema(request=shapes.WorkerIdSerializer,
                   responses={200: shapes.WorkerIdSerializer, **_errors(400, 404, 413, 415)})
    def post(self, request: Request) -> Response:
        row = self.worker(_form(shapes.WorkerIdSerializer, request))
        remote_workers.deregister(row)
        _workers.forget_all()
        return Response({"worker": row.worker_id})


@extend_schema(tags=["worker"])
class ParentResultsView(WorkerView):
    """A page of the results a running task waited for (ctx.parent_results() of a remote
    worker): a group's members for its callback, else its `after` parents."""

    @extend_schema(request=shapes.ParentResultsSerializer,
                   responses={200: shapes.ParentResultsPageSerializer,
                              **_errors(400, 404, 413, 415)})
    def post(self, request: Request) -> Response:
        asked = _form(shapes.ParentResultsSerializer, request).validated_data
        page = remote_workers.parent_results(asked["id"], after_id=asked["after"],
                                             teams=self.teams(), credential=self.credential())
        return Response({"results": [[place, result] for place, result in page]})


@extend_schema(tags=["worker"])
class StepsView(WorkerView):
    """The recorded steps of a task this worker runs (ctx.step of a remote worker)."""

    @extend_schema(request=shapes.StepsQuerySerializer,
                   responses={200: shapes.StepsSerializer, **_errors(400, 404, 413, 415)})
    def post(self, request: Request) -> Response:
        asked = _form(shapes.StepsQuerySerializer, request).validated_data
        recorded = remote_workers.recorded_steps(asked["id"], teams=self.teams(),
                                                 credential=self.credential())
        return Response({"steps": [{"name": name, "result": result}
                                   for name, result in recorded.items()]})


@extend_schema(tags=["worker"])
class StepView(WorkerView):
    """Record one step's result under the attempt's lease: `lease_lost` when it moved on
    (nothing recorded), `too_large` past ATF_MAX_RESULT_BYTES for the task's steps."""

    @extend_schema(request=shapes.RecordStepSerializer,
                   responses={200: shapes.StepRecordedSerializer, **_errors(400, 404, 413, 415)})
    def post(self, request: Request) -> Response:
        asked = _form(shapes.RecordStepSerializer, request).validated_data
        outcome = remote_workers.record_step(asked["id"], asked["lease"], name=asked["name"],
                                             value=asked["result"], teams=self.teams(),
                                             credential=self.credential())
        return Response({"step": outcome.value})


@extend_schema(tags=["worker"])
class ProgressView(WorkerView):
    """Write the progress a task this worker runs reported (at most once a second a task)."""

    @extend_schema(request=shapes.ProgressSerializer,
                   responses={200: shapes.ProgressWrittenSerializer,
                              **_errors(400, 404, 413, 415)})
    def post(self, request: Request) -> Response:
        asked = _form(shapes.ProgressSerializer, request).validated_data
        remote_workers.report_progress(asked["id"], done=asked["done"], total=asked["total"],
                                       note=asked["note"], teams=self.teams(),
                                       credential=self.credential())
        return Response({"written": True})
