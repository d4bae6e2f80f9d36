"""`manage.py runworker [LAMBDA ...] [--threads N] [--async-slots N] [--processes N]
[--api URL --token TOKEN] [--with-consumer] [--reload]`."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from argparse import ArgumentParser
from typing import Any
from urllib.parse import urlsplit

from django.core.management.base import CommandError

from tasks_core import discovery, lambda_names, lambda_sync, registry, shards
from tasks_core.conf import atf_settings
from tasks_core.exceptions import AtfError
from workers import checks, consumer, db, reloading, replacement, signals
from workers.supervisor import Supervisor
from workers.transport import DirectTransport, Transport
from workers.worker import WorkerProcess

logger = logging.getLogger("workers.worker")


class Command(checks.LongRunningCommand):
    help = ("Run the tasks of some lambdas (all registered ones when none is named): a controller "
            "claims them, executor threads run them. With --api the worker reaches ATF only "
            "through its API, with a worker token: no database or Redis on this host.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("lambdas", nargs="*", metavar="LAMBDA",
                            help="lambdas this worker runs (default: all registered)")
        parser.add_argument("--threads", type=checks.positive_int,
                            default=checks.setting_default(atf_settings.worker_threads),
                            metavar="N",
                            help="executor threads per process (default %(default)s)")
        parser.add_argument("--async-slots", type=checks.positive_int,
                            default=checks.setting_default(atf_settings.worker_async_slots),
                            metavar="N",
                            help="tasks a process whose lambdas are all async runs at once "
                                 "on its event loop (default %(default)s)")
        parser.add_argument("--processes", type=checks.positive_int, default=1, metavar="N",
                            help="worker processes, restarted when they die (default 1: this "
                                 "process works itself)")
        parser.add_argument("--api", default=atf_settings.api_url, metavar="URL",
                            help="a remote worker: the ATF API's base URL (default "
                                 "ATF_API_URL; unset: reach the store and queues directly)")
        parser.add_argument("--token", default=atf_settings.api_token, metavar="TOKEN",
                            help="the worker token a remote worker presents (default "
                                 "ATF_API_TOKEN)")
        parser.add_argument("--reload", action="store_true",
                            help="development: restart the worker when the project's code "
                                 "changes (Django's autoreloader, as runserver)")
        # Given by this command itself (workers.replacement), never by a person.
        parser.add_argument(replacement.SUPERVISED_OPTION, action="store_true",
                            help=argparse.SUPPRESS)
        parser.add_argument(replacement.REPLACES_OPTION, metavar="REASON", help=argparse.SUPPRESS)
        parser.add_argument("--with-consumer", action="store_true",
                            help="also run the store consumer, as a thread of this process: "
                                 "one process instead of a worker and a runconsumer, for a "
                                 "small deployment (its default poll interval and batch size)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["with_consumer"] and (options["api"] or options["processes"] > 1):
            raise CommandError("--with-consumer runs the consumer in this one process: it "
                               "needs the store (no --api) and --processes 1")
        if options["reload"]:
            if options["processes"] > 1:
                raise CommandError("--reload restarts one worker process: leave out --processes")
            if not reloading.in_worker_process() and not discovery.broken_code():
                self._names(options)  # a mistyped name fails at once, not after a change
            # In the worker's process, broken code or a lambda renamed away is said in one
            # line, and the worker starts again at the next change.
            reloading.run(lambda on_stop: self._work(self._names(options), options,
                                                     on_stop=on_stop))
            return
        names = self._names(options)
        if options["processes"] > 1:
            self._transport(options).close()
            self._supervise(names, options)
            return
        if exit_code := self._work(names, options, on_stop=signals.on_stop):
            sys.exit(exit_code)

    @staticmethod
    def _names(options: dict[str, Any]) -> list[str]:
        """The lambdas named on the command line, or all registered ones; CommandError when
        one is not registered, none is, or the project's lambdas cannot be imported."""
        if broken := discovery.broken_code():
            raise CommandError(broken)
        for name in options["lambdas"]:
            if problem := lambda_names.problem(name):
                raise CommandError(problem)
        names = options["lambdas"] or registry.names()
        if unknown := [name for name in names if name not in registry.names()]:
            raise CommandError(f"lambda {', '.join(unknown)} "
                               f"{'is' if len(unknown) == 1 else 'are'} not registered; "
                               f"registered: {', '.join(registry.names())}")
        if not names:
            raise CommandError("no lambdas are registered: add a lambdas.py to an installed app")
        return names

    def _work(self, names: list[str], options: dict[str, Any], *,
              on_stop: reloading.OnStop) -> int:
        """Run a worker of `names` in this process until it is stopped; its exit status."""
        replacement.supervised = options["supervised"]
        try:
            worker = replacement.until_reachable(lambda: self._worker(names, options),
                                                 replaces=options["replaces"])
            on_stop(worker.stop)
            with contextlib.ExitStack() as stack:
                if options["with_consumer"]:
                    stack.enter_context(consumer.in_thread(
                        consumer.ShardConsumers(shards.aliases())))
                return worker.run()
        except AtfError as exc:
            raise CommandError(str(exc)) from exc

    def _worker(self, names: list[str], options: dict[str, Any]) -> WorkerProcess:
        """The worker process, its transport checked (a direct one: the store and queues)."""
        transport = self._transport(options)
        if isinstance(transport, DirectTransport):
            lambda_sync.sync_to_store()
            # the checks' and the sync's connections: from here the worker's calls borrow
            # its pools' (workers.store_connections)
            db.reset_connection()
        if not options["lambdas"]:  # all registered: those the transport may run
            names = self._runnable(names, transport)
        return WorkerProcess(names, threads=options["threads"], transport=transport,
                             async_slots=options["async_slots"])

    @staticmethod
    def _runnable(names: list[str], transport: Transport) -> list[str]:
        """The registered lambdas this worker may run (a remote worker: its token's team's)."""
        allowed = transport.heartbeat_timeouts_s(names)
        runnable = [name for name in names if name in allowed]
        if not runnable:
            raise CommandError("none of the registered lambdas may run here: "
                               f"{', '.join(names)} (a worker token runs its team's lambdas)")
        if skipped := sorted(set(names) - set(runnable)):
            logger.info("not running %s: unknown to ATF or another team's", ", ".join(skipped))
        return runnable

    def _transport(self, options: dict[str, Any]) -> Transport:
        """The direct transport after checking the store and queues; or the remote one."""
        if not options["api"]:
            return DirectTransport(checks.require_store_and_queue())
        url = urlsplit(options["api"])
        if url.scheme not in ("http", "https") or not url.netloc:
            raise CommandError(f"--api {options['api']!r}: give the API's base URL, e.g. "
                               "https://atf.example.com")
        if not options["token"]:
            raise CommandError("a remote worker needs a worker token: --token or ATF_API_TOKEN")
        # Imported here: only a remote worker needs requests (the distribution's [client] extra).
        from workers.http_transport import HttpTransport

        return HttpTransport(url=options["api"], token=options["token"],
                             claim_wait_s=atf_settings.worker_claim_wait_s,
                             timeout_s=atf_settings.api_timeout_s)

    def _supervise(self, names: list[str], options: dict[str, Any]) -> None:
        child_args = ["runworker", *names, "--threads", str(options["threads"]),
                      "--async-slots", str(options["async_slots"]),
                      "--verbosity", str(options["verbosity"]), replacement.SUPERVISED_OPTION]
        if options["api"]:
            # Children read the token from the environment they inherit, never a command line.
            if options["token"] != atf_settings.api_token:
                raise CommandError("with --processes, give the worker token in ATF_API_TOKEN, "
                                   "not --token")
            child_args += ["--api", options["api"]]
        supervisor = Supervisor(child_args, processes=options["processes"])
        signals.on_stop(supervisor.stop, on_second=supervisor.kill)
        supervisor.run()
