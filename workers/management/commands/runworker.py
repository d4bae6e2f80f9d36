"""`manage.py runworker [LAMBDA ...] [--threads N] [--processes N]`."""

from __future__ import annotations

import logging
import sys
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from tasks_core import lambda_sync, registry
from tasks_core.exceptions import AtfError
from workers import checks, signals
from workers.supervisor import Supervisor
from workers.transport import DirectTransport
from workers.worker import WorkerProcess

logger = logging.getLogger("workers.worker")


class Command(checks.LongRunningCommand):
    help = ("Run the tasks of some lambdas (all registered ones when none is named): a controller "
            "pulls their queues, executor threads run them.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("lambdas", nargs="*", metavar="LAMBDA",
                            help="lambdas this worker runs (default: all registered)")
        parser.add_argument("--threads", type=checks.positive_int,
                            default=settings.ATF_WORKER_THREADS, metavar="N",
                            help="executor threads per process (default %(default)s)")
        parser.add_argument("--processes", type=checks.positive_int, default=1, metavar="N",
                            help="worker processes, restarted when they die (default 1: this "
                                 "process works itself)")

    def handle(self, *args: Any, **options: Any) -> None:
        names = options["lambdas"] or registry.names()
        unknown = [name for name in names if name not in registry.names()]
        if unknown:
            raise CommandError(f"unknown lambda(s): {', '.join(unknown)}; registered: "
                               f"{', '.join(registry.names())}")
        if not names:
            raise CommandError("no lambdas are registered: add a lambdas.py to an installed app")
        queue = checks.require_store_and_queue()
        if options["processes"] > 1:
            queue.close()
            supervisor = Supervisor(["runworker", *names, "--threads", str(options["threads"]),
                                     "--verbosity", str(options["verbosity"])],
                                    processes=options["processes"])
            signals.on_stop(supervisor.stop, on_second=supervisor.kill)
            supervisor.run()
            return
        lambda_sync.sync_to_store()
        try:
            worker = WorkerProcess(names, threads=options["threads"],
                                   transport=DirectTransport(queue))
        except AtfError as exc:
            raise CommandError(str(exc)) from exc
        signals.on_stop(worker.stop)
        if exit_code := worker.run():
            sys.exit(exit_code)
