"""`schedule()` against the machine's single-row INSERT+COMMIT, side by side (ATF; issue 38).

`enqueue_single` and the machine's limit are measured minutes apart, by different processes;
on a machine whose speed drifts from one minute to the next (one box here ran the
INSERT+COMMIT loop at 1,481/s and at 2,860/s within the hour) their ratio says as much about
the drift as about ATF. Here one process, in ATF's venv (`python -m bench.atf_probe schedule`),
runs ROUNDS rounds of CALLS INSERT+COMMITs and then CALLS `schedule()` calls, each in its own
transaction, and the ratio is taken round by round: the target is at least 0.5×.
"""

from __future__ import annotations

from bench.measure import Plan, Target
from bench.measure_growth import run_probe

ROUNDS = 5
#: Calls a round, per task of the plan's single enqueue (2,000 in a full run).
CALLS_PER_ENQUEUED = 0.1


def enqueue_vs_commit(target: Target, plan: Plan) -> dict[str, float]:
    """`schedule()` ÷ INSERT+COMMIT, median of the rounds; the caller's CPU per call, and the
    two rates (medians) the ratios came from."""
    if target.name != "atf":
        return {}
    target.reset()
    calls = max(100, int(plan.enqueue_n * CALLS_PER_ENQUEUED))
    answer = run_probe(target, "schedule", str(ROUNDS), str(calls))
    return {"enqueue_vs_commit": answer["ratio"], "enqueue_vs_commit_cpu_us": answer["cpu_us"],
            "enqueue_vs_commit_schedule": answer["schedule_per_s"],
            "enqueue_vs_commit_insert_commit": answer["insert_commit_per_s"]}
