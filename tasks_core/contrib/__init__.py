"""Optional integrations: the backend of Django's tasks framework (`django.tasks`, or the
django-tasks backport on Django 5.2), and helpers for the commands."""
