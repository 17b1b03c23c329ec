"""``specband launch`` as data: :class:`LaunchRequest` (its options, declared once),
:func:`plan_launch` (every check, the GPU's idle state, the pick or the schedule, the
command line) and :func:`serve_launch` (run sglang in the foreground until it exits or is
stopped). The CLI prints; it decides nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.artifacts.folder import validate_algorithms
from specband.contract.actions import Action
from specband.contract.state import check_gpu_state
from specband.core.errors import ConfigError
from specband.core.limits import MAX_BATCH_SIZE
from specband.core.optionspec import acceptance_from_field, option
from specband.deploy.answers import Pick, PowerLimitAnswer, SchedulePick
from specband.deploy.options import (
    algo_field,
    allow_modified_field,
    allow_transfer_field,
    data_field,
    gpu_field,
    models_field,
    state_field,
    trust_pickle_field,
)
from specband.deploy.recommend import AnswerRequest, FirstGuessSpec, answer
from specband.deploy.table import AnswerTable, FirstGuess, answer_table, explain_field
from specband.devices import open_device
from specband.devices.base import Clock
from specband.engines.base import Engine, engine_field, get_engine
from specband.engines.cpu import ServingOptions
from specband.engines.serverconfig import ServerConfig, build_launch_command, split_server_args
from specband.harness.gpu_limits import held_power_limit, launch_power_limit_w
from specband.harness.interrupts import interrupts_as_keyboard_interrupt
from specband.harness.request import (
    ENGINE_HELP,
    gpu_index_field,
    launch_timeout_field,
    port_field,
    server_field,
    sglang_version_field,
)

__all__ = ["LaunchPlan", "LaunchRequest", "plan_launch", "serve_launch"]


@dataclass(frozen=True)
class LaunchRequest:
    """Every option of ``specband launch``, as given (checked by :func:`plan_launch`)."""

    target: str = option(
        ..., "--target", help="Target model path or id (--model-path).", panel="setup", metavar="MODEL"
    )
    draft: str | None = option(
        None,
        "--draft",
        help="EAGLE3 draft model path or id (needed unless the pick is the baseline).",
        panel="setup",
        metavar="MODEL",
        show_default=False,
    )
    batch_size: int | None = option(
        None,
        "--batch-size",
        "-b",
        help="Concurrent requests (--max-running-requests and the CUDA-graph batch size). "
        "Required unless --schedule is given.",
        panel="pick",
        metavar="N",
        min=1,
        max=MAX_BATCH_SIZE,
        show_default=False,
    )
    schedule: str | None = option(
        None,
        "--schedule",
        help="Adaptive speculation with a per-batch-size schedule: an sglang --speculative-adaptive-config "
        "FILE, or 'auto' (build it from --algo/--models, as `specband schedule`). The batch size then moves: "
        "neither --max-running-requests nor the CUDA-graph batch size is pinned.",
        panel="pick",
        metavar="FILE|auto",
        show_default=False,
    )  # with --engine vllm: a --speculative-config file of `specband schedule --engine vllm`, or auto
    max_running_requests: int | None = option(
        None,
        "--max-running-requests",
        help="With --schedule: sglang's --max-running-requests (vLLM's --max-num-seqs).",
        panel="pick",
        metavar="N",
        min=1,
        max=MAX_BATCH_SIZE,
        show_default=False,
    )
    state: tuple[float, float, float] | None = state_field(
        "Idle GPU state TEMP_C MEM_MB UTIL_PCT instead of reading it from --device."
    )
    algo: str = algo_field()
    models: Path | None = models_field()
    data: Path | None = data_field("launch")
    trust_pickle: bool = trust_pickle_field()
    allow_modified: bool = allow_modified_field()
    device: str = option(
        "auto",
        "--device",
        help="Where to read the idle GPU state: auto (NVML, else none with a note), nvml (an error without "
        "NVML) or none.",
        panel="telemetry",
        metavar="KIND",
        choices=("auto", "nvml", "none"),
    )
    gpu_index: int | None = gpu_index_field()
    engine: Engine = engine_field(ENGINE_HELP)
    server_command: str | None = server_field("server_command")
    host: str = server_field("host")
    port: int = port_field()
    mem_fraction: float = server_field("mem_fraction")
    retry_mem_fraction: float = server_field("retry_mem_fraction")
    dtype: str = server_field("dtype")
    attention_backend: str = server_field("attention_backend")
    server_arg: list[str] = server_field("server_arg")
    cpu: bool = option(
        False,
        "--cpu",
        help="Serve on the CPU with sglang's CPU engine, as `specband sweep --cpu`: its flags, --dtype bfloat16, "
        "--attention-backend intel_amx and its environment (on a CPU without AMX, the variable that lets sglang "
        "use its AVX-512 BF16 kernels); no GPU state is read (--device none). With --engine vllm: vLLM's CPU "
        "backend.",
        panel="server",
    )
    launch_timeout: float = launch_timeout_field()
    sglang_version: str | None = sglang_version_field()
    allow_rope_mismatch: bool = server_field("allow_rope_mismatch", panel="setup")
    log: Path = option(
        Path("specband-server.log"), "--log", help="Server output (appended).", panel="output", metavar="FILE"
    )
    set_power_limit: str | None = option(
        None,
        "--set-power-limit",
        help="Set the GPU's power limit through NVML (root) while the server runs, restoring the old one when "
        "it stops: W, a fraction of the default, or 'auto' (the limit and the flags `specband recommend` answers "
        "from a sweep over several limits, --data SWEEP, or a folder trained on one, --models DIR).",
        panel="telemetry",
        metavar="W|auto",
        show_default=False,
    )
    dry_run: bool = option(False, "--dry-run", help="Print the command line and exit.", panel="output")
    gpu: str | None = gpu_field()
    acceptance_from: str | None = acceptance_from_field(
        "a simulated first guess for --target/--draft on --gpu PROFILE (used instead of a policy)", "setup"
    )
    allow_transfer: bool = allow_transfer_field()
    explain: bool = explain_field()

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", get_engine(self.engine))  # resolved once, here


@dataclass(frozen=True)
class LaunchPlan:
    """A checked launch (:func:`plan_launch`).

    Attributes:
        request: the request.
        config: the server's configuration (sglang version included).
        action: the triple sglang starts with.
        command: the server's command line.
        pick: the :class:`~specband.deploy.answers.Pick` (a first guess: the
            :class:`~specband.deploy.table.FirstGuess`); with ``--set-power-limit auto`` the
            :class:`~specband.deploy.answers.PowerLimitAnswer`; with ``--schedule`` the
            :class:`~specband.deploy.answers.SchedulePick`.
        notes: what to tell the user, in order (after ``version_warning``).
        engine_version, engine_version_source, version_warning: the release the flags are
            spelt for, where it came from, and the line to print when it was assumed.
        auto_file: the schedule file ``--schedule auto`` wrote (removed when the launch ends).
        power_limit_w: ``--set-power-limit`` in W (clamped to the GPU's range; set while the
            server runs), or ``None``.
        table: the pick as the one-table answer (:class:`~specband.deploy.table.AnswerTable`: its
            notes are what the pick rests on, printed with ``--explain``); ``None`` for a schedule.
    """

    request: LaunchRequest
    config: Any
    action: Action
    command: list[str]
    pick: Pick | PowerLimitAnswer | SchedulePick | FirstGuess
    notes: tuple[str, ...]
    engine_version: str
    engine_version_source: str
    version_warning: str | None
    auto_file: Path | None = None
    power_limit_w: float | None = None
    table: AnswerTable | None = None


def _check(r: LaunchRequest) -> tuple[Any, str | None, list[str]]:
    """Every option, before the GPU is read; the :class:`~specband.engines.serverconfig.ServerConfig`
    (with ``--cpu``'s flags and environment), the note of a skipped RoPE check (or ``None``) and
    ``--cpu``'s notes."""
    from specband.harness.runner import check_mem_fractions  # lazy: off the cold path (recommend, --help)

    if r.batch_size is None and r.schedule is None:
        raise ConfigError("--batch-size is required (or --schedule FILE|auto for a server whose batch size moves)")
    if r.max_running_requests is not None and (r.schedule is None or r.batch_size is not None):
        raise ConfigError("--max-running-requests goes with --schedule and without --batch-size (which pins it)")
    if r.schedule is not None and r.draft is None:
        raise ConfigError("--schedule runs adaptive EAGLE3 speculation: it needs --draft (the EAGLE3 draft model path)")
    check_mem_fractions(r.mem_fraction, r.retry_mem_fraction)
    _check_first_guess(r)
    if not r.launch_timeout > 0:
        raise ConfigError(f"--launch-timeout must be > 0 s, got {r.launch_timeout}")
    if r.state is not None:
        check_gpu_state(*r.state, option="--state")
    if r.set_power_limit is not None:
        if r.device == "none" or r.schedule is not None:
            raise ConfigError("--set-power-limit sets the limit through NVML: not with --device none or --schedule")
        if r.set_power_limit == "auto" and r.data is None and r.models is None:
            raise ConfigError(
                "--set-power-limit auto needs --data SWEEP (a sweep over several power limits) or --models DIR "
                "(a folder trained on one)"
            )
    extra_args = tuple(split_server_args(r.server_arg, command="launch", engine=r.engine))
    dtype, attention_backend, env, cpu_notes = r.dtype, r.attention_backend, {}, []
    if r.cpu:  # sglang's (or vLLM's) CPU engine: specband.engines.cpu
        engine = r.engine
        given = ServingOptions(r.dtype, r.attention_backend, extra_args, {}, r.device, None)
        cpu = engine.serving.cpu_settings(r.server_command, given, r.log.with_name(r.log.name + ".sglang-cache"))
        dtype, attention_backend, extra_args, env = cpu.dtype, cpu.attention_backend, cpu.extra_args, cpu.env
        cpu_notes = [f"--cpu: {engine.display_name}'s CPU engine; no GPU state is read (--device none)", *cpu.notes]
    config = ServerConfig(  # checks --target, --port and --server-command
        model_path=r.target,
        draft_model_path=r.draft,
        server_command=r.server_command or "",
        host=r.host,
        port=r.port,
        dtype=dtype,
        attention_backend=attention_backend,
        extra_args=extra_args,
        env=env,
        engine=r.engine,
    )
    validate_algorithms([r.algo])
    from specband.doctor.pairs import check_pair_before_launch  # lazy: off the cold path (recommend, --help)

    rope_note = check_pair_before_launch(r.target, r.draft, allow_rope_mismatch=r.allow_rope_mismatch)
    return config, rope_note, cpu_notes


def _check_first_guess(r: LaunchRequest) -> None:
    """``--acceptance-from``: a simulated first guess for one batch size on ``--gpu PROFILE``, of
    the pair sglang serves (their config.json read from ``--target``/``--draft``), not of a
    policy's data (ConfigError, one line)."""
    if r.acceptance_from is None:
        return
    if r.gpu is None:
        raise ConfigError("--acceptance-from makes a simulated first guess: give --gpu PROFILE")
    for flag, given in (
        ("--schedule", r.schedule),
        ("--models", r.models),
        ("--data", r.data),
        ("--set-power-limit", r.set_power_limit),
    ):
        if given is not None:
            raise ConfigError(f"--acceptance-from makes a simulated first guess for one batch size: not with {flag}")
    if r.draft is None:
        raise ConfigError("--acceptance-from fits an EAGLE3 pair's acceptance: it needs --draft")


def _decide(
    r: LaunchRequest, config: Any, notes: list[str], auto_file: Path | None, new_limit_w: float | None = None
) -> tuple[Any, Pick | PowerLimitAnswer | SchedulePick | FirstGuess]:
    """The pick, the power limit and its pick (``--set-power-limit auto``) or the schedule,
    and the config with its flags, the user's setup checked against the data's
    (:mod:`specband.deploy.transfer`). The pick and the limit are
    :func:`specband.deploy.recommend.answer`'s, by ``recommend``'s rules: the limit comes from
    ``--models DIR`` trained on several limits, else from ``--data SWEEP`` over several.
    ``new_limit_w`` (``--set-power-limit W``) is the limit the server will run at: the data
    is checked against it, not against the limit the GPU has now."""
    from specband.deploy.usersetup import user_setup  # lazy: off the cold path (recommend, --help)

    setup = user_setup(r.target, r.draft, r.gpu, r.gpu_index or 0, read_gpu=r.device != "none")
    if new_limit_w is not None:
        setup = dataclasses.replace(setup, power_limit_w=new_limit_w)
    if r.schedule is not None:
        from specband.deploy.schedule import (  # lazy: off the cold path (recommend, --help)
            auto_schedule,
            launch_schedule,
        )

        auto = None
        if r.schedule == "auto":
            auto = auto_schedule(
                r.engine, r.algo, r.models, r.data, notes=notes, trust_pickle=r.trust_pickle, setup=setup,
                allow_transfer=r.allow_transfer,
            )  # fmt: skip
        pick = launch_schedule(r.engine, r.schedule, auto, r.draft, notes=notes, auto_file=auto_file, log=r.log)
        fields = r.engine.serving.schedule_server_fields(config, pick, r.max_running_requests)
        return dataclasses.replace(config, **fields), pick
    assert r.batch_size is not None  # checked: --batch-size or --schedule
    limit_auto = r.set_power_limit == "auto"
    telemetry = r.state
    if telemetry is None and not limit_auto:  # the idle GPU is read for a pick, not for a limit's answer
        telemetry = read_idle_state(r.device, r.gpu_index or 0, notes)
    first = None if r.acceptance_from is None else FirstGuessSpec(r.gpu or "", r.target, r.draft, r.acceptance_from)
    request = AnswerRequest(
        algo=r.algo, models=r.models, data=r.data, batch_size=r.batch_size, state=telemetry, draft_model=r.draft,
        trust_pickle=r.trust_pickle, allow_modified=r.allow_modified, power_limit="required" if limit_auto else "never",
        allow_transfer=r.allow_transfer, first_guess=first, engine=r.engine, gpu=r.gpu,
    )  # fmt: skip
    decided = answer(request, setup)
    assert isinstance(decided, (Pick, PowerLimitAnswer, FirstGuess))
    return config, decided


def plan_launch(r: LaunchRequest) -> LaunchPlan:
    """Check every option, read the idle GPU (unless ``--state``), pick (or build the
    schedule) and spell the command line; nothing is started. A failed plan leaves
    nothing behind (a log it created, the ``auto`` schedule file).

    Raises:
        ConfigError (and the loading errors of :func:`specband.artifacts.load.load_models`): one line.
    """
    from specband.harness.request import engine_server  # lazy: off the cold path (recommend, --help)

    config, rope_note, cpu_notes = _check(r)
    if r.cpu:  # no GPU to read: the policy gets the contract's fills for the idle state
        r = dataclasses.replace(r, device="none")
    engine = r.engine
    log_created = open_log(r.log, dry_run=r.dry_run)
    # the version warning and the notes wait until the pick is known to be launchable,
    # so that bad input (e.g. a speculative pick without --draft) is one error line
    env: dict[str, str] = dict(config.env)
    command_line, (version, version_source, version_warning) = engine_server(
        engine, r.server_command, r.sglang_version, config.attention_backend, env
    )
    config = dataclasses.replace(config, server_command=command_line, env=env, engine_version=version)
    notes: list[str] = [*cpu_notes, *([] if rope_note is None else [rope_note])]
    newer = engine.serving.version_note(version)
    notes += [] if newer is None else [newer]
    auto_file: Path | None = None
    try:
        if r.schedule == "auto" and not r.dry_run:
            from specband.deploy.schedule import new_auto_schedule_file  # lazy: off the cold path (launch --help)

            auto_file = new_auto_schedule_file(r.log)
        limit_w: float | None = None
        if r.set_power_limit is not None and r.set_power_limit != "auto":
            # read before the pick: the pick is checked against the limit it will serve at
            limit_w, limit_notes = launch_power_limit_w(r.set_power_limit, r.gpu_index or 0)
            notes += limit_notes
        config, pick = _decide(r, config, notes, auto_file, limit_w)
        steps, topk, draft_tokens = pick.action
        action = Action(steps, topk, draft_tokens)  # printed as "(3,2,4)", the one spelling of a triple
        if r.schedule is None:
            engine.check_actions(
                [action], option=f"--engine {engine.name}: {r.algo}'s pick for batch size {r.batch_size}"
            )
        if r.draft is None and any(action):
            raise ConfigError(
                f"{r.algo} picks {action} for batch size {r.batch_size}, a speculative action that needs --draft "
                f"(the EAGLE3 draft model path)"
            )
        command = build_launch_command(config, action, r.batch_size, r.mem_fraction)
        if isinstance(pick, PowerLimitAnswer):
            limit_w = pick.power_limit_w
    except BaseException:
        if log_created:
            with contextlib.suppress(OSError):
                if r.log.stat().st_size == 0:
                    r.log.unlink()
        remove(auto_file)
        raise
    table = None
    if isinstance(pick, SchedulePick):
        notes.append(engine.serving.schedule_note(pick, action))
    else:
        table = answer_table([pick], r.draft, engine)
        table = dataclasses.replace(table, notes=(*table.notes, _picked(r, pick, action)))
    return LaunchPlan(
        r,
        config,
        action,
        command,
        pick,
        tuple(notes),
        version,
        version_source,
        version_warning,
        auto_file,
        limit_w,
        table,
    )


def _picked(r: LaunchRequest, pick: Pick | PowerLimitAnswer | FirstGuess, action: Action) -> str:
    """The last note behind a launch's pick: what picked it, from what."""
    if isinstance(pick, PowerLimitAnswer):
        return f"power limit {pick.power_limit_w:g} W with {action} for batch size {r.batch_size}"
    if isinstance(pick, FirstGuess):
        return f"{pick.source} picks {action} at {pick.power_limit_w:g} W for batch size {r.batch_size}"
    return (
        f"{r.algo} picks {action} for batch size {r.batch_size} "
        f"(features={pick.features}, state={[round(v, 4) for v in pick.state]}, source: {pick.source})"
    )


def serve_launch(plan: LaunchPlan, say: Callable[[str], None], note: Callable[[str], None]) -> int:
    """Start sglang with the plan (one retry at ``--retry-mem-fraction``) and wait in the
    foreground; Ctrl-C or SIGTERM stops the server and everything it started (status 0).

    Returns:
        the server's exit status when it exits by itself, else 0.
    """
    from specband.harness.runner import (  # lazy: off the cold path (recommend, --help)
        MeasureSettings,
        launch_with_retry,
    )

    r = plan.request
    settings = MeasureSettings(
        server=plan.config,
        mem_fraction_static=r.mem_fraction,
        retry_mem_fraction=r.retry_mem_fraction,
        launch_timeout_s=r.launch_timeout,
    )
    server = None
    # SIGTERM too; never inside an import or the server's start. The limit (--set-power-limit)
    # is restored when the block ends: after the server stopped (the finally below)
    with interrupts_as_keyboard_interrupt(), contextlib.ExitStack() as held:
        if plan.power_limit_w is not None:
            in_force = held.enter_context(held_power_limit(plan.power_limit_w, r.gpu_index or 0))
            note(f"power limit set to {in_force:g} W (the old limit is restored when the server stops)")
        try:
            outcome = launch_with_retry(settings, Clock(), plan.action, r.batch_size, r.log)
            server = outcome.server
            retried = (
                f" (retried at --mem-fraction-static {outcome.retry_mem_fraction:g})"
                if outcome.retry_mem_fraction
                else ""
            )
            what = (
                f"the schedule {plan.pick.path}"
                if isinstance(plan.pick, SchedulePick)
                else f"{Action(*plan.action)} for batch size {r.batch_size}"
            )
            engine = r.engine.display_name
            say(
                f"{engine} ready at {server.base_url} with {what}{retried}; log: {r.log}; "
                "Ctrl-C stops it (exit status 0)"
            )
            code = server.proc.wait() if server.proc is not None else 0
            note(f"the server exited with status {code}; the end of its log:\n{server.log_tail(2000)}")
            return code
        except KeyboardInterrupt:
            note("stopping the server")
            return 0
        finally:
            if server is not None:
                server.stop()
            remove(plan.auto_file)  # the launch's own schedule file: sglang read it at start-up


def open_log(path: Path, *, dry_run: bool = False) -> bool:
    """Check that the server log can be appended to, creating it if missing; True when
    it was created. A dry run checks the same and leaves nothing: an existing log is
    opened for appending without a write, a missing one is created and removed at once.

    Raises:
        ConfigError: ``"--log <path>: cannot write (<reason>)"`` (a folder, a missing
            folder, no permission).
    """
    import errno
    import os

    existed = path.exists()
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666))
    except OSError as exc:
        raise ConfigError(f"--log {path}: cannot write ({exc.strerror or exc})") from None
    if dry_run and not existed:
        remove(path)
        return False
    return not existed


def remove(path: Path | None) -> None:
    """Remove ``path`` (nothing for ``None`` or a file already gone)."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def read_idle_state(kind: str, index: int, notes: list[str]) -> tuple[float, float, float] | None:
    """``(temp_c, mem_used_mb, util_pct)`` of the idle GPU, or ``None`` when no telemetry
    (missing readings get the contract's fills downstream); what the device says on the
    way (e.g. no NVML, so no telemetry) is appended to ``notes``."""
    if kind == "none":
        return None
    import warnings

    from specband.sweeps.dataset import (  # lazy: off the cold path (recommend, --help)
        DEFAULT_GPU_MEM_USED_MB,
        DEFAULT_GPU_TEMP_C,
        DEFAULT_GPU_UTIL_PCT,
    )

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
