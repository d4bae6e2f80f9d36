"""ATF for Django: the task store, scheduling and lambdas (the domain of the distribution)."""

from __future__ import annotations

#: The version of the django-atf distribution (pyproject.toml reads it from here).
__version__ = "0.2.0.dev0"
