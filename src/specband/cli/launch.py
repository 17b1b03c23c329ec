"""``specband launch``: read the idle GPU, pick the flags, start sglang with them.

The last step of the workflow (sweep -> train -> evaluate -> launch): the pre-launch GPU
state (temperature, memory used and utilisation of the idle GPU, from NVML) goes to the
policy, whose pick is launched with the same command line and environment as a sweep run
(docs/FACTS.md §1: ``--mem-fraction-static`` 0.65 retried once at 0.55, ``--dtype float16``,
``--cuda-graph-max-bs`` and ``--max-running-requests`` = the batch size,
``SGLANG_RECORD_STEP_TIME=1`` ...). The server runs in the foreground until it exits (its
exit status is returned) or Ctrl-C / SIGTERM, which stops its whole process group (exit
status 0: stopping is the normal way to end it).

Every option is checked before the GPU is read; notes about the GPU and the pick are
printed only once the pick is known to be launchable, so bad input (a bad option, a
speculative pick without ``--draft``) is one ``error:`` line. ``--device nvml`` without
NVML is an error; ``--device auto`` then goes on without telemetry, with a note.
"""

from __future__ import annotations

from pathlib import Path

import typer

from specband.cli.options import (
    IdleStateDevice,
    gpu_index_option,
    launch_timeout_option,
    port_option,
    sglang_version_option,
)
from specband.limits import MAX_BATCH_SIZE


def register(app: typer.Typer) -> None:
    """Add ``launch`` to ``app``."""

    @app.command("launch")
    def launch_command(
        target: str = typer.Option(..., "--target", help="Target model path or id (--model-path).", metavar="MODEL"),
        draft: str | None = typer.Option(
            None,
            "--draft",
            help="EAGLE3 draft model path or id (needed unless the pick is the baseline).",
            metavar="MODEL",
        ),
        batch_size: int | None = typer.Option(
            None,
            "--batch-size",
            "-b",
            help="Concurrent requests (--max-running-requests and the CUDA-graph batch "
            "size). Required unless --schedule is given.",
            show_default=False,
            min=1,
            max=MAX_BATCH_SIZE,
            metavar="N",
        ),
        schedule: str | None = typer.Option(
            None,
            "--schedule",
            help="Adaptive speculation with a per-batch-size schedule: an sglang "
            "--speculative-adaptive-config FILE, or 'auto' (build it from --algo/--models, as `specband schedule`). "
            "The batch size then moves: neither --max-running-requests nor the CUDA-graph batch size is pinned.",
            show_default=False,
            metavar="FILE|auto",
        ),
        max_running_requests: int | None = typer.Option(
            None,
            "--max-running-requests",
            help="With --schedule: sglang's --max-running-requests.",
            show_default=False,
            min=1,
            max=MAX_BATCH_SIZE,
            metavar="N",
        ),
        algo: str = typer.Option("lookup_table", "--algo", "-a", help="Algorithm to ask.", metavar="NAME"),
        models: Path | None = typer.Option(
            None,
            "--models",
            "-m",
            help="Artifact folder (from `specband train`, or the model card's layout). Default: ./specband-models "
            "when it exists and holds the --algo algorithm, else the embedded policy trained on the bundled "
            "published measurements (as `specband recommend`).",
            show_default=False,
            metavar="DIR",
        ),
        data: Path | None = typer.Option(
            None, "--data", help="Sweep restricting a foreign folder's picks to measured configs.", metavar="SWEEP"
        ),
        state: tuple[float, float, float] | None = typer.Option(
            None,
            "--state",
            help="Idle GPU state TEMP_C MEM_MB UTIL_PCT instead of reading it from --device.",
            metavar="TEMP_C MEM_MB UTIL_PCT",
        ),
        device_kind: IdleStateDevice = typer.Option(
            IdleStateDevice.auto,
            "--device",
            help="Where to read the idle GPU state: auto (NVML, else none with a note), nvml (an error without "
            "NVML) or none.",
            metavar="KIND",
        ),
        gpu_index: int | None = gpu_index_option(),
        server_command: str = typer.Option(
            "python -m sglang.launch_server", "--server-command", help="The launcher.", metavar="CMD"
        ),
        host: str = typer.Option("127.0.0.1", "--host", metavar="ADDR"),
        port: int = port_option(),
        mem_fraction: float = typer.Option(0.65, "--mem-fraction-static", metavar="F"),
        retry_mem_fraction: float = typer.Option(
            0.55, "--retry-mem-fraction", help="One retry after a failed launch (docs/FACTS.md §1).", metavar="F"
        ),
        dtype: str = typer.Option("float16", "--dtype", metavar="DTYPE"),
        attention_backend: str = typer.Option("flashinfer", "--attention-backend", metavar="NAME"),
        server_arg: list[str] = typer.Option(
            [], "--server-arg", help="Extra server flags, split like a shell line (repeatable).", metavar="ARG"
        ),
        launch_timeout: float = launch_timeout_option(),
        log: Path = typer.Option(
            Path("specband-server.log"), "--log", help="Server output (appended).", metavar="FILE"
        ),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the command line and exit."),
        sglang_version: str | None = sglang_version_option(),
        trust_pickle: bool = typer.Option(
            False, "--trust-pickle", help="Unpickle a joblib file specband did not write (runs code from it)."
        ),
        allow_rope_mismatch: bool = typer.Option(
            False, "--allow-rope-mismatch", help="Launch even when the draft's RoPE settings differ from the target's."
        ),
        gpu: str | None = typer.Option(
            None,
            "--gpu",
            help="Your GPU as a simulator profile (h100-sxm, ...), checked against the data's. Default: NVML's.",
            show_default=False,
            metavar="PROFILE",
        ),
        allow_transfer: bool = typer.Option(
            False,
            "--allow-transfer",
            help="Launch a pick whose data came from another GPU, model or power limit (the difference is "
            "printed as a warning) instead of stopping.",
        ),
    ) -> None:
        """Pick the flags for this batch size and GPU state, then run sglang with them in the
        foreground. Ctrl-C (or SIGTERM) stops the server and everything it started; exit
        status 0, since stopping is the normal way to end it. If the server exits on its
        own, its exit status is returned. Every option is checked before the GPU is read:
        bad input is one error line (exit 2)."""
        import contextlib
        import dataclasses

        from specband.artifacts import validate_algorithms
        from specband.cli.core import _note, say
        from specband.cli.harness import _sglang_version, _warn
        from specband.errors import ConfigError
        from specband.harness.runner import check_mem_fractions
        from specband.harness.server import ServerConfig, build_launch_command, format_launch, split_server_args
        from specband.state import check_gpu_state

        # 1. every option, before the GPU is read
        if batch_size is None and schedule is None:
            raise ConfigError("--batch-size is required (or --schedule FILE|auto for a server whose batch size moves)")
        if max_running_requests is not None and (schedule is None or batch_size is not None):
            raise ConfigError("--max-running-requests goes with --schedule and without --batch-size (which pins it)")
        if schedule is not None and draft is None:
            raise ConfigError(
                "--schedule runs adaptive EAGLE3 speculation: it needs --draft (the EAGLE3 draft model path)"
            )
        check_mem_fractions(mem_fraction, retry_mem_fraction)
        if not launch_timeout > 0:
            raise ConfigError(f"--launch-timeout must be > 0 s, got {launch_timeout}")
        if state is not None:
            check_gpu_state(*state, option="--state")
        config = ServerConfig(  # checks --target, --port and --server-command
            model_path=target,
            draft_model_path=draft,
            server_command=server_command,
            host=host,
            port=port,
            dtype=dtype,
            attention_backend=attention_backend,
            extra_args=split_server_args(server_arg, command="launch"),
        )
        validate_algorithms([algo])
        from specband.doctor import check_pair_before_launch

        rope_note = check_pair_before_launch(target, draft, allow_rope_mismatch=allow_rope_mismatch)
        log_created = _open_log(log, dry_run=dry_run)
        # 2. the sglang version, the GPU and the pick; the warning and notes wait until the pick
        #    is known to be launchable, so that bad input (e.g. a speculative pick without
        #    --draft) is one error line
        version, version_source, version_warning = _sglang_version(sglang_version, server_command, {})
        config = dataclasses.replace(config, sglang_version=version)
        notes: list[str] = [] if rope_note is None else [rope_note]
        from specband.transfer import user_setup

        setup = user_setup(target, draft, gpu, gpu_index or 0, read_gpu=device_kind.value != "none")
        auto_file: Path | None = None
        try:
            if schedule is not None:
                from specband.cli.schedule import new_auto_schedule_file, schedule_for_launch

                if schedule == "auto" and not dry_run:
                    auto_file = new_auto_schedule_file(log)
                pick = schedule_for_launch(
                    schedule,
                    algo,
                    models,
                    data,
                    notes=notes,
                    auto_file=auto_file,
                    log=log,
                    setup=setup,
                    allow_transfer=allow_transfer,
                )
                extra = [
                    *pick["extra_args"],
                    *(["--max-running-requests", str(max_running_requests)] if max_running_requests else []),
                ]
                config = dataclasses.replace(config, extra_args=(*extra, *config.extra_args))
            else:
                from specband.recommend import recommend

                assert batch_size is not None  # checked above: --batch-size or --schedule
                telemetry = state if state is not None else _read_idle_state(device_kind.value, gpu_index or 0, notes)
                result = recommend(
                    batch_size,
                    algo,
                    models,
                    telemetry,
                    draft,
                    data,
                    trust_pickle=trust_pickle,
                    setup=setup,
                    allow_transfer=allow_transfer,
                )
                from specband.explain import answer_lines

                notes += [*result.notes, *answer_lines(result.pick)]
                pick = result.pick
            action = tuple(pick["action"])
            if draft is None and any(action):
                raise ConfigError(
                    f"{algo} picks {action} for batch size {batch_size}, a speculative action that needs --draft "
                    f"(the EAGLE3 draft model path)"
                )
            command = build_launch_command(config, action, batch_size, mem_fraction)
        except BaseException:
            if log_created:
                with contextlib.suppress(OSError):
                    if log.stat().st_size == 0:
                        log.unlink()
            _remove(auto_file)
            raise
        _warn(version_warning)
        for note in notes:
            _note(note)
        if schedule is not None:
            _note(f"adaptive speculation with {pick['path']}: tiers {sorted(pick['entries'])}, starting at {action}")
        else:
            _note(
                f"{algo} picks {pick['action']} for batch size {batch_size} "
                f"(features={pick['features']}, state={[round(v, 4) for v in pick['state']]}, source: {pick['source']})"
            )
        if dry_run:
            typer.echo(f"# sglang {version} ({version_source})")
            typer.echo(format_launch(command))
            return

        from specband.devices.base import Clock
        from specband.harness.interrupts import interrupts_as_keyboard_interrupt
        from specband.harness.runner import MeasureSettings, launch_with_retry

        settings = MeasureSettings(
            server=config,
            mem_fraction_static=mem_fraction,
            retry_mem_fraction=retry_mem_fraction,
            launch_timeout_s=launch_timeout,
        )

        server = None
        with interrupts_as_keyboard_interrupt():  # SIGTERM too; never inside an import or the server's start
            try:
                outcome = launch_with_retry(settings, Clock(), action, batch_size, log)
                server = outcome.server
                retried = (
                    f" (retried at --mem-fraction-static {outcome.retry_mem_fraction:g})"
                    if outcome.retry_mem_fraction
                    else ""
                )
                say(
                    f"sglang ready at {server.base_url} with "
                    + (
                        f"{tuple(action)} for batch size {batch_size}"
                        if schedule is None
                        else f"the schedule {pick['path']}"
                    )
                    + f"{retried}; "
                    f"log: {log}; Ctrl-C stops it (exit status 0)",
                )
                code = server.proc.wait() if server.proc is not None else 0
                _note(f"the server exited with status {code}; the end of its log:\n{server.log_tail(2000)}")
                raise typer.Exit(code)
            except KeyboardInterrupt:
                _note("stopping the server")
            finally:
                if server is not None:
                    server.stop()
                _remove(auto_file)  # the launch's own schedule file: sglang read it at start-up


def _open_log(path: Path, *, dry_run: bool = False) -> bool:
    """Check that the server log can be appended to, creating it if missing; True when
    it was created. A dry run checks the same and leaves nothing: an existing log is
    opened for appending without a write, a missing one is created and removed at once.

    Raises:
        ConfigError: ``"--log <path>: cannot write (<reason>)"`` (a folder, a missing
            folder, no permission).
    """
    import errno
    import os

    from specband.errors import ConfigError

    existed = path.exists()
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666))
    except OSError as exc:
        raise ConfigError(f"--log {path}: cannot write ({exc.strerror or exc})") from None
    if dry_run and not existed:
        _remove(path)
        return False
    return not existed


def _remove(path: Path | None) -> None:
    """Remove ``path`` (nothing for ``None`` or a file already gone)."""
    if path is not None:
        import contextlib

        with contextlib.suppress(OSError):
            path.unlink()


def _read_idle_state(kind: str, index: int, notes: list[str]) -> tuple[float, float, float] | None:
    """``(temp_c, mem_used_mb, util_pct)`` of the idle GPU, or ``None`` when no telemetry
    (missing readings get the contract's fills downstream); what the device says on the
    way (e.g. no NVML, so no telemetry) is appended to ``notes``."""
    if kind == "none":
        return None
    import warnings

    from specband.dataset import DEFAULT_GPU_MEM_USED_MB, DEFAULT_GPU_TEMP_C, DEFAULT_GPU_UTIL_PCT
    from specband.devices import open_device

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        device = open_device(kind, index=index)
    notes += [str(warning.message) for warning in caught]
    with device:
        temp, mem, util = device.read_temp_c(), device.read_mem_used_mb(), device.read_util_pct()
    if temp is None and mem is None and util is None:
        return None
    return (
        DEFAULT_GPU_TEMP_C if temp is None else temp,
        DEFAULT_GPU_MEM_USED_MB if mem is None else mem,
        DEFAULT_GPU_UTIL_PCT if util is None else util,
    )
