"""Every count and duration option has an upper bound (specband.core.limits, each with its
basis), declared with typer's own ``min``/``max``: one ``error:`` line, exit 2, nothing
written, before any memory is taken for the count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specband.core.limits import (
    MAX_BOOTSTRAP_RESAMPLES,
    MAX_NEW_TOKENS,
    MAX_NUM_PROMPTS,
    MAX_REPEATS,
    MAX_TIMEOUT_S,
)

SWEEP = ("sweep", "--target", "m", "--draft", "d", "--dry-run")
LAUNCH = ("launch", "--target", "m", "--draft", "d", "-b", "4", "--device", "none", "--dry-run")


def _above(option: str, bound: float) -> str:
    return f"error: Invalid value for '{option}': Input should be less than or equal to {bound}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((*SWEEP, "--repeats", "99999999999"), _above("--repeats", MAX_REPEATS)),
        (("simulate", "--repeats", str(MAX_REPEATS + 1)), _above("--repeats", MAX_REPEATS)),
        (("evaluate", "--bootstrap", "999999999999"), _above("--bootstrap", MAX_BOOTSTRAP_RESAMPLES)),
        ((*SWEEP, "--port", "65536"), _above("--port", 65535)),
        ((*LAUNCH, "--port", "65536"), _above("--port", 65535)),
        ((*SWEEP, "--launch-timeout", "1e300"), _above("--launch-timeout", MAX_TIMEOUT_S)),
        ((*LAUNCH, "--launch-timeout", "1e300"), _above("--launch-timeout", MAX_TIMEOUT_S)),
        ((*SWEEP, "--request-timeout", "1e300"), _above("--request-timeout", MAX_TIMEOUT_S)),
        ((*SWEEP, "--cooldown", "1e300"), _above("--cooldown", MAX_TIMEOUT_S)),
        ((*SWEEP, "--num-prompts", str(MAX_NUM_PROMPTS + 1)), _above("--num-prompts", MAX_NUM_PROMPTS)),
        ((*SWEEP, "--max-new-tokens", str(MAX_NEW_TOKENS + 1)), _above("--max-new-tokens", MAX_NEW_TOKENS)),
        (("emulate", "--load-time", "1e300"), _above("--load-time", MAX_TIMEOUT_S)),
        (("emulate", "--seed", str(2**32)), _above("--seed", 2**32 - 1)),
    ],
)
def test_a_count_above_its_bound_is_one_error_line(
    run_cli: Any, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    res = run_cli(*args)
    assert res.exit_code == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), res.stderr
    assert res.stdout == "" and list(Path().iterdir()) == []


@pytest.mark.parametrize("value", ["1e-300", "0.5", "2001", "1e300"])
@pytest.mark.parametrize("command", [("train",), ("evaluate",), SWEEP])
def test_a_power_limit_outside_1_to_2000_w_is_refused(run_cli: Any, command: tuple[str, ...], value: str) -> None:
    res = run_cli(*command, "--power-limit", value)
    assert res.exit_code == 2
    assert res.stderr.strip() == (f"error: --power-limit must be a power limit in W in [1, 2000], got {float(value)!r}")


@pytest.mark.parametrize("command", [SWEEP, LAUNCH])
@pytest.mark.parametrize("retry", ["0.65", "0.8"])
def test_a_retry_mem_fraction_not_below_the_first_is_refused(
    run_cli: Any, command: tuple[str, ...], retry: str
) -> None:
    res = run_cli(*command, "--mem-fraction-static", "0.65", "--retry-mem-fraction", retry)
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        f"error: --retry-mem-fraction {float(retry):g} must be below --mem-fraction-static 0.65: "
        "the retry after a failed launch asks for less memory"
    )
    assert res.stdout == ""


@pytest.mark.parametrize("command", [SWEEP, LAUNCH])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--dtype", "nosuch"), "error: --dtype 'nosuch': sglang 0.5.23 takes one of auto, half, float16, "),
        (("--attention-backend", ""), "error: --attention-backend '': sglang 0.5.23 takes one of triton, "),
        (("--host", "1.2.3.4; rm -rf"), "error: --host '1.2.3.4; rm -rf': expected an IP address or a hostname"),
        (("--engine", "vllm", "--dtype", ""), "error: --dtype '': vLLM takes one of auto, half, float16, "),
    ],
)
def test_a_server_value_the_engine_refuses_is_one_error_line(
    run_cli: Any, command: tuple[str, ...], args: tuple[str, ...], message: str
) -> None:
    res = run_cli(*command, "--sglang-version", "0.5.23", *args) if "vllm" not in args else run_cli(*command, *args)
    assert res.exit_code == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), res.stderr
    assert res.stdout == "" and list(Path().iterdir()) == []
