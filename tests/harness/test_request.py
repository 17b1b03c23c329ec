"""The sweep's typed request: one declaration per option (SweepRequest's fields), checked
once by build_sweep, without the CLI."""

from __future__ import annotations

import dataclasses

import pytest

from specband.core.errors import ConfigError
from specband.core.optionspec import option_spec
from specband.harness.request import SweepRequest, build_sweep, dry_run_lines


def test_every_sweep_option_is_declared_once_with_help_and_panel() -> None:
    specs = [option_spec(f) for f in dataclasses.fields(SweepRequest)]
    flags = [s.flags[0] for s in specs if s is not None]
    # 42 + --power-limits (issue 20) + --cpu (issue 17) + --engine (23) + --plan, --profile, --acceptance-from (29)
    assert len(flags) == len(set(flags)) == 48
    # the five, and Output for where the rows go (--out, --resume, --dry-run, --quiet)
    assert {s.panel for s in specs if s is not None} == {"grid", "server", "telemetry", "fleet", "emulator", "output"}
    assert all(s.help.strip() for s in specs if s is not None)
    assert option_spec(next(f for f in dataclasses.fields(SweepRequest) if f.name == "plugged")) is None


def test_build_sweep_checks_values_once_and_assembles_the_settings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "s.jsonl"
    job = build_sweep(
        SweepRequest(
            target="t",
            draft="d",
            batch_sizes="1,4",
            actions="0 3,2,4",
            out=str(out),
            retry_mem_fraction=0,
            sglang_version="0.5.4",
        )
    )
    assert job.batch_sizes == (1, 4) and [tuple(a) for a in job.actions] == [(0, 0, 0), (3, 2, 4)]
    assert job.settings.retry_mem_fraction is None and job.settings.log_dir == tmp_path / "s.jsonl.logs"
    assert job.pool is None and job.setup is None and job.version.version == "0.5.4"
    lines = dry_run_lines(job)
    assert lines[0].startswith("# sglang 0.5.4") and len(lines) == 1 + 3 * 2 * 2  # a launch per (repeat, bs, action)
    assert not out.exists()
    with pytest.raises(ConfigError, match="--time-scale applies only to the emulator"):
        build_sweep(SweepRequest(target="t", draft="d", out=str(out), device="none", time_scale=2.0))
    with pytest.raises(ConfigError, match="--device emulated needs"):
        build_sweep(SweepRequest(target="t", draft="d", out=str(out), device="emulated"))
    with pytest.raises(ConfigError, match="--ray-address needs --ray"):
        build_sweep(SweepRequest(target="t", draft="d", out=str(out), ray_address="127.0.0.1:1"))


def test_a_new_sweep_option_is_one_field_and_its_use(run_cli) -> None:  # type: ignore[no-untyped-def]
    # --stop-grace: the field on SweepRequest, and stop_grace_s=r.stop_grace in build_sweep
    job = build_sweep(SweepRequest(target="t", draft="d", stop_grace=2.5, sglang_version="0.5.4"))
    assert job.settings.stop_grace_s == 2.5
    res = run_cli("sweep", "--help")
    assert res.exit_code == 0 and "--stop-grace" in res.stdout and "SIGKILL" in res.stdout
    bad = run_cli("sweep", "--target", "t", "--stop-grace", "-1", "--dry-run")
    assert bad.exit_code == 2 and "--stop-grace" in bad.stderr


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dtype": "nosuch"}, "--dtype 'nosuch': sglang 0.5.23 takes one of auto, half, float16, bfloat16, float, "),
        ({"dtype": ""}, "--dtype '': sglang 0.5.23 takes one of auto, "),
        ({"engine": "vllm", "sglang_version": None, "dtype": "fp8"}, "--dtype 'fp8': vLLM takes one of auto, half, "),
        ({"attention_backend": "nosuch"}, "--attention-backend 'nosuch': sglang 0.5.23 takes one of triton, "),
        ({"attention_backend": ""}, "--attention-backend '': sglang 0.5.23 takes one of triton, "),
        ({"host": ""}, "--host '': expected an IP address or a hostname"),
        ({"host": "ü🙂"}, "--host 'ü🙂': expected an IP address or a hostname"),
        ({"host": "1.2.3.4; rm -rf"}, "--host '1.2.3.4; rm -rf': expected an IP address or a hostname"),
        ({"host": "-a.example"}, "--host '-a.example': expected"),
        ({"host": "999.1.1.1"}, "--host '999.1.1.1': expected"),  # neither an address nor a hostname
        ({"host": "a" * 64}, f"--host '{'a' * 64}': expected"),  # a label of 64 characters
        ({"env": ["A B=1"]}, "--env 'A B=1': 'A B' is not a variable name"),
        ({"env": ["1A=x"]}, "--env 1A=x: '1A' is not a variable name"),
        ({"env": ["A-B=x"]}, "--env A-B=x: 'A-B' is not a variable name"),
    ],
)
def test_values_the_engine_or_a_shell_would_refuse_are_one_error(tmp_path, changes, message) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "s.jsonl"
    request = SweepRequest(target="t", draft="d", out=str(out), sglang_version="0.5.23", device="none")
    with pytest.raises(ConfigError) as info:
        build_sweep(dataclasses.replace(request, **changes))
    assert str(info.value).startswith(message)
    assert not out.exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "::1", "localhost", "gpu-node-7.example.com", "node.", "10.0.0.5"])
def test_ip_addresses_and_hostnames_are_hosts(host) -> None:  # type: ignore[no-untyped-def]
    job = build_sweep(SweepRequest(target="t", draft="d", host=host, dtype="bfloat16", attention_backend="auto",
                                   env=["X_1='$(id)'"], sglang_version="0.5.23", device="none"))  # fmt: skip
    assert job.settings.server.host == host and job.settings.server.env["X_1"] == "'$(id)'"
    assert job.settings.server.base_url == (f"http://[{host}]:30000" if ":" in host else f"http://{host}:30000")
    lines = dry_run_lines(job)
    assert f" --host {host} " in lines[1] and "X_1=''\"'\"'$(id)'\"'\"''" in lines[1]


def test_a_newer_sglang_than_specband_knows_is_one_note_and_the_newest_spellings() -> None:
    job = build_sweep(SweepRequest(target="t", draft="d", sglang_version="99.0.0", device="none"))
    note = "sglang 99.0.0 is newer than the newest release specband knows (0.5.23): flags are spelled as in sglang "
    assert job.notes.count(note + "0.5.23") == 1 and job.version.warning is None
    assert "--cuda-graph-max-bs-decode" in dry_run_lines(job)[1]  # 0.5.23's spelling
    known = build_sweep(SweepRequest(target="t", draft="d", sglang_version="0.5.23", device="none"))
    assert not any("newer than" in n for n in known.notes)
