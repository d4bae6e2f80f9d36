"""Every ATF setting, typed, with its default and a `#:` line saying what it means.

A project sets only what it wants to change, as ordinary Django settings named `ATF_` and the
attribute's name in capitals (`ATF_PRIORITIES = [...]` in its settings module). ATF's code
reads them through one typed object:

    from tasks_core.conf import atf_settings

    atf_settings.heartbeat_interval_s  # settings.ATF_HEARTBEAT_INTERVAL_S, else its default

Each read goes to `django.conf.settings` at that moment, so `override_settings` works. When
the apps load, `install_defaults()` also gives `django.conf.settings` each ATF setting the
project left out, for code that still reads `settings.ATF_*`. The standalone service reads its
environment with `from_environment()`, as each setting's type says (a `None` default
included), so nothing downstream parses text again. `tasks_core.checks` reports values that
cannot work, and `ATF_*` names that are no setting (with the closest one).
"""

from __future__ import annotations

import copy
import difflib
import typing
from collections.abc import Mapping
from typing import Any

from django.conf import LazySettings, settings
from django.core.exceptions import ImproperlyConfigured

#: The prefix of every ATF setting's name in Django's settings and in the environment.
PREFIX = "ATF_"
#: `ATF_*` settings of the standalone service (atf_project/settings.py) that the apps do not
#: read: known here so that the unknown-name check leaves them alone.
SERVICE_SETTINGS = frozenset({"ATF_DB_CONN_MAX_AGE", "ATF_DB_POOL_SIZE", "ATF_DEMO",
                              "ATF_DEMO_TEAM", "ATF_TEST_DATABASE_NAME"})
#: `ATF_*` environment variables that are no Django setting: read by the standalone service
#: (its settings and gunicorn config), the demo, the scripts, the benchmarks and the tests.
#: The unknown-variable check (atf.W005) leaves them alone.
ENVIRONMENT_ONLY = frozenset({
    "ATF_MAX_REQUEST_BYTES", "ATF_DJANGO_TASKS_MODULES", "ATF_WEB_THREADS",
    "ATF_WEB_GRACEFUL_TIMEOUT_S", "ATF_WEB_CONTROL_SOCKET", "ATF_DEMO_PORT", "ATF_PYTHON",
    "ATF_FUZZ_CASES",
    "ATF_CONSOLE_BIG_ROWS", "ATF_REFRESH_DOCS_SCREENSHOTS", "ATF_SCREENSHOT_DIR",
    "ATF_TEST_SIGNALS_KEY", "ATF_SHARD_URLS", "ATF_TEST_REDIS_DATABASES", "ATF_FULL_SIZE",
})
#: The words a yes/no setting may be given as in text (any case); any other is refused.
YES = frozenset({"1", "true", "yes", "on"})
NO = frozenset({"0", "false", "no", "off", ""})


class UnreadableSetting(ValueError):
    """A setting given as text (an environment variable) that its type cannot read; the
    message names the setting and says what it must be."""


class AtfSettings:
    """ATF's settings, typed. An attribute's value is the project's `ATF_<NAME>`, else the
    default declared here."""

    # --- Queues and wake-ups --------------------------------------------------------------

    #: Redis for the queues and the consumer's wake-ups, e.g. "redis://127.0.0.1:6379/0". Required
    #: (check atf.E002); with the SQS backend it still carries the wake-ups.
    redis_url: str | None = None
    #: Queue service: "redis" or "sqs".
    queue_backend: str = "redis"
    #: SQS endpoint (a local SQS-compatible server in tests); None means AWS itself.
    sqs_endpoint_url: str | None = None
    #: SQS region.
    sqs_region: str = "us-east-1"
    #: Seconds a message popped from SQS stays invisible before SQS delivers it again (unless
    #: acked).
    sqs_visibility_timeout_s: int = 30
    #: ATF_REDIS_URL names one node of a Redis Cluster (its database must be 0); queues use
    #: RedisCluster.
    redis_cluster: bool = False
    #: Prefix of every queue name and Redis key, so several deployments can share one server.
    queue_prefix: str = "atf"

    # --- Scheduling -----------------------------------------------------------------------

    #: Priority names, highest first.
    priorities: list[str] = ["high", "default", "low"]
    #: Priority of a task scheduled without one; one of ATF_PRIORITIES.
    default_priority: str = "default"
    #: Largest payload accepted, in bytes of its JSON text.
    max_payload_bytes: int = 256 * 1024
    #: Largest result a lambda may return, in bytes of its JSON text; a larger one ends the attempt
    #: as a fatal failure (ResultTooLarge), on direct and remote workers alike.
    max_result_bytes: int = 256 * 1024
    #: Deepest nesting of objects and arrays in a payload.
    max_payload_depth: int = 100
    #: Most tasks in one schedule_many call or batch request.
    max_batch_size: int = 1000
    #: Most parents (`after`) the tasks of one batch name in all: each is a dependency row.
    max_batch_parents: int = 10_000
    #: Most collections one batch may create (names no task used before); 400 above it.
    max_new_collections: int = 20
    #: Longest idempotency key accepted.
    max_idempotency_key_length: int = 200
    #: Team that owns a lambda registered without `team=`.
    default_team: str = "default"

    # --- Lifecycle defaults (a lambda may override the per-lambda ones) --------------------

    #: Attempts before a failing task goes to the dead-letter queue.
    max_attempts: int = 5
    #: Seconds a running task may go without a heartbeat before it is enqueued again; more than
    #: three heartbeat intervals (check atf.E003).
    heartbeat_timeout_s: float = 30.0
    #: Seconds between two heartbeats of a running task.
    heartbeat_interval_s: float = 5.0
    #: Seconds an enqueued task may wait unclaimed before it is enqueued again.
    enqueue_timeout_s: float = 60.0
    #: Seconds a claimed task may wait unstarted before it is enqueued again.
    claim_timeout_s: float = 30.0
    #: Backoff of retriable failures: min(cap, base * 2**attempt) times a random factor.
    backoff_base_s: float = 1.0
    #: Longest backoff delay.
    backoff_cap_s: float = 600.0
    #: Seconds one attempt may run before it ends with outcome `timeout`, for lambdas registered
    #: without `timeout=` (docs/lambdas.md says why ten minutes); 0 or None: no limit.
    task_timeout_s: float | None = 600.0
    #: Seconds a timed-out lambda has to stop once interrupted; then its worker process hands back
    #: its buffered tasks and replaces itself (workers.replacement; under `--processes N` it exits
    #: with status 76 for its supervisor to restart it).
    timeout_grace_s: float = 5.0

    # --- Database -------------------------------------------------------------------------

    #: Prepare the store's hot statements on the server, once per connection (they cost
    #: PostgreSQL about 40% less CPU: docs/production.md). None (the default): wherever every
    #: database of the store keeps its session, which each process asks once; behind a pooler
    #: in transaction mode (PgBouncer's `pool_mode = transaction`, pgcat, Supavisor, RDS Proxy)
    #: the next transaction may run on a server connection that never saw them, so there they
    #: are not. True: always, and where the session is not kept a process prepares nothing,
    #: logs an error and fails /readyz (tasks_core.pooling). False: never, and nothing asked.
    db_prepared_statements: bool | None = None
    #: The database aliases (`DATABASES` keys) that hold the tasks, by slot (tasks_core.shards);
    #: empty: the one database, `default`, as without shards. The first is slot 0, whose ids
    #: are those of a store from before shards; control data stays in `default`. A project
    #: with several also lists `tasks_core.shards.Router` in DATABASE_ROUTERS. The standalone
    #: service sets it from ATF_SHARD_URLS.
    store_shards: list[str] = []

    # --- Processes ------------------------------------------------------------------------

    #: The store consumer's longest sleep between two polls.
    poll_interval_s: float = 0.5
    #: Due rows the consumer takes in one batch, across all lambdas.
    consumer_batch_size: int = 500
    #: Seconds a loop waits after an unexpected error before it goes on.
    restart_delay_s: float = 1.0
    #: Executor threads per worker process.
    worker_threads: int = 8
    #: Tasks a worker process whose lambdas are all async runs at once on its event loop
    #: (workers.async_executor); a process with sync lambdas runs as many as it has threads.
    worker_async_slots: int = 100
    #: Connections a direct worker process keeps to each database of the store, shared by its
    #: threads (workers.store_connections); each call borrows one and gives it back. 0: each
    #: thread keeps its own to every database it touched (4-5 a database).
    worker_db_connections: int = 2
    #: Seconds a stopping worker lets running tasks finish before it exits.
    shutdown_grace_s: float = 30.0
    #: Remote workers (`runworker --api`): the ATF API's base URL; empty for a direct worker.
    api_url: str = ""
    #: Remote workers: the worker token (`atf_token TEAM NAME --worker`) they present.
    api_token: str = ""
    #: Remote workers: seconds one claim waits on the server while no task is ready (a long poll).
    worker_claim_wait_s: float = 5.0
    #: Remote workers: seconds before any other call to the API gives up (and counts as failed).
    api_timeout_s: float = 10.0
    #: Worker API: the longest a claim may wait on the server (a longer `wait_s` is cut to this).
    worker_claim_wait_max_s: float = 20.0
    #: The consumer marks a worker whose last_seen is older than this as stopped (live workers are
    #: those seen within four heartbeat intervals, see tasks_core.liveness).
    worker_stale_s: float = 60.0
    #: Seconds after which finished tasks are deleted by the consumer (0 keeps them forever).
    retention_s: float = 7 * 24 * 3600.0
    #: A periodic occurrence later than this (consumers down) is handled by its catch-up policy.
    periodic_grace_s: float = 10.0
    #: Periodic tasks one team may add in the console or the API (those defined in code do not
    #: count); 0: no limit.
    max_periodic_tasks_per_team: int = 100

    # --- API ------------------------------------------------------------------------------

    #: Requests per token, e.g. "6000/min"; empty turns throttling off.
    api_throttle_rate: str = "100000/min"
    #: Seconds a server process remembers a token it checked (tasks_api.token_cache) and a remote
    #: worker it found: a token revoked, a user or membership changed, or a worker marked stopped
    #: in another process takes effect within this.
    api_auth_cache_s: float = 5.0
    #: Fair shares of one API server process (429 naming the setting above them; 0: no limit).
    #: The API's gunicorn config sets them from its threads per process (ATF_WEB_THREADS).
    #: Requests one team's tokens (a session: its user) may have in progress at once (a claim
    #: waiting for a task counts as a waiting claim instead).
    api_concurrent_per_team: int = 32
    #: Requests one token (a session: its user) may have in progress at once.
    api_concurrent_per_token: int = 32
    #: Requests that may run at once in one server process, all teams together (0: no limit);
    #: one team runs at most half of them, and a freed one goes to the waiting team that
    #: runs the fewest (then: that used the least request time lately). Over it a request
    #: waits; a claim waiting for a task holds none.
    api_active_requests: int = 0
    #: Requests one team may run at once in one server process, while another team that used
    #: less request time lately is active there (a request running or waiting, or one ended
    #: within a second), when ATF_API_ACTIVE_REQUESTS counts turns: the requests that run share
    #: the process's one interpreter lock, so the lighter team's request shares it with this many
    #: of the busier team's (0: half the turns, as when the team is alone).
    api_active_requests_per_busy_team: int = 1
    #: Worker API: claims that may wait for a task (a long poll) at once, in all; they block on a
    #: Redis connection pool of this size of their own, so they never take the connections that
    #: other requests use.
    api_waiting_claims: int = 64
    #: Worker API: claims one team's worker tokens may have waiting at once.
    api_waiting_claims_per_team: int = 16
    #: Worker API: claims one worker token may have waiting at once.
    api_waiting_claims_per_token: int = 16
    #: Worker API: tasks one remote worker may hold claimed or processing at once, per executor
    #: thread it registered (2: an executor's task, and its last one whose result is still being
    #: written); a claim gets no more than that leaves, and 429 naming this setting when it leaves
    #: none (0: no limit). Counted across every server process, in the store.
    api_held_tasks_per_thread: int = 2
    #: Worker API: tasks the workers of one worker token may hold claimed or processing at once,
    #: all of them together (one token may register any number of workers); a claim gets no more
    #: than that leaves, and 429 naming this setting when it leaves none (0: no limit).
    api_held_tasks_per_token: int = 1000
    #: Worker API: most executor threads a worker may register (`threads` of register/; over it
    #: is a 400 field error), which bounds what ATF_API_HELD_TASKS_PER_THREAD lets it hold.
    api_max_worker_threads: int = 256
    #: Tasks a second one team's tokens may schedule through the API, all server processes
    #: together; each task of a batch counts, and a session or a token filed under no team
    #: counts against every team of its user (a user in none: the user's own) (429 naming the
    #: setting above it; 0: no limit).
    api_schedule_rate_per_team: int = 1000
    #: Tasks per page of a list, unless the caller asks for another `page_size` (at most 1000).
    api_page_size: int = 100
    #: Serve /metrics without a token (for scrapers that cannot send one); it shows every lambda.
    metrics_public: bool = False
    #: Seconds of recent history behind the delivery-latency histogram of /metrics.
    metrics_window_s: float = 300.0

    # --- Logging --------------------------------------------------------------------------

    #: Level of the `tasks_core` and `workers` loggers, unless the project's LOGGING gives them one:
    #: "DEBUG", "INFO", "WARNING", "ERROR" or "CRITICAL". runconsumer and runworker write ATF's
    #: lines to stderr when the project's logging has no handler for them.
    log_level: str = "INFO"

    # --- Console --------------------------------------------------------------------------

    #: Failed console logins for one user name from one address before that pair is locked out.
    login_max_failures: int = 5
    #: Seconds a locked-out user name and address wait (counted from their first failure).
    login_lockout_s: int = 300
    #: Milliseconds a console list page's queries may run, each (PostgreSQL's statement_timeout,
    #: set for the page's transaction alone); past it the page answers 503 with a message
    #: rather than keep a database connection busy (0: no limit; SQLite: none).
    console_statement_timeout_ms: int = 5000

    def __getattribute__(self, name: str) -> Any:
        if (django_name := _DJANGO_NAMES.get(name)) is not None:
            return getattr(settings, django_name, _DEFAULTS[name])
        return object.__getattribute__(self, name)


#: Each setting's default, by attribute name.
_DEFAULTS: dict[str, Any] = {name: value for name, value in vars(AtfSettings).items()
                             if not name.startswith("_")}
#: Each setting's Django name (`ATF_…`), by attribute name.
_DJANGO_NAMES: dict[str, str] = {name: PREFIX + name.upper() for name in _DEFAULTS}
#: Each setting's type, by attribute name.
_TYPES: dict[str, Any] = typing.get_type_hints(AtfSettings)

#: The one object ATF's code reads its settings from.
atf_settings = AtfSettings()


def value(name: str) -> Any:
    """The value of setting `name` given by its Django name (`ATF_…`), e.g. to name it in a
    message."""
    return getattr(atf_settings, name[len(PREFIX):].lower())


def redis_url() -> str:
    """ATF_REDIS_URL, which ATF needs (check atf.E002 stops a process without it)."""
    if not (url := atf_settings.redis_url):
        raise ImproperlyConfigured("ATF_REDIS_URL is not set (see `manage.py check`, atf.E002)")
    return url


def defaults() -> dict[str, Any]:
    """Each ATF setting's Django name and default value (a fresh copy of each)."""
    return {_DJANGO_NAMES[name]: copy.deepcopy(value) for name, value in _DEFAULTS.items()}


def install_defaults(target: LazySettings = settings) -> None:
    """Give `target` every ATF setting it does not have yet, at its default."""
    for name, value in defaults().items():
        if not hasattr(target, name):
            setattr(target, name, value)


def parse(name: str, text: str) -> Any:
    """The value of setting `name` (its Django name) given as text, read as its type: a list is
    comma separated; a bool is 1/true/yes/on or 0/false/no/off (or empty); where None is
    allowed, an empty text (and, for a number, "0" or "none" too) means None. Raises
    UnreadableSetting for a text the type cannot read."""
    kind = _TYPES[name[len(PREFIX):].lower()]
    args = typing.get_args(kind)
    nullable = type(None) in args
    base = next((arg for arg in args if arg is not type(None)), kind) if nullable else kind
    text = text.strip()
    if nullable and (text == "" or (base in (int, float) and text.lower() in {"0", "none"})):
        return None
    if base in (bool, int, float):
        return parse_text(name, text, base)
    if base is str:
        return text
    if typing.get_origin(base) is list:
        return [item.strip() for item in text.split(",") if item.strip()]
    raise TypeError(f"{name}: no way to read a {kind} from text")


#: What a text must be to be read as each type, for UnreadableSetting's message.
_EXPECTED = {bool: "yes or no (1, true, yes, on or 0, false, no, off)",
             int: "a whole number", float: "a number"}


def parse_text(name: str, text: str, kind: type[bool] | type[int] | type[float]) -> Any:
    """`text`, the value of the variable or setting `name`, read as a bool, an int or a float;
    UnreadableSetting naming `name` if it is none."""
    word = text.strip().lower()
    if kind is bool and word in YES | NO:
        return word in YES
    if kind is not bool:
        try:
            return kind(word)
        except ValueError:
            pass
    raise UnreadableSetting(f"{name} is {text!r}; it must be {_EXPECTED[kind]}")


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ATF settings that `environ` sets (variables of the settings' own names), parsed."""
    return {name: parse(name, environ[name]) for name in defaults() if name in environ}


def unknown_names(names: typing.Iterable[str]) -> dict[str, str | None]:
    """The `ATF_*` names among `names` that are no ATF setting, each with the closest known
    name (None when none is close)."""
    return _closest_known(names, [*defaults(), *SERVICE_SETTINGS])


def unknown_variables(names: typing.Iterable[str]) -> dict[str, str | None]:
    """The `ATF_*` environment variables among `names` that nothing of ATF reads, each with the
    closest known name (None when none is close)."""
    return _closest_known(names, [*defaults(), *SERVICE_SETTINGS, *ENVIRONMENT_ONLY])


def _closest_known(names: typing.Iterable[str], known: list[str]) -> dict[str, str | None]:
    return {name: next(iter(difflib.get_close_matches(name, known, n=1)), None)
            for name in names if name.startswith(PREFIX) and name not in known}
