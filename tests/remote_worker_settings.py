"""Settings of a remote worker's host in the tests: the shipped lambda-host settings (no
database), and a queue prefix nobody fills, so a worker that popped ATF's queues itself would
never get a task: every task a remote worker runs came through the API."""

from atf_project.worker_settings import *  # noqa: F403

ATF_QUEUE_PREFIX = "no-queues-on-a-remote-host"
