"""gunicorn settings for the ATF API.

    gunicorn -c python:atf_project.gunicorn_conf atf_project.wsgi

Remote workers long-poll: a claim waits on the server (up to ATF_WORKER_CLAIM_WAIT_S) until a
task is ready. A sync worker process would be tied up by each waiting claim, so a few hundred
lambda hosts would need a few hundred processes. gthread workers hold a waiting claim on a
thread instead: it blocks in Redis and holds no database connection (the claim hands it back
to the pool before it waits), so 2 processes x 128 threads hold 128 waiting claims on 2 cores
(half the threads: the fair shares below), and each process keeps ATF_DB_POOL_SIZE PostgreSQL
connections however many threads it has.
Each value can be changed from the environment.
"""

from __future__ import annotations

import os

from atf_project.environment import env_int

#: Threads, not processes, carry the waiting claims.
worker_class = "gthread"
#: Processes: one per core.
workers = env_int("WEB_CONCURRENCY", 2)
#: Requests in progress per process, waiting claims included.
threads = env_int("ATF_WEB_THREADS", 128)
#: Seconds a stopping process lets requests finish, at the most. The longest is a waiting claim
#: (ATF_WORKER_CLAIM_WAIT_S, 5 s; at most 20 s), so a drain takes about that long; remote workers
#: ride through a restart that answers again within their heartbeat budget (3 x 5 s).
graceful_timeout = env_int("ATF_WEB_GRACEFUL_TIMEOUT_S", 25)
#: gunicorn's control socket (`gunicornc`) is off: its default path ($XDG_RUNTIME_DIR or
#: ~/.gunicorn/gunicorn.ctl) is one per user, so a second gunicorn of the same user (another
#: instance, the demo, a test) would take it over. ATF_WEB_CONTROL_SOCKET=PATH turns it on at a
#: path of this instance's own.
control_socket = os.environ.get("ATF_WEB_CONTROL_SOCKET", "")
control_socket_disable = not control_socket

# The threads of one process share a pool of this many database connections.
os.environ.setdefault("ATF_DB_POOL_SIZE", "8")

# Fair shares of a process's threads (tasks_api/fair_share.py): one team's requests in progress
# may hold a quarter of them (a waiting claim holds a waiting share instead: it takes a thread
# but no processor time), one team's waiting claims an eighth; claims wait on half of them at
# most, on a Redis pool of that many connections of their own. Every other team keeps the rest.
for _name, _share in (("ATF_API_CONCURRENT_PER_TEAM", 4), ("ATF_API_CONCURRENT_PER_TOKEN", 4),
                      ("ATF_API_WAITING_CLAIMS", 2), ("ATF_API_WAITING_CLAIMS_PER_TEAM", 8),
                      ("ATF_API_WAITING_CLAIMS_PER_TOKEN", 8)):
    os.environ.setdefault(_name, str(max(1, threads // _share)))

# Requests that run at once, all teams together (tasks_api/admission.py): as many as the process
# has database connections, so that none waits for one; the others wait for a turn, handed to
# the team that runs the fewest, and one team runs at most half of them, or
# ATF_API_ACTIVE_REQUESTS_PER_BUSY_TEAM (1) while a lighter team is active in the process.
os.environ.setdefault("ATF_API_ACTIVE_REQUESTS", os.environ["ATF_DB_POOL_SIZE"])
