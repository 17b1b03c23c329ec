"""A profile's ``hardware.base`` chain: a loop (a file naming itself, two naming each other,
one reached through another spelling) or an over-long chain is one error line naming the
chain, never a RecursionError traceback (the trial's B30)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.servers import one_error_line

from specband.core.errors import ConfigError
from specband.sim.profile import MAX_PROFILE_DEPTH, load_profile

_BODY = (
    '[hardware]\nhardware = "X"\npower_limit_w = 450\nvram_mb = 24564\nmem_bandwidth_gbs = 1008\n'
    "peak_tflops = 165\nidle_power_w = 30\n"
)


def _profile(path: Path, base: str) -> Path:
    path.write_text(_BODY + f"base = {base!r}\n")
    return path


def test_a_profile_based_on_itself(tmp_path: Path) -> None:
    me = _profile(tmp_path / "self.toml", str(tmp_path / "self.toml"))
    with pytest.raises(ConfigError, match=r"loop \(hardware.base\): .*self.toml -> .*self.toml$"):
        load_profile(me)


def test_two_profiles_naming_each_other_and_an_alias(tmp_path: Path) -> None:
    a = _profile(tmp_path / "a.toml", str(tmp_path / "b.toml"))
    (tmp_path / "d").mkdir()
    _profile(tmp_path / "b.toml", str(tmp_path / "d" / ".." / "a.toml"))  # a spelt another way
    with pytest.raises(ConfigError) as exc:
        load_profile(a)
    assert str(exc.value).endswith(f"{tmp_path / 'a.toml'} -> {tmp_path / 'b.toml'} -> {tmp_path / 'a.toml'}")
    os.symlink(tmp_path / "a.toml", tmp_path / "link.toml")
    _profile(tmp_path / "c.toml", str(tmp_path / "link.toml"))
    with pytest.raises(ConfigError, match="in a loop"):
        load_profile(tmp_path / "c.toml")


def test_a_long_chain_is_bounded_and_a_short_one_loads(tmp_path: Path) -> None:
    for i in range(MAX_PROFILE_DEPTH + 5):
        _profile(tmp_path / f"p{i}.toml", str(tmp_path / f"p{i + 1}.toml") if i < MAX_PROFILE_DEPTH + 4 else "h100-sxm")
    with pytest.raises(ConfigError, match=f"chains more than {MAX_PROFILE_DEPTH} profiles"):
        load_profile(tmp_path / "p0.toml")
    assert load_profile(tmp_path / "p10.toml").hardware == "X"  # 59 levels down to the built-in


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--profile", "{p}", "--out", "{out}"],
        ["recommend", "--gpu", "{p}", "-b", "1"],
    ],
)
def test_commands_give_one_line_for_a_loop(run_cli, tmp_path: Path, command: list[str]) -> None:
    a = _profile(tmp_path / "a.toml", str(tmp_path / "b.toml"))
    _profile(tmp_path / "b.toml", str(a))
    args = [c.format(p=a, out=tmp_path / "o.jsonl") for c in command]
    result = run_cli(*args)
    assert result.exit_code == 2
    assert "profiles inherit from each other in a loop" in one_error_line(result.stderr)
    assert "Traceback" not in result.stderr and not (tmp_path / "o.jsonl").exists()
