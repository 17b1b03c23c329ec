"""The extended grid end to end on the emulator (issue 19 item 5): a sweep with a 7-step
chain and an 8-wide tree, then train, evaluate, recommend and schedule on its rows; a
resume with the contract grid is refused in one line."""

from __future__ import annotations

import json

from tests.servers import one_error_line

from specband.contract.actions import EXTENDED_ACTIONS


def test_the_extended_grid_runs_end_to_end_on_the_emulator(run_cli, sweep_args, tmp_path) -> None:
    out = tmp_path / "ext.jsonl"
    grid = ("--batch-sizes", "1,2", "--actions", "0 3,1,4 7,1,8 1,8,2", "--one-launch-per-config")
    res = run_cli(*sweep_args, *grid, "--max-new-tokens", "64", "--num-prompts", "2", "--repeats", "2", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert "does not load as a training sweep" not in res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 16 and all(r["error"] is None and r["action_set"] == "extended" for r in rows)
    run = {(r["steps"], r["topk"], r["num_draft_tokens"]) for r in rows}
    assert run == {(0, 0, 0), (3, 1, 4), (7, 1, 8), (1, 8, 2)}
    seven = [r for r in rows if r["steps"] == 7]
    assert all(1.0 < r["accept_length"] <= 8 for r in seven)

    # one file, one action set: resuming it with the contract grid is refused before any launch
    res = run_cli(*sweep_args, "--batch-sizes", "1,2", "--actions", "0 10", "--resume", "--out", out)
    assert res.exit_code == 2
    assert "its rows are of the extended action set, this sweep's is contract" in one_error_line(res.stderr)
    assert len(out.read_text().splitlines()) == 16

    models = tmp_path / "models"
    res = run_cli("train", out, "--out", models, "--actions", "extended")
    assert res.exit_code == 0, res.stderr
    manifest = json.loads((models / "specband.json").read_text())
    assert manifest["action_set"] == "extended" and len(manifest["actions"]) == 44
    assert {EXTENDED_ACTIONS[i] for i in manifest["batch_sizes"]["1"]["allowed"]} == {
        (0, 0, 0), (3, 1, 4), (7, 1, 8), (1, 8, 2)
    }  # fmt: skip

    res = run_cli("evaluate", out, "--actions", "extended", "--holdout", "repeat", "--json", "--bootstrap", "50")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["holdout"]["kind"] == "repeat" and report["algorithms"] == ["lookup_table"]
    oracles = {tuple(o["action"]) for b in report["features"]["pre"]["batch_sizes"] for o in b["oracles"]}
    assert oracles and oracles <= {(0, 0, 0), (3, 1, 4), (7, 1, 8), (1, 8, 2)}  # extended indices, reported as triples

    res = run_cli("recommend", "-b", "1", "--models", models, "--actions", "extended", "--format", "json")
    assert res.exit_code == 0, res.stderr
    pick = json.loads(res.stdout)
    table = json.loads((models / "lookup_table" / "model.json").read_text())
    assert pick["action"] == table["1"]["config"] and pick["action_set"] == "extended"

    # the schedule's K per batch size is the best chain by the folder's measured mean reward
    # (topk 1 and the baseline, lowest index on ties); on an emulator timed by the wall clock a
    # loaded machine can make the baseline best at both batch sizes, and then vLLM's schedule
    # is refused (K = 0 everywhere): both outcomes are read from the data, never assumed
    best = {}
    for bs in ("1", "2"):
        means = manifest["batch_sizes"][bs]["mean_reward"]
        chains = {i: m for i, m in means.items() if EXTENDED_ACTIONS[int(i)][1] <= 1}
        best[int(bs)] = EXTENDED_ACTIONS[int(max(chains, key=lambda i: (chains[i], -int(i))))][0]
    sched = tmp_path / "schedule.json"
    res = run_cli("schedule", "--engine", "vllm", "--models", models, "--actions", "extended", "--out", sched)
    if not any(best.values()):
        assert res.exit_code == 2 and "the schedule never speculates" in one_error_line(res.stderr)
        assert not sched.exists()
        return
    assert res.exit_code == 0, res.stderr
    ranges = json.loads(sched.read_text())["num_speculative_tokens_per_batch_size"]
    for bs, k in best.items():
        assert next(n for lo, hi, n in ranges if lo <= bs <= hi) == k
    assert {n for _, _, n in ranges} <= {0, 3, 7}


def test_a_sweep_checks_its_actions_where_they_enter_not_per_run(run_cli, sweep_args, tmp_path, monkeypatch) -> None:
    import specband.contract.actions as actions

    checked: list[tuple[int, ...]] = []
    original = actions.validate_action

    def counting(triple):  # type: ignore[no-untyped-def]
        checked.append(tuple(triple))
        return original(triple)

    monkeypatch.setattr(actions, "validate_action", counting)
    out = tmp_path / "s.jsonl"
    grid = ("--batch-sizes", "1,2", "--actions", "0 3,1,4 7,1,2", "--repeats", "1")
    res = run_cli(*sweep_args, *grid, "--max-new-tokens", "16", "--num-prompts", "1", "--out", out)
    assert res.exit_code == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and {(r["steps"], r["topk"], r["num_draft_tokens"]) for r in rows} == {
        (0, 0, 0), (3, 1, 4), (7, 1, 8)
    }  # fmt: skip
    # the two triples of --actions when parsed ("0" is an index), then each written row once when
    # the file is read back as a sweep; the six runs (launch line, record, draft flag) check nothing
    assert checked[:2] == [(3, 1, 4), (7, 1, 2)]
    assert sorted(checked[2:]) == sorted((r["steps"], r["topk"], r["num_draft_tokens"]) for r in rows)
