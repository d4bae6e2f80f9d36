"""`manage.py runconsumer`: the store consumer."""

from __future__ import annotations

import logging
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from tasks_core import lambda_sync, shards
from tasks_core.conf import atf_settings
from workers import checks, signals
from workers.consumer import ShardConsumers

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
        parser.add_argument("--shard", action="append", metavar="ALIAS", dest="shards",
                            help="consume only this shard's due rows (a database alias of "
                                 "ATF_STORE_SHARDS; repeatable; default: every shard)")

    def handle(self, *args: Any, **options: Any) -> None:
        named = options["shards"] or list(shards.aliases())
        if unknown := [alias for alias in named if alias not in shards.aliases()]:
            raise CommandError(f"--shard {unknown[0]}: no such shard (ATF_STORE_SHARDS: "
                               f"{', '.join(shards.aliases())})")
        queue = checks.require_store_and_queue()
        lambda_sync.sync_to_store()
        consumer = ShardConsumers(list(dict.fromkeys(named)), batch_size=options["batch_size"],
                                  poll_interval_s=options["poll_interval"], queue=queue)
        signals.on_stop(consumer.stop)
        logger.info("consumer started: poll interval %ss, batch size %d, queue backend %s",
                    options["poll_interval"], options["batch_size"], atf_settings.queue_backend)
        if shards.sharded():
            logger.info("consuming shard(s) %s", ", ".join(dict.fromkeys(named)))
        consumer.run()
        logger.info("consumer stopped")
