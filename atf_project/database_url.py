"""DATABASE_URL to Django's DATABASES entry, with the multi-host form PostgreSQL's clients know.

`postgres://user@db-a:5432,db-b:5432/atf?target_session_attrs=read-write` names a primary and
its standby: every connection tries the hosts in order and keeps the first that takes writes,
so after a failover each process finds the new primary by itself (libpq's multi-host
connection strings, which psycopg 3 follows). dj_database_url reads one host only; this module
hands it the first and puts every host and port in HOST and PORT as comma-separated lists,
which Django passes to psycopg unchanged. The query string's parameters (target_session_attrs,
sslmode, connect_timeout, ...) become the connection's OPTIONS.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import dj_database_url

#: `scheme://[userinfo@]hosts/rest`: the hosts part is what dj_database_url cannot read.
_URL = re.compile(r"^(?P<scheme>[a-z0-9+.-]+://)(?:(?P<userinfo>[^@/]*)@)?(?P<hosts>[^/?#]*)"
                  r"(?P<rest>.*)$", re.IGNORECASE)
#: One entry of the hosts list: `host`, `host:port`, `[v6]` or `[v6]:port`.
_HOST = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<name>[^:\[\]]*))(?::(?P<port>\d+))?$")
DEFAULT_PORT = "5432"
#: A comma that begins the next URL of a list (`scheme://` follows it), not a host's.
_NEXT_URL = re.compile(r",\s*(?=[a-z][a-z0-9+.-]*://)", re.IGNORECASE)


def parse(url: str, **options: Any) -> dj_database_url.DBConfig:
    """`dj_database_url.parse(url, **options)`, which also reads a list of hosts.

    Raises ValueError naming the entry when one of several hosts cannot be read.
    """
    match = _URL.match(url)
    if match is None or "," not in match["hosts"]:
        return dj_database_url.parse(url, **options)
    hosts, ports = [], []
    for entry in match["hosts"].split(","):
        host = _HOST.match(entry.strip())
        if host is None or not (host["v6"] or host["name"]):
            raise ValueError(f"cannot read host {entry!r} of {match['hosts']!r} "
                             "(expected host[:port],host[:port],...)")
        hosts.append(host["v6"] or host["name"])
        ports.append(host["port"] or DEFAULT_PORT)
    userinfo = f"{match['userinfo']}@" if match["userinfo"] is not None else ""
    first = f"[{hosts[0]}]" if ":" in hosts[0] else hosts[0]
    config = dj_database_url.parse(f"{match['scheme']}{userinfo}{first}{match['rest']}",
                                   **options)
    config["HOST"] = ",".join(hosts)
    config["PORT"] = ",".join(ports)
    return config


def split_list(urls: str) -> list[str]:
    """The URLs of a comma-separated list (ATF_SHARD_URLS), each of which may name several
    hosts: a comma followed by `scheme://` begins the next URL, any other is a host's."""
    return [url.strip() for url in _NEXT_URL.split(urls) if url.strip()]


def compose(database: Mapping[str, Any], *, scheme: str = "postgres") -> str:
    """The URL of a PostgreSQL DATABASES entry, several hosts included (parse's inverse for
    the parts a child process needs: user, password, hosts, ports, name, string options)."""
    user = quote(database.get("USER") or "", safe="")
    password = quote(database.get("PASSWORD") or "", safe="")
    userinfo = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    hosts = str(database.get("HOST") or "").split(",")
    ports = str(database.get("PORT") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    netloc = ",".join(
        (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
        for host, port in zip(hosts, ports, strict=True)
    )
    query = {key: value for key, value in (database.get("OPTIONS") or {}).items()
             if isinstance(value, str)}
    url = f"{scheme}://{userinfo}{netloc}/{quote(str(database.get('NAME') or ''), safe='')}"
    return f"{url}?{urlencode(query)}" if query else url
