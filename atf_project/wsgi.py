import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atf_project.settings")
application = get_wsgi_application()

# The URLconf and every view it names are imported now, as a server process starts, rather
# than by its first request, which would otherwise take a quarter of a second of CPU longer
# (and, with gunicorn, land in the middle of whatever traffic reaches a process last).
get_resolver().url_patterns  # noqa: B018 (the attribute's lookup is what imports them)
