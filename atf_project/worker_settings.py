"""Settings of a lambda host that runs remote workers: the project's apps, and no database.

    DJANGO_SETTINGS_MODULE=atf_project.worker_settings \\
        python manage.py runworker --api https://atf.example.com --token "$WORKER_TOKEN"

A remote worker reaches ATF only through its API with a worker token: it needs the lambdas'
code and nothing of the store. DATABASES is empty, so any query would fail loudly; the cache is
a dummy. (ATF_REDIS_URL keeps its default only to satisfy the settings check; a remote worker
never connects to it. A lambda that uses Redis itself, as demo.record does, reads it.)
"""

from atf_project.settings import *  # noqa: F403

DATABASES = {}  # no database at all, on purpose
CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
