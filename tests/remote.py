"""Remote workers in tests: the API under gunicorn, a worker token, and a worker host's setup."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from tasks_api import tokens
from tasks_api.models import Scope
from tasks_core.models import Team
from tests.conftest import ROOT, Processes, wait_for
from tests.netns import WorkerHost
from tests.ports import free_port
from tests.proxy import Proxy


def start_api(processes: Processes, env: dict[str, str], *, threads: int = 32,
              web_processes: int = 1, port: int | None = None,
              also_on: Sequence[str] = ()) -> str:
    """The API under gunicorn with the project's config (gthread, a database pool), on `port`
    (a free one by default) of loopback and of each address in `also_on` (worker hosts'
    gateways, tests/netns.py); its URL on loopback. Its master process is
    `processes.children[-1]`."""
    port = port or free_port()
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    binds = [arg for host in ("127.0.0.1", *also_on) for arg in ("--bind", f"{host}:{port}")]
    allowed = env.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1")
    processes.spawn("api", [gunicorn, "-c", "python:atf_project.gunicorn_conf", *binds,
                            "atf_project.wsgi"],
                    env={**env, "DJANGO_ALLOWED_HOSTS": ",".join([allowed, *also_on]),
                         "WEB_CONCURRENCY": str(web_processes),
                         "ATF_WEB_THREADS": str(threads)})
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return requests.get(f"{url}/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    wait_for(answers, timeout_s=60, message="the API to answer")
    return url


def worker_token(team: str = "") -> str:
    """A worker token of `team` (the demo lambdas' team by default)."""
    team_row, _created = Team.objects.get_or_create(name=team or settings.ATF_DEMO_TEAM)
    user, _created = get_user_model().objects.get_or_create(username=f"{team_row.name}-worker")
    team_row.members.add(user)
    return tokens.issue(user=user, team=team_row, name="remote worker",
                        scope=Scope.WORKER).token


def worker_env(env: dict[str, str], token: str) -> dict[str, str]:
    """A lambda host's environment: the token and settings without a database."""
    host_env = {key: value for key, value in env.items() if key != "DATABASE_URL"}
    return {**host_env, "DJANGO_SETTINGS_MODULE": "tests.remote_worker_settings",
            "ATF_API_TOKEN": token}


def start_on_host(processes: Processes, host: WorkerHost, api_url: str, env: dict[str, str],
                  *args: str) -> subprocess.Popen:
    """`runworker *args --api api_url` on a worker host of its own, with a lambda host's `env`
    (worker_env, and host_redis for the lambdas' Redis)."""
    argv = host.command([sys.executable, str(ROOT / "manage.py"), "runworker", *args,
                         "--api", api_url])
    return processes.spawn("runworker", argv, env=env)


def host_redis(host: WorkerHost, env: dict[str, str]) -> tuple[Proxy, dict[str, str]]:
    """The lambdas' own Redis (demo.record's) as a worker host reaches it: through a proxy on
    the host's gateway, over the host's link. The proxy, and `env` pointing at it."""
    split = urlsplit(env["REDIS_URL"])
    proxy = Proxy(split.hostname or "127.0.0.1", split.port or 6379, listen_host=host.gateway)
    url = split._replace(netloc=f"{host.gateway}:{proxy.port}").geturl()
    return proxy, {**env, "REDIS_URL": url}


class Workers:
    """Starts `runworker` processes of one kind: "direct" (the store and queues) or "remote"
    (the API, from a host without a database)."""

    def __init__(self, kind: str, processes: Processes, env: dict[str, str]) -> None:
        self.kind = kind
        self.processes = processes
        self.env = env
        if kind == "remote":
            self.api_url = start_api(processes, env)
            self.token = worker_token()

    def start(self, *args: str, via: Proxy | None = None) -> subprocess.Popen:
        """A worker process; with `via`, its link to ATF goes through that proxy."""
        if self.kind == "direct":
            env = self.env
            if via is not None:
                db = connection.settings_dict
                env = {**env, "DATABASE_URL": f"postgres://{db['USER']}@127.0.0.1:{via.port}/"
                                              f"{db['NAME']}"}
            return self.processes.start("runworker", *args, env=env)
        url = self.api_url if via is None else f"http://127.0.0.1:{via.port}"
        return self.processes.start("runworker", *args, "--api", url,
                                    env=worker_env(self.env, self.token))

    def link(self) -> tuple[str, int]:
        """Host and port a worker's link to ATF connects to: the database, or the API."""
        if self.kind == "direct":
            db = connection.settings_dict
            return db["HOST"], int(db["PORT"])
        split = urlsplit(self.api_url)
        return split.hostname or "127.0.0.1", int(split.port or 80)
