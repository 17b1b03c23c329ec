"""Shared option choices: the request fields' choices are the library's kinds."""

from __future__ import annotations

import dataclasses

from specband.artifacts.request import TrainRequest
from specband.core.optionspec import option_spec
from specband.deploy.launch import LaunchRequest
from specband.devices import DEVICE_KINDS
from specband.harness.request import SweepRequest
from specband.sweeps.dataset import FEATURE_KINDS


def _choices(request: type, name: str) -> tuple[str, ...] | None:
    spec = option_spec(next(f for f in dataclasses.fields(request) if f.name == name))
    assert spec is not None
    return spec.choices


def test_the_device_choices_are_the_device_kinds() -> None:
    assert _choices(SweepRequest, "device") == DEVICE_KINDS
    assert set(_choices(LaunchRequest, "device") or ()) <= set(DEVICE_KINDS)


def test_the_feature_choices_are_the_feature_kinds() -> None:
    assert _choices(TrainRequest, "features") == FEATURE_KINDS


def test_help_says_what_the_option_does_in_that_command(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name, value in {"COLUMNS": "400", "NO_COLOR": "1"}.items():
        monkeypatch.setenv(name, value)
    sweep = " ".join(run_cli("sweep", "--help").stdout.split())
    # markdown help kept <out> (it was read as an HTML tag: "default: .gpu-state.json")
    assert "GPU state file (default: <out>.gpu-state.json)." in sweep and "(default: <out>.logs/)" in sweep
    schedule = " ".join(run_cli("schedule", "--help").stdout.split())
    assert "--max-speed-loss" not in schedule and "without --models, --algo is trained on it in memory" in schedule
    launch = " ".join(run_cli("launch", "--help").stdout.split())
    assert "--max-speed-loss" not in launch and "With --set-power-limit auto" in launch and "within 2% of" in launch
    recommend = " ".join(run_cli("recommend", "--help").stdout.split())
    assert "within --max-speed-loss of the fastest" in recommend
