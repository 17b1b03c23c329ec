"""The sweep pipeline's pieces (specband.harness.pipeline): the plan, the results, the sink."""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from pathlib import Path
from typing import Any

from specband.contract.actions import ACTIONS
from specband.contract.record import RUN_COLUMNS, SweepRecord
from specband.harness.pipeline import (
    NoReporter,
    PlannedRun,
    RowSink,
    RunResult,
    SweepPlan,
    SweepSummary,
    grid,
)

A0, A10, A5 = ACTIONS[0], ACTIONS[10], ACTIONS[5]


def _plan(one_launch_per_config: bool, done: frozenset[tuple[int, int]] = frozenset()) -> SweepPlan:
    points = tuple(grid((1, 4, 8), (A0, A10, A5)))
    return SweepPlan(points, 2, (A0, A10, A5), one_launch_per_config, done)


def test_one_launch_per_run_in_pass_then_grid_order_skipping_what_is_written() -> None:
    plan = _plan(False, done=frozenset({(0, 0), (4, 1)}))
    keys = [unit.runs[0].key for unit in plan.units()]
    assert keys == [(i, 0) for i in range(1, 9)] + [(i, 1) for i in range(9) if i != 4]
    assert [r.key for r in plan.runs()] == keys  # one run per unit
    assert all(not u.shared and len(u.runs) == 1 for u in plan.units())


def test_one_launch_per_config_serves_the_batch_sizes_of_an_action_in_increasing_order() -> None:
    plan = _plan(True, done=frozenset({(1, 0)}))  # bs 1 of (3,4,8) in pass 0 is written
    units = plan.units()
    assert [(u.repeat, u.action, [r.batch_size for r in u.runs]) for u in units] == [
        (0, A0, [1, 4, 8]),
        (0, A10, [4, 8]),
        (0, A5, [1, 4, 8]),
        (1, A0, [1, 4, 8]),
        (1, A10, [1, 4, 8]),
        (1, A5, [1, 4, 8]),
    ]
    assert all(u.shared and u.max_batch_size == 8 for u in units)
    assert len(plan.runs()) == 2 * 9 - 1


def test_a_result_is_plain_data_for_another_process() -> None:
    run = PlannedRun(grid((4,), (A10,))[0], 1)
    result = RunResult(run, SweepRecord(index=0, repeat=1, batch_size=4, steps=3, topk=4, num_draft_tokens=8), 2)
    assert pickle.loads(pickle.dumps(result)) == result
    assert run.label() == "bs=4 (3,4,8) r1"


class _Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)


def test_the_sink_writes_counts_and_warns_once_about_a_rejected_draft() -> None:
    writer = _Rows()
    summary = SweepSummary(Path("s.jsonl"))
    sink = RowSink(writer, NoReporter(), summary)
    points = grid((1, 4), (A10,))
    ok = SweepRecord(index=0, repeat=0, batch_size=1, steps=3, topk=4, num_draft_tokens=8, speed_tok_s=float("nan"))
    flagged = SweepRecord(index=1, repeat=0, batch_size=4, steps=3, topk=4, num_draft_tokens=8, draft_flag="x")
    failed = SweepRecord(index=1, repeat=1, batch_size=4, steps=3, topk=4, num_draft_tokens=8, error="oom")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sink.consume(RunResult(PlannedRun(points[0], 0), ok, 1))
        sink.consume(RunResult(PlannedRun(points[1], 0), flagged, 0))
        sink.consume(RunResult(PlannedRun(points[1], 1), dataclasses.replace(flagged, repeat=1), 0))
        sink.consume(RunResult(PlannedRun(points[1], 1), failed, 2))
    assert len(caught) == 1 and "bs=4 (3,4,8) r0" in str(caught[0].message)
    contract_row = [c for c in RUN_COLUMNS if c != "action_set"]  # written on extended-grid rows only
    assert [list(r) for r in writer.rows] == [contract_row] * 4  # every row in the published order
    assert writer.rows[0]["speed_tok_s"] is None  # JSON has no NaN
    assert (summary.written, summary.runs, summary.launches, summary.errors) == (4, 4, 3, 1)
    assert summary.draft_rejected == 2
    assert summary.error_messages == ["bs=4 (3,4,8) r1: oom"]
