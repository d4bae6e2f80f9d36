"""Secrets kept out of logs and error messages: a URL's password is shown as `***`."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def url(text: str) -> str:
    """`text` with the password of its user part replaced by `***` (`redis://:***@host:6379/0`);
    text that does not parse as a URL comes back as `***` whole, since it may be one."""
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:
        return "***"
    if not password:
        return text
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
