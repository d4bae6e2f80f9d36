"""Every ATF setting, with its default and a `#:` line saying what it means.

A project sets only what it wants to change, as ordinary Django settings (`ATF_PRIORITIES =
[...]` in its settings module). When Django loads the apps, `install_defaults()` gives
`django.conf.settings` each ATF setting the project left out (the way django-appconf does), so
ATF's code reads every value in one way, `settings.ATF_<NAME>`, and always finds one.
`tasks_core.checks` reports values that cannot work as system-check errors.
"""

from __future__ import annotations

import copy
from typing import Any

from django.conf import LazySettings, settings

# --- Queues and wake-ups --------------------------------------------------------------

#: Redis for the queues and the consumer's wake-ups, e.g. "redis://127.0.0.1:6379/0". Required
#: (check atf.E002); with the SQS backend it still carries the wake-ups.
ATF_REDIS_URL: str | None = None
#: Queue service: "redis" or "sqs".
ATF_QUEUE_BACKEND = "redis"
#: SQS endpoint (a local SQS-compatible server in tests); None means AWS itself.
ATF_SQS_ENDPOINT_URL: str | None = None
#: SQS region.
ATF_SQS_REGION = "us-east-1"
#: Seconds a message popped from SQS stays invisible before SQS delivers it again (unless acked).
ATF_SQS_VISIBILITY_TIMEOUT_S = 30
#: ATF_REDIS_URL names one node of a Redis Cluster (its database must be 0); queues use
#: RedisCluster.
ATF_REDIS_CLUSTER = False
#: Prefix of every queue name and Redis key, so several deployments can share one server.
ATF_QUEUE_PREFIX = "atf"

# --- Scheduling -----------------------------------------------------------------------

#: Priority names, highest first.
ATF_PRIORITIES = ["high", "default", "low"]
#: Priority of a task scheduled without one; one of ATF_PRIORITIES.
ATF_DEFAULT_PRIORITY = "default"
#: Largest payload accepted, in bytes of its JSON text.
ATF_MAX_PAYLOAD_BYTES = 256 * 1024
#: Largest result a lambda may return, in bytes of its JSON text; a larger one ends the attempt
#: as a fatal failure (ResultTooLarge), on direct and remote workers alike.
ATF_MAX_RESULT_BYTES = 256 * 1024
#: Deepest nesting of objects and arrays in a payload.
ATF_MAX_PAYLOAD_DEPTH = 100
#: Most tasks in one schedule_many call or batch request.
ATF_MAX_BATCH_SIZE = 1000
#: Most parents (`after`) the tasks of one batch name in all: each is a dependency row.
ATF_MAX_BATCH_PARENTS = 10_000
#: Most collections one batch may create (names no task used before); 400 above it.
ATF_MAX_NEW_COLLECTIONS = 20
#: Longest idempotency key accepted.
ATF_MAX_IDEMPOTENCY_KEY_LENGTH = 200
#: Team that owns a lambda registered without `team=`.
ATF_DEFAULT_TEAM = "default"

# --- Lifecycle defaults (a lambda may override the per-lambda ones) --------------------

#: Attempts before a failing task goes to the dead-letter queue.
ATF_MAX_ATTEMPTS = 5
#: Seconds a running task may go without a heartbeat before it is enqueued again; more than
#: three heartbeat intervals (check atf.E003).
ATF_HEARTBEAT_TIMEOUT_S = 30.0
#: Seconds between two heartbeats of a running task.
ATF_HEARTBEAT_INTERVAL_S = 5.0
#: Seconds an enqueued task may wait unclaimed before it is enqueued again.
ATF_ENQUEUE_TIMEOUT_S = 60.0
#: Seconds a claimed task may wait unstarted before it is enqueued again.
ATF_CLAIM_TIMEOUT_S = 30.0
#: Backoff of retriable failures: min(cap, base * 2**attempt) times a random factor.
ATF_BACKOFF_BASE_S = 1.0
#: Longest backoff delay.
ATF_BACKOFF_CAP_S = 600.0
#: Seconds one attempt may run before it ends with outcome `timeout`, for lambdas registered
#: without `timeout=` (docs/lambdas.md says why ten minutes); 0 or None: no limit.
ATF_TASK_TIMEOUT_S: float | None = 600.0
#: Seconds a timed-out lambda has to stop once interrupted; then its worker process hands back
#: its buffered tasks and replaces itself (workers.replacement; under `--processes N` it exits
#: with status 76 for its supervisor to restart it).
ATF_TIMEOUT_GRACE_S = 5.0

# --- Database -------------------------------------------------------------------------

#: Prepare the store's hot statements on the server, once per connection. Off by default:
#: behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`, pgcat, Supavisor,
#: RDS Proxy) the next transaction may run on a server connection that never saw them, and
#: measured on a direct connection they saved nothing worth the risk (docs/production.md).
#: Turned on where the session is not kept, a process prepares nothing, logs an error and
#: fails /readyz (tasks_core.pooling).
ATF_DB_PREPARED_STATEMENTS = False

# --- Processes ------------------------------------------------------------------------

#: The store consumer's longest sleep between two polls.
ATF_POLL_INTERVAL_S = 0.5
#: Due rows the consumer takes in one batch, across all lambdas.
ATF_CONSUMER_BATCH_SIZE = 500
#: Seconds a loop waits after an unexpected error before it goes on.
ATF_RESTART_DELAY_S = 1.0
#: Executor threads per worker process.
ATF_WORKER_THREADS = 8
#: Seconds a stopping worker lets running tasks finish before it exits.
ATF_SHUTDOWN_GRACE_S = 30.0
#: Remote workers (`runworker --api`): the ATF API's base URL; empty for a direct worker.
ATF_API_URL = ""
#: Remote workers: the worker token (`atf_token TEAM NAME --worker`) they present.
ATF_API_TOKEN = ""
#: Remote workers: seconds one claim waits on the server while no task is ready (a long poll).
ATF_WORKER_CLAIM_WAIT_S = 5.0
#: Remote workers: seconds before any other call to the API gives up (and counts as failed).
ATF_API_TIMEOUT_S = 10.0
#: Worker API: the longest a claim may wait on the server (a longer `wait_s` is cut to this).
ATF_WORKER_CLAIM_WAIT_MAX_S = 20.0
#: The consumer marks a worker whose last_seen is older than this as stopped (live workers are
#: those seen within four heartbeat intervals, see tasks_core.liveness).
ATF_WORKER_STALE_S = 60.0
#: Seconds after which finished tasks are deleted by the consumer (0 keeps them forever).
ATF_RETENTION_S = 7 * 24 * 3600.0
#: A periodic occurrence later than this (consumers down) is handled by its catch-up policy.
ATF_PERIODIC_GRACE_S = 10.0
#: Periodic tasks one team may add in the console or the API (those defined in code do not
#: count); 0: no limit.
ATF_MAX_PERIODIC_TASKS_PER_TEAM = 100

# --- API ------------------------------------------------------------------------------

#: Requests per token, e.g. "6000/min"; empty turns throttling off.
ATF_API_THROTTLE_RATE = "100000/min"
#: Seconds a server process remembers a token it checked (tasks_api.token_cache) and a remote
#: worker it found: a token revoked, a user or membership changed, or a worker marked stopped
#: in another process takes effect within this.
ATF_API_AUTH_CACHE_S = 5.0
#: Fair shares of one API server process (429 naming the setting above them; 0: no limit).
#: The API's gunicorn config sets them from its threads per process (ATF_WEB_THREADS).
#: Requests one team's tokens (a session: its user) may have in progress at once.
ATF_API_CONCURRENT_PER_TEAM = 64
#: Requests one token (a session: its user) may have in progress at once.
ATF_API_CONCURRENT_PER_TOKEN = 64
#: Worker API: claims that may wait for a task (a long poll) at once, in all; they block on a
#: Redis connection pool of this size of their own, so they never take the connections that
#: other requests use.
ATF_API_WAITING_CLAIMS = 64
#: Worker API: claims one team's worker tokens may have waiting at once.
ATF_API_WAITING_CLAIMS_PER_TEAM = 16
#: Worker API: claims one worker token may have waiting at once.
ATF_API_WAITING_CLAIMS_PER_TOKEN = 16
#: Tasks per page of a list, unless the caller asks for another `page_size` (at most 1000).
ATF_API_PAGE_SIZE = 100
#: Serve /metrics without a token (for scrapers that cannot send one); it shows every lambda.
ATF_METRICS_PUBLIC = False
#: Seconds of recent history behind the delivery-latency histogram of /metrics.
ATF_METRICS_WINDOW_S = 300.0

# --- Logging --------------------------------------------------------------------------

#: Level of the `tasks_core` and `workers` loggers, unless the project's LOGGING gives them one:
#: "DEBUG", "INFO", "WARNING", "ERROR" or "CRITICAL". runconsumer and runworker write ATF's
#: lines to stderr when the project's logging has no handler for them.
ATF_LOG_LEVEL = "INFO"

# --- Console --------------------------------------------------------------------------

#: Failed console logins for one user name from one address before that pair is locked out.
ATF_LOGIN_MAX_FAILURES = 5
#: Seconds a locked-out user name and address wait (counted from their first failure).
ATF_LOGIN_LOCKOUT_S = 300


def defaults() -> dict[str, Any]:
    """Each ATF setting's name and default value (a fresh copy of each)."""
    return {name: copy.deepcopy(value) for name, value in globals().items()
            if name.startswith("ATF_")}


def install_defaults(target: LazySettings = settings) -> None:
    """Give `target` every ATF setting it does not have yet, at its default."""
    for name, value in defaults().items():
        if not hasattr(target, name):
            setattr(target, name, value)
