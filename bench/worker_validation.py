"""The worker API's validation of a 1,000-item `finish/` body, in-process and without a
database: `FinishSerializer(data=body).is_valid()` and the reported ends the view takes from
it, on valid results, then on invalid ones.

    DJANGO_SETTINGS_MODULE=tests.settings .venv/bin/python -m bench.worker_validation

Prints the median and range of `ROUNDS` rounds of each, in this process's CPU time (steadier
than wall time on a shared machine); figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import django

ROUNDS = 15
ITEMS = 1000
ERROR = {"type": "ValueError", "message": "it broke", "traceback": "Traceback ...\n" * 20}


def valid_results() -> list[dict[str, Any]]:
    """Results as a remote worker sends them: mostly successes, some retries with an error."""
    return [{"id": n, "lease": 3, "outcome": "success", "result": {"order": n, "note": "x" * 40},
             "started_at": "2026-11-23T02:00:00.123456+00:00"} if n % 10 else
            {"id": n, "lease": 3, "outcome": "retry", "error": ERROR, "delay_s": 2.5,
             "started_at": "2026-11-23T02:00:00.123456+00:00"}
            for n in range(1, ITEMS + 1)]


def invalid_results() -> list[dict[str, Any]]:
    """The same results, each with one bad field."""
    faults: list[dict[str, Any]] = [{"lease": -1}, {"outcome": "won"}, {"delay_s": "soon"},
                                    {"started_at": "yesterday"}, {"result": "nul\x00"}]
    return [{**item, **faults[index % len(faults)]}
            for index, item in enumerate(valid_results())]


def _cpu_ms(body: dict[str, Any], valid: bool) -> list[float]:
    from tasks_api.worker_serializers import FinishSerializer

    times = []
    for _ in range(ROUNDS):
        started = time.process_time()
        form = FinishSerializer(data=body)
        assert form.is_valid() is valid
        if valid:
            assert len(form.reported_ends()) == ITEMS
        times.append((time.process_time() - started) * 1000)
    return times


def main() -> None:
    django.setup()
    for name, results, valid in [("valid", valid_results(), True),
                                 ("invalid", invalid_results(), False)]:
        body = {"worker": "host:1:bench", "results": results}
        _cpu_ms(body, valid)  # warm up
        times = _cpu_ms(body, valid)
        print(f"finish/, {ITEMS} {name} results: {statistics.median(times):.2f} ms CPU "
              f"({min(times):.2f}-{max(times):.2f})")


if __name__ == "__main__":
    main()
