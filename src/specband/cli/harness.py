"""Harness commands: ``specband sweep``, ``specband emulate``, ``specband import-bench``.

Only typer and the standard library are imported at module level; the harness loads
inside the commands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from specband.cli.core import say
from specband.cli.options import (
    DeviceKind,
    check_batch_size_list,
    gpu_index_option,
    launch_timeout_option,
    port_option,
    sglang_version_option,
)
from specband.emulator.env import HARDWARE_ENV, MODEL_ENV, STATE_ENV, TIME_SCALE_ENV  # constants only
from specband.limits import MAX_NEW_TOKENS, MAX_NUM_PROMPTS, MAX_REPEATS, MAX_SEED, MAX_TIMEOUT_S

_EMULATOR_HELP = "For the emulator only: "


@contextlib.contextmanager
def _plain_warnings() -> Iterator[None]:
    """Show warnings as ``warning: <message>`` lines on stderr."""

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        say(f"warning: {message}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        previous = warnings.showwarning
        warnings.showwarning = show
        try:
            yield
        finally:
            warnings.showwarning = previous


def _file_option(option: str, text: str) -> Path:
    """``text`` as the path of a file to write: not empty, not a folder.

    Raises:
        ConfigError: ``"<option> '': must name a file"`` or
            ``"<option> <path>: is a folder; name a file ..."``.
    """
    from specband.errors import ConfigError
    from specband.fileio import given_path

    path = given_path(option, text)
    if path.name in ("", ".", ".."):
        raise ConfigError(f"{option} {text!r}: must name a file")
    if path.is_dir():
        raise ConfigError(f"{option} {text}: is a folder; name a file (e.g. {path / 'sweep.jsonl'})")
    return path


def _folder_option(option: str, text: str) -> Path:
    """``text`` as a folder to create or use: not empty, not an existing file.

    Raises:
        ConfigError: ``"<option> '': must name a folder"`` or
            ``"<option> <path>: is a file, not a folder"``.
    """
    from specband.errors import ConfigError
    from specband.fileio import given_path

    path = given_path(option, text)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {text}: is a file, not a folder")
    return path


def _parse_actions(text: str) -> tuple[Any, ...]:
    """``--actions``: ``all``, or action indices / triples separated by spaces or ``;``,
    each action once (an index and its triple are the same action).

    Raises:
        ConfigError: none, an index or triple that is not a contract action, or an action
            given twice (``--actions: (3,2,4) is given twice (as "3,2,4" and "7")``).
    """
    from specband.actions import ACTIONS, parse_action
    from specband.errors import ConfigError, InvalidActionError

    if text.strip().lower() == "all":
        return ACTIONS
    items = [p for p in text.replace(";", " ").split() if p]
    if not items:
        raise ConfigError("--actions must name at least one action ('all', indices or triples)")
    seen: dict[Any, str] = {}
    for item in items:
        try:
            action = parse_action(item)
        except InvalidActionError as exc:
            raise ConfigError(f"--actions: {exc}") from None
        if action in seen:
            raise ConfigError(f'--actions: {action} is given twice (as "{seen[action]}" and "{item}")')
        seen[action] = item
    return tuple(seen)


def _parse_env(pairs: list[str]) -> dict[str, str]:
    from specband.errors import ConfigError

    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _sglang_version(given: str | None, server_command: str, server_env: dict[str, str]) -> tuple[str, str, str | None]:
    """``(version, source, warning)`` of the sglang the flags are spelt for; ``warning`` is
    the line to print when the version had to be assumed (sglang not found in
    --server-command's interpreter), else ``None``. The caller prints it once every input
    is checked, so that bad input stays one ``error:`` line."""
    import os

    from specband.harness.sglang_flags import resolve_sglang_version

    version, source = resolve_sglang_version(given, server_command, {**os.environ, **server_env})
    warning = None
    if source == "assumed" and not _runs_emulator(server_command):
        warning = (
            f"cannot find sglang in --server-command's interpreter; spelling flags for sglang {version} "
            f"(pass --sglang-version)"
        )
    labels = {"detected": "found in the --server-command interpreter", "assumed": "assumed: sglang not found"}
    return version, labels.get(source, source), warning


def _warn(message: str | None) -> None:
    """Print ``warning: <message>`` on stderr (nothing for ``None``)."""
    if message is not None:
        say(f"warning: {message}", err=True)


def _load_workload(path: Path | None, target: str) -> dict[str, Any]:
    """``MeasureSettings`` keywords for ``--prompts`` (none: the built-in prompts)."""
    if path is None:
        return {}
    from specband.harness.workload import load_prompts

    workload = load_prompts(path, target)
    return {"prompts": workload.prompts, "workload": workload.name}


def _runs_emulator(command: str) -> bool:
    try:
        parts = shlex.split(command)
    except ValueError:
        return False
    return "emulate" in parts and any(p == "specband" or p.endswith("/specband") for p in parts)


class _RichReporter:
    """A rich progress bar with ETA on stderr, plus one line per finished run; ``warning``
    (e.g. sglang not found) is printed once, when the sweep starts running: after every
    check passed, so that bad input stays one ``error:`` line."""

    def __init__(self, quiet: bool, warning: str | None = None) -> None:
        from rich.console import Console

        self.warning = warning
        self.quiet = quiet
        self.console = Console(stderr=True)
        self.progress: Any = None
        self.task: Any = None
        #: ``--gpus``/``--ray``: GPU -> its progress line (runs written from that GPU)
        self.gpu_tasks: dict[str, Any] = {}

    def start(self, total: int, skipped: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        _warn(self.warning)
        self.warning = None
        if skipped:
            self.console.print(f"resuming: {skipped} runs already in the file")
        if self.quiet:
            return
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task("sweep", total=total)
        self.gpu_tasks = {}

    def run_started(self, point: Any, repeat: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=f"r{repeat} bs={point.batch_size} {point.action}")

    def run_finished(self, point: Any, repeat: int, row: dict[str, Any]) -> None:
        if self.progress is not None:
            self.progress.advance(self.task)
            if row.get("error"):
                self.progress.console.print(f"  error r{repeat} bs={point.batch_size} {point.action}: {row['error']}")

    def unit_finished(self, gpu: str, runs: int) -> None:
        """One line per GPU under the sweep's bar: the runs its worker wrote so far."""
        if self.progress is None:
            return
        if gpu not in self.gpu_tasks:
            self.gpu_tasks[gpu] = self.progress.add_task(f"  GPU {gpu}", total=None)
        self.progress.advance(self.gpu_tasks[gpu], runs)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def register(app: typer.Typer) -> None:
    """Add the sweep, emulate and import-bench commands to ``app``."""

    @app.command("sweep")
    def sweep_command(
        target: str = typer.Option(..., "--target", help="Target model path (--model-path).", metavar="MODEL"),
        draft: str | None = typer.Option(None, "--draft", help="EAGLE3 draft model path.", metavar="MODEL"),
        batch_sizes: str = typer.Option(
            "1,4,8,16",
            "--batch-sizes",
            help="Batch sizes, e.g. '1,4,8,16'.",
            metavar="LIST",
            callback=check_batch_size_list,
        ),
        actions: str = typer.Option(
            "all",
            "--actions",
            help="'all', or action indices / triples separated by spaces or ';' (e.g. '0 10 3,2,4').",
            metavar="LIST",
        ),
        repeats: int = typer.Option(
            3, "--repeats", min=1, max=MAX_REPEATS, help="Full passes over the grid.", metavar="N"
        ),
        out_text: str = typer.Option("sweep.jsonl", "--out", help="Output JSONL (one row per run).", metavar="FILE"),
        resume: bool = typer.Option(False, "--resume", help="Skip (index, repeat) rows already in --out."),
        one_launch_per_config: bool = typer.Option(
            False, "--one-launch-per-config", help="One server per action serves every batch size."
        ),
        server_command: str = typer.Option(
            "python -m sglang.launch_server",
            "--server-command",
            help="Server launcher; flags are appended.",
            metavar="CMD",
        ),
        host: str = typer.Option("127.0.0.1", "--host", metavar="ADDR"),
        port: int = port_option(),
        mem_fraction: float = typer.Option(
            0.65, "--mem-fraction-static", help="sglang's --mem-fraction-static of the first launch.", metavar="F"
        ),
        retry_mem_fraction: float = typer.Option(
            0.55,
            "--retry-mem-fraction",
            help="Retry a failed launch once at this fraction (0: no retry).",
            metavar="F",
        ),
        dtype: str = typer.Option("float16", "--dtype", metavar="DTYPE"),
        attention_backend: str = typer.Option(
            "flashinfer",
            "--attention-backend",
            help="Pinned for every action; 'auto' = flashinfer only when topk > 1 (upstream).",
            metavar="NAME",
        ),
        num_prompts: int = typer.Option(
            16,
            "--num-prompts",
            help="Timed requests: max(num_prompts, bs).",
            min=1,
            max=MAX_NUM_PROMPTS,
            metavar="N",
        ),
        max_new_tokens: int = typer.Option(512, "--max-new-tokens", min=1, max=MAX_NEW_TOKENS, metavar="N"),
        launch_timeout: float = launch_timeout_option(),
        cooldown: float = typer.Option(
            5.0, "--cooldown", help="Seconds to sleep after each server stops.", min=0.0, max=MAX_TIMEOUT_S, metavar="S"
        ),
        server_arg: list[str] = typer.Option([], "--server-arg", help="Extra server flag (repeatable).", metavar="ARG"),
        env: list[str] = typer.Option([], "--env", help="KEY=VALUE for the server (repeatable).", metavar="KEY=VALUE"),
        device_kind: DeviceKind = typer.Option(
            DeviceKind.auto,
            "--device",
            help="auto (the emulator's GPU with `specband emulate`, else NVML, else no telemetry with a warning), "
            "nvml (an error without NVML), zeus, emulated or none.",
            metavar="KIND",
        ),
        gpu_index: int | None = gpu_index_option(),
        power_limit: float | None = typer.Option(
            None, "--power-limit", help="Power limit in W (finite, > 0) when NVML gives none.", metavar="W"
        ),
        hardware: str | None = typer.Option(
            None, "--hardware", help="'hardware' column (default: the GPU's name).", metavar="NAME"
        ),
        log_dir_text: str | None = typer.Option(
            None, "--log-dir", help="Server logs (default: <out>.logs/).", metavar="DIR"
        ),
        time_scale: float = typer.Option(
            1.0, "--time-scale", help=_EMULATOR_HELP + "real seconds per emulated second.", metavar="X"
        ),
        emulator_state: Path | None = typer.Option(
            None,
            "--emulator-state",
            help=_EMULATOR_HELP + "GPU state file (default: <out>.gpu-state.json).",
            metavar="FILE",
        ),
        emulator_hardware: str = typer.Option(
            "rtx4060-laptop",
            "--emulator-hardware",
            help=_EMULATOR_HELP + "performance-model profile.",
            metavar="PROFILE",
        ),
        emulator_model: str = typer.Option(
            "calibrated",
            "--emulator-model",
            help=_EMULATOR_HELP + "calibrated (specband.sim) or module:function (a PerformanceModel factory).",
            metavar="MODEL",
        ),
        quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
        sglang_version: str | None = sglang_version_option(),
        request_timeout: float = typer.Option(
            1800.0,
            "--request-timeout",
            help="Seconds one request may take before the run is an error row.",
            max=MAX_TIMEOUT_S,
            metavar="S",
        ),
        prompts_file: Path | None = typer.Option(
            None,
            "--prompts",
            help='Workload: JSONL of {"prompt": ...} or {"messages": [...]} (through the target\'s chat '
            "template), or a ShareGPT JSON file. Default: the 4 built-in prompts.",
            metavar="FILE",
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Print every server command line in launch order and exit; nothing runs."
        ),
        allow_rope_mismatch: bool = typer.Option(
            False, "--allow-rope-mismatch", help="Sweep even when the draft's RoPE settings differ from the target's."
        ),
        shard: str | None = typer.Option(
            None,
            "--shard",
            help="Measure only shard K of N (e.g. 1/4); join the files with `specband merge`.",
            metavar="K/N",
        ),
        gpus: str | None = typer.Option(
            None,
            "--gpus",
            help="One worker per GPU (NVML indices, e.g. 0,1); worker i serves on --port + i.",
            metavar="LIST",
        ),
        ray: bool = typer.Option(False, "--ray", help="Each launch as a Ray task needing one GPU (specband[ray])."),
        ray_address: str | None = typer.Option(
            None,
            "--ray-address",
            help="With --ray: a running cluster (default: RAY_ADDRESS, else a local Ray).",
            metavar="ADDRESS",
        ),
        adaptive: bool = typer.Option(
            False,
            "--adaptive",
            help="Pass 0 measures every config; later passes (up to --repeats) only those that may still be "
            "the pick, and the baseline. Rows get a 'propensity' column.",
        ),
        cpu: bool = typer.Option(
            False,
            "--cpu",
            help="Serve on the CPU with sglang's CPU engine: sets its flags, --dtype bfloat16, --attention-backend "
            "intel_amx, its environment and --device none (throughput-only rewards).",
        ),
    ) -> None:
        """Measure every (batch size, action): launch sglang, warm up, time a batch with
        energy telemetry, write one JSONL row per run (flushed and fsynced)."""
        from specband.batchlist import parse_batch_sizes
        from specband.devices import open_device
        from specband.devices.base import Clock, check_power_limit_w
        from specband.errors import ConfigError
        from specband.harness.pipeline import SweepPlan, grid
        from specband.harness.runner import MeasureSettings
        from specband.harness.server import ServerConfig, format_launch, split_server_args
        from specband.harness.shards import parse_shard
        from specband.harness.sweep import existing_rows, planned_sweep, run_sweep

        with _plain_warnings():
            out = _file_option("--out", out_text)
            shard_spec = None if shard is None else parse_shard(shard)
            pool = _worker_pool(gpus, ray, ray_address, port, gpu_index)
            _check_adaptive(adaptive, shard_spec, repeats)
            log_dir = None if log_dir_text is None else _folder_option("--log-dir", log_dir_text)
            bs = tuple(parse_batch_sizes(batch_sizes))
            acts = _parse_actions(actions)
            grid(bs, acts)  # distinct, positive batch sizes and distinct actions
            # every option is checked before any device, model or server is touched
            check_power_limit_w(power_limit)
            if not request_timeout > 0:
                raise ConfigError(f"--request-timeout must be > 0 s, got {request_timeout}")
            if not (retry_mem_fraction == 0 or 0 < retry_mem_fraction < 1):
                raise ConfigError(f"--retry-mem-fraction must be 0 (no retry) or in (0, 1), got {retry_mem_fraction}")
            extra_args = split_server_args(server_arg)
            clock = Clock(time_scale)
            kind = device_kind.value
            if kind == "auto" and _runs_emulator(server_command):
                kind = "emulated"
            server_env = _parse_env(env)
            cpu_note = None
            if cpu:
                from specband.harness.cpu_serving import apply_cpu_preset

                preset = apply_cpu_preset(
                    server_command, dtype=dtype, attention_backend=attention_backend, extra_args=extra_args,
                    env=server_env, device_kind=device_kind.value, hardware=hardware,
                    cache_dir=out.with_name(out.name + ".sglang-cache"),
                )  # fmt: skip
                dtype, attention_backend, extra_args = preset.dtype, preset.attention_backend, preset.extra_args
                server_env, kind, hardware, cpu_note = preset.env, preset.device_kind, preset.hardware, preset.note
            emulated = None
            if kind == "emulated":
                from specband.emulator.models import load_performance_model

                state = emulator_state or out.with_name(out.name + ".gpu-state.json")
                model = load_performance_model(emulator_model, emulator_hardware)
                emulated = {
                    "state_path": state,
                    "model": model,
                    "hardware": emulator_hardware,
                    "time_scale": time_scale,
                }
                server_env.update(
                    {
                        STATE_ENV: str(state.resolve()),
                        TIME_SCALE_ENV: repr(time_scale),
                        HARDWARE_ENV: emulator_hardware,
                        MODEL_ENV: emulator_model,
                    }
                )
            elif time_scale != 1.0:
                raise ConfigError("--time-scale applies only to the emulator (--device emulated)")
            server = ServerConfig(
                model_path=target,
                draft_model_path=draft,
                server_command=server_command,
                host=host,
                port=port,
                dtype=dtype,
                attention_backend=attention_backend,
                extra_args=extra_args,
                env=server_env,
            )
            workload = _load_workload(prompts_file, target)
            # its warning is printed once every check passed: when the sweep starts running
            version, version_source, version_warning = _sglang_version(sglang_version, server_command, server_env)
            server = dataclasses.replace(server, sglang_version=version)
            settings = MeasureSettings(
                server=server,
                mem_fraction_static=mem_fraction,
                retry_mem_fraction=retry_mem_fraction if retry_mem_fraction > 0 else None,
                num_prompts=num_prompts,
                max_new_tokens=max_new_tokens,
                launch_timeout_s=launch_timeout,
                cooldown_s=cooldown,
                hardware=hardware,
                log_dir=log_dir or out.with_name(out.name + ".logs"),
                health_poll_s=1.0 if time_scale == 1.0 else 0.5,
                sample_period_s=0.1 if time_scale == 1.0 else max(0.005, min(0.1, 0.5 * time_scale)),
                request_timeout_s=request_timeout,
                time_scale=time_scale,
                **workload,
            )
            if dry_run:
                plan, _ = planned_sweep(
                    existing_rows(out),
                    SweepPlan(tuple(grid(bs, acts)), repeats, tuple(acts), one_launch_per_config),
                    settings,
                    out,
                    resume=resume,
                    adaptive=adaptive,
                    shard=shard_spec,
                )
                _warn(version_warning)
                if cpu_note:
                    say(f"note: {cpu_note}", err=True)
                typer.echo(f"# sglang {version} ({version_source})")
                if adaptive:  # later passes are decided from pass 0's rewards
                    typer.echo("# --adaptive: pass 0 below; later passes re-measure only the contenders")
                    plan = dataclasses.replace(plan, repeats=1)
                for command in plan.launch_commands(settings):
                    typer.echo(format_launch(command))
                return

            if cpu_note:
                say(f"note: {cpu_note}", err=True)
            reporter = _RichReporter(quiet, version_warning)
            try:
                # the device is opened by the sweep once it holds the lock on --out and every
                # check passed (a refused sweep creates no emulated GPU state)
                summary = run_sweep(
                    settings,
                    lambda: open_device(kind, index=gpu_index or 0, power_limit_w=power_limit, emulated=emulated),
                    out,
                    batch_sizes=bs,
                    actions=acts,
                    repeats=repeats,
                    resume=resume,
                    one_launch_per_config=one_launch_per_config,
                    clock=clock,
                    reporter=reporter,
                    allow_rope_mismatch=allow_rope_mismatch,
                    shard=shard_spec,
                    pool=pool,
                    setup=_worker_setup(pool, settings, kind, power_limit, emulated, emulator_model),
                    adaptive=adaptive,
                )
            except KeyboardInterrupt:
                reporter.stop()
                say(
                    f"interrupted: the server was stopped; {out} holds complete rows only (continue with --resume)",
                    err=True,
                )
                raise
            finally:
                reporter.stop()
            _report(summary, out)
            if adaptive:
                _report_adaptive(out, grid(bs, acts), repeats)

    @app.command(
        "emulate",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def emulate_command(
        ctx: typer.Context,
        hardware: str | None = typer.Option(
            None,
            "--hardware",
            help="Performance-model profile (default rtx4060-laptop).",
            metavar="PROFILE",
            envvar=HARDWARE_ENV,
        ),
        perf_model: str | None = typer.Option(
            None,
            "--perf-model",
            help="calibrated (default) or module:function.",
            metavar="MODEL",
            envvar=MODEL_ENV,
        ),
        state_file: Path | None = typer.Option(
            None, "--state-file", help="Emulated GPU state file.", metavar="FILE", envvar=STATE_ENV
        ),
        time_scale: float | None = typer.Option(
            None, "--time-scale", help="Real seconds per emulated second.", metavar="X", envvar=TIME_SCALE_ENV
        ),
        load_time: float | None = typer.Option(
            None,
            "--load-time",
            help="Emulated seconds to load (default 30).",
            min=0.0,
            max=MAX_TIMEOUT_S,
            metavar="S",
        ),
        seed: int | None = typer.Option(None, "--seed", min=0, max=MAX_SEED, metavar="N"),
        fault: list[str] = typer.Option(
            [],
            "--fault",
            help="KIND[:key=value,...] (repeatable); kinds: launch_failure, oom_at_capture, die_mid_batch, "
            "missing_step_times, slow_health.",
            metavar="FAULT",
        ),
    ) -> None:
        """An sglang-compatible server driven by a performance model. Takes sglang's
        launch_server flags (e.g. --model-path M --port P --speculative-algorithm EAGLE3 ...)."""
        from specband.devices.base import Clock
        from specband.emulator.server import EmulatorOptions, parse_fault, serve

        with _plain_warnings():
            if time_scale is not None:
                Clock(time_scale)
            options = EmulatorOptions.from_env(
                hardware=hardware,
                model_spec=perf_model,
                state_file=str(state_file) if state_file else None,
                time_scale=time_scale,
                load_time_s=load_time,
                seed=seed,
                faults=[parse_fault(f) for f in fault],
            )
            Clock(options.time_scale)
            code = serve(list(ctx.args), options)
        raise typer.Exit(code)

    @app.command("import-bench")
    def import_bench_command(
        file: Path = typer.Argument(
            ..., help="JSONL written by sglang's scripts/playground/bench_speculative.py.", metavar="FILE"
        ),
        out_text: str | None = typer.Option(
            None, "--out", help="Sweep JSONL to write (default: <file>.sweep.jsonl).", metavar="FILE"
        ),
        hardware: str = typer.Option("unknown", "--hardware", help="'hardware' column.", metavar="NAME"),
        force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    ) -> None:
        """Convert sglang bench_speculative.py output into sweep rows (no energy: rewards
        come from throughput only)."""
        from specband.harness.import_bench import import_bench

        out = None if out_text is None else _file_option("--out", out_text)
        target = out or file.with_name(file.name + ".sweep.jsonl")
        result = import_bench(file, target, hardware=hardware, overwrite=force)
        print(
            "warning: sglang's bench_speculative.py measures no energy; these rows have no energy, "
            "so rewards come from throughput (and temperature) only",
            file=sys.stderr,
        )
        for line in result.skipped:
            say(f"skipped (not a contract action): {line}", err=True)
        say(f"wrote {len(result.rows)} rows to {result.out_path} ({len(result.skipped)} skipped)")


def _worker_pool(gpus: str | None, ray: bool, ray_address: str | None, port: int, gpu_index: int | None) -> Any:
    """The worker pool of ``--gpus`` or ``--ray`` (``None``: one GPU, in this process).

    Raises:
        ConfigError: ``--ray`` with ``--gpus``, ``--gpu-index`` with either (each names its
            GPUs itself), ``--ray-address`` without ``--ray``, a bad ``--gpus`` list, or Ray
            not installed (one line each).
    """
    from specband.errors import ConfigError
    from specband.harness.workers import LocalGpuPool, RayPool, parse_gpus

    if gpu_index is not None and (ray or gpus is not None):
        option = "--ray" if ray else "--gpus"
        raise ConfigError(f"--gpu-index and {option} exclude each other: {option} places each launch on its own GPU")
    if ray and gpus is not None:
        raise ConfigError("--ray and --gpus exclude each other: Ray places each launch on a GPU of its cluster")
    if ray_address is not None and not ray:
        raise ConfigError("--ray-address needs --ray")
    if ray:
        return RayPool(ray_address, base_port=port)
    return None if gpus is None else LocalGpuPool(parse_gpus(gpus), base_port=port)


def _check_adaptive(adaptive: bool, shard: Any, repeats: int) -> None:
    """Refuse ``--adaptive`` where it makes no sense.

    Raises:
        ConfigError: with ``--shard`` (a pass is planned from every config's rewards, which
            no shard has) or with ``--repeats 1`` (no pass to save).
    """
    from specband.errors import ConfigError

    if adaptive and shard is not None:
        raise ConfigError("--adaptive and --shard exclude each other: each pass is planned from every shard's rows")
    if adaptive and repeats < 2:
        raise ConfigError("--adaptive needs --repeats >= 2: pass 0 measures everything, later passes save runs")


def _report_adaptive(out: Path, points: Any, repeats: int) -> None:
    """Print the runs and GPU-seconds the adaptive sweep saved."""
    from specband.harness.adaptive import adaptive_savings
    from specband.harness.sweep import read_rows_for_resume

    saved = adaptive_savings(read_rows_for_resume(out), points, repeats)
    typer.echo(
        f"--adaptive: {saved.runs} of {saved.runs_exhaustive} runs ({saved.runs_saved} saved), "
        f"{saved.gpu_s:.0f} GPU-s of an estimated {saved.gpu_s_exhaustive:.0f} ({saved.gpu_s_saved:.0f} saved)"
    )


def _worker_setup(
    pool: Any, settings: Any, kind: str, power_limit: float | None, emulated: dict[str, Any] | None, model: str
) -> Any:
    """The :class:`~specband.harness.fleet.GpuWorkerSetup` of a pool (``None`` without one)."""
    if pool is None:
        return None
    from specband.harness.fleet import GpuWorkerSetup

    emulator = None if emulated is None else {**emulated, "model": model}
    return GpuWorkerSetup(settings, kind, power_limit, emulator)


def _report(summary: Any, out: Path) -> None:
    """Print the sweep summary and check the file loads as a sweep."""
    from specband.dataset import load_sweep
    from specband.errors import DataError

    say(
        f"wrote {summary.written} rows ({summary.errors} errors) to {out}; skipped {summary.skipped}; "
        f"{summary.launches} server launches in {summary.elapsed_s:.1f} s"
    )
    if summary.one_launch_per_config:
        typer.echo(
            f"--one-launch-per-config saved {summary.launches_saved} launches "
            f"({summary.runs} runs, {summary.launches} launches)"
        )
    if not out.exists() or out.stat().st_size == 0:
        return
    try:
        load_sweep(out)
    except DataError as exc:
        say(f"warning: {out} does not load as a training sweep yet: {exc}", err=True)
