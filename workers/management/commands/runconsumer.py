"""`manage.py runconsumer`: the store consumer."""

from __future__ import annotations

import logging
from argparse import ArgumentParser
from typing import Any

from tasks_core import lambda_sync
from tasks_core.conf import atf_settings
from workers import checks, signals
from workers.consumer import from_settings

logger = logging.getLogger("workers.consumer")


class Command(checks.LongRunningCommand):
    help = "Run the store consumer: enqueue due tasks, and enqueue lost tasks again."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--poll-interval", type=checks.positive_float,
                            default=checks.setting_default(atf_settings.poll_interval_s),
                            metavar="SECONDS",
                            help="longest sleep between two polls (default %(default)s)")
        parser.add_argument("--batch-size", type=checks.positive_int,
                            default=checks.setting_default(atf_settings.consumer_batch_size),
                            metavar="N",
                            help="due rows taken in one pass, across lambdas "
                                 "(default %(default)s)")

    def handle(self, *args: Any, **options: Any) -> None:
        queue = checks.require_store_and_queue()
        lambda_sync.sync_to_store()
        consumer = from_settings(batch_size=options["batch_size"],
                                 poll_interval_s=options["poll_interval"], queue=queue)
        signals.on_stop(consumer.stop)
        logger.info("consumer started: poll interval %ss, batch size %d, queue backend %s",
                    options["poll_interval"], options["batch_size"], atf_settings.queue_backend)
        consumer.run()
        logger.info("consumer stopped")
