"""Settings for the test suite: the project's settings on real PostgreSQL and Redis.

Each variable can still be overridden from the environment; concurrent runs on one machine
pick their own ATF_TEST_DATABASE_NAME, Redis database and ATF_QUEUE_PREFIX. In a parallel run
each xdist worker then takes a Redis database and a queue prefix of its own (tests/parallel.py).
"""

import os

from tests.parallel import isolate_worker

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("ATF_QUEUE_PREFIX", "atftest")
isolate_worker(os.environ)
os.environ.setdefault("ATF_LOG_LEVEL", "WARNING")
# The demo lambdas are the tests' workload (manage.py children inherit it too).
os.environ.setdefault("ATF_DEMO", "1")

from atf_project.settings import *  # noqa: E402,F403

# Tests create users by the hundred; a slow password hash only costs time here.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
