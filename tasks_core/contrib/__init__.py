"""Optional integrations: a backend for the django-tasks package, helpers for the commands."""
