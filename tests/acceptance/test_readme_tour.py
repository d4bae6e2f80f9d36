"""The README's tour, run as written: its shell commands, taken from README.md, in a fresh bash
against a running `manage.py atf_demo`.

The commands of the tour's `console` blocks (a line that starts with `$ `, and the lines it
continues with a trailing backslash) run in one bash, in the repository root, with an
environment as bare as a new terminal's. Three things differ from a reader's machine, each
substituted here: the demo's port (a free one instead of 8000), the virtualenv (the one
running this test instead of the clone's `.venv`), and where the demo keeps its store and
queues (this test run's database and Redis, so that no one else's data is touched).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tasks_core.models import TaskEntity
from tests.conftest import ROOT, Processes, subprocess_env, wait_for
from tests.ports import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TOUR_HEADING = "## A five-minute tour"
CONSOLE_BLOCK = re.compile(r"^```console\n(.*?)^```", re.MULTILINE | re.DOTALL)


def tour_commands(readme: str) -> list[str]:
    """The shell commands of the tour section's console blocks, in order, each on one string."""
    start = readme.index(TOUR_HEADING)
    end = readme.find("\n## ", start + len(TOUR_HEADING))
    commands: list[str] = []
    for block in CONSOLE_BLOCK.findall(readme[start:end if end > 0 else None]):
        continued = False
        for line in block.splitlines():
            if continued:
                commands[-1] += "\n" + line
            elif line.startswith("$ "):
                commands.append(line[2:])
            else:
                continue  # the output the README shows
            continued = line.endswith("\\")
    return commands


def test_the_tour_reads_its_commands_from_the_readme() -> None:
    commands = tour_commands((ROOT / "README.md").read_text())
    assert commands[:2] == ["source .venv/bin/activate", "export ATF_DEMO=1"]
    assert any("curl" in command and "\\\n" in command for command in commands)
    assert commands[-1] == "python manage.py atf_status --once"


def test_the_readme_tour_runs_as_written_in_a_fresh_shell(processes: Processes) -> None:
    # Given the demo, running as `make demo` runs it (on a free port), when the tour's
    # commands run in a new shell of the clone
    port = free_port()
    store = subprocess_env()
    demo = processes.start("atf_demo", "--port", str(port), "--interval", "0",
                           env={**store, "ATF_DEMO": "1", "ATF_SHUTDOWN_GRACE_S": "5",
                                "WEB_CONCURRENCY": "1"})
    try:
        ran = run_the_tour(demo, port, store)
    finally:
        stop_like_ctrl_c(demo)
    # Then every command succeeded, the GET read the task the POST made, and the task ran
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    assert '"detail"' not in ran.stdout, ran.stdout  # an API error (401, 404, …)
    # (curl's answers end without a newline: the next command's output follows on their line)
    posted, read = (json.JSONDecoder().raw_decode(ran.stdout[at.start():])[0]
                    for at in re.finditer(r'\{"id":', ran.stdout))
    assert (read["id"], read["lambda"]) == (posted["id"], "demo.sleep")
    # (the tour waits 2 s for it; a loaded test machine may need longer)
    wait_for(lambda: TaskEntity.objects.filter(pk=posted["id"], status="success").exists(),
             timeout_s=30, message="the tour's task to succeed")
    assert TaskEntity.objects.get(pk=posted["id"]).result == {"slept": 1.0}


def run_the_tour(demo: subprocess.Popen, port: int,
                 store: dict[str, str]) -> subprocess.CompletedProcess[str]:
    log = Path(demo.log_path)  # type: ignore[attr-defined]
    wait_for(lambda: "demo is running" in log.read_text() or demo.poll() is not None,
             timeout_s=90, message="the demo to start")
    assert demo.poll() is None, log.read_text()[-4000:]
    # The tour's commands, one after another, in a new shell of the clone
    script = "\n".join(["set -euo pipefail", *tour_commands((ROOT / "README.md").read_text())])
    script = script.replace("localhost:8000", f"localhost:{port}").replace(
        "source .venv/bin/activate", f"source {Path(sys.prefix) / 'bin' / 'activate'}")
    fresh = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    where = {name: store[name] for name in ("DATABASE_URL", "REDIS_URL", "ATF_QUEUE_PREFIX",
                                            "ATF_DB_PREPARED_STATEMENTS")}
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env={**fresh, **where},
                          capture_output=True, text=True, timeout=90)


def stop_like_ctrl_c(demo: subprocess.Popen) -> None:
    """SIGINT, as Ctrl-C sends it: the demo stops its gunicorn, consumer and worker (each in a
    session of its own, which a kill of the demo's group would leave running)."""
    demo.send_signal(signal.SIGINT)
    demo.wait(timeout=60)
