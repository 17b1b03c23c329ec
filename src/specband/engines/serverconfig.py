"""The server's launch line: its settings (:class:`ServerConfig`), its command and environment.

The engine of ``ServerConfig.engine`` writes the line (:func:`build_launch_command`,
:meth:`specband.engines.base.EngineServing.launch_command`); vLLM's is
:func:`specband.engines.vllm_serving.vllm_launch_args`. sglang's (:func:`sglang_launch_command`) is
``<server command> --model-path M --port P --host H --mem-fraction-static F --dtype float16
--attention-backend flashinfer --cuda-graph-max-bs-decode BS --max-running-requests BS
[speculative flags] [extra args]`` (each flag spelt for the sglang version it runs,
:mod:`specband.engines.sglang_flags`: ``--cuda-graph-max-bs`` before 0.5.14), with
``SGLANG_RECORD_STEP_TIME=1`` and ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1`` in
the environment (docs/FACTS.md §1; the speculative flags are the engine's own,
:meth:`specband.engines.base.Engine.speculative_flags`). The default server command is the
engine's launcher (``python -m sglang.launch_server``); tests use ``python -m specband emulate``.
The flags specband sets itself are refused in ``--server-arg`` (:func:`split_server_args`).
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specband.contract.actions import Action, as_action
from specband.core.errors import ConfigError
from specband.engines.base import Engine, ServerFields, default_engine, get_engine
from specband.engines.failures import LauncherError
from specband.engines.sglang_flags import flag_for, parse_version

__all__ = [
    "DEFAULT_ATTENTION_BACKEND",
    "FLAGS_FROM_FILE",
    "SGLANG_ENV",
    "SGLANG_OWNED_FLAGS",
    "ServerConfig",
    "build_launch_command",
    "check_host",
    "check_server_values",
    "check_sglang_env",
    "format_launch",
    "sglang_launch_command",
    "split_server_args",
]

#: ``--attention-backend``'s default: flashinfer for every action (:class:`ServerConfig`).
DEFAULT_ATTENTION_BACKEND = "flashinfer"
#: Environment variables every launch gets (docs/FACTS.md §1): record per-step decode times for
#: ``/get_server_info``'s ``step_time_dict``; allow the context-length override.
SGLANG_ENV: dict[str, str] = {
    "SGLANG_RECORD_STEP_TIME": "1",
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
}


@dataclass(frozen=True)
class ServerConfig:
    """Everything but the action and batch size that a launch needs.

    Attributes:
        model_path: target model (``--model-path``).
        draft_model_path: EAGLE3 draft head (``--speculative-draft-model-path``).
        server_command: the launcher, split with :func:`shlex.split` (empty: the engine's,
            :attr:`specband.engines.base.Engine.launcher`).
        host: bind address; loopback by default.
        port: HTTP port.
        dtype: ``--dtype`` (float16: the EAGLE3 draft head ships fp16; a bf16 target with
            an fp16 draft kills CUDA-graph capture, docs/FACTS.md §1).
        attention_backend: ``--attention-backend``; ``"flashinfer"`` is passed for every
            action (pinned, so that no action runs on another backend); ``"auto"``
            reproduces upstream (flashinfer only when topk > 1, else sglang's default).
        extra_args: appended to every launch (``--server-arg`` values go through
            :func:`split_server_args`).
        env: extra environment variables for the server (on top of the engine's, e.g.
            :data:`SGLANG_ENV`; checked by :meth:`~specband.engines.base.EngineServing.check_server_env`).
        engine: the engine that serves (:class:`~specband.engines.base.Engine`, or its name:
            resolved here; default :func:`~specband.engines.base.default_engine`). vLLM's
            launch line has a chain action's ``--speculative-config`` and no attention backend.
        engine_version: the engine release the flags are spelt for
            (:meth:`~specband.engines.base.EngineServing.resolve_server`; empty: the engine's
            :attr:`~specband.engines.base.EngineServing.default_version`).
        speculative_config: vLLM only: the whole ``--speculative-config`` object (a per-batch-size
            schedule, ``launch --engine vllm --schedule``) in place of the action's.
    """

    model_path: str
    draft_model_path: str | None = None
    server_command: str = ""
    host: str = "127.0.0.1"
    port: int = 30000
    dtype: str = "float16"
    attention_backend: str = DEFAULT_ATTENTION_BACKEND
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    engine: Engine = field(default_factory=default_engine)
    engine_version: str = ""
    speculative_config: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        engine = get_engine(self.engine)  # a name is resolved once (an unknown one is one error line)
        object.__setattr__(self, "engine", engine)
        if not self.server_command:
            object.__setattr__(self, "server_command", engine.launcher)
        if not self.engine_version:
            object.__setattr__(self, "engine_version", engine.serving.default_version)
        if not self.model_path:
            raise ConfigError("--target (the model path) must not be empty")
        if not 0 < self.port < 65536:
            raise ConfigError(f"--port must be in 1..65535, got {self.port}")
        check_server_values(engine, self.host, self.dtype, self.attention_backend)
        try:
            parts = shlex.split(self.server_command)
        except ValueError as exc:
            raise ConfigError(f"--server-command cannot be parsed: {exc}") from None
        if not parts:
            raise ConfigError("--server-command must not be empty")
        executable = sys.executable if parts[0] in ("python", "python3") else parts[0]
        if shutil.which(executable, path=self.env.get("PATH")) is None:
            raise LauncherError(
                f"--server-command cannot be run: cannot execute {parts[0]!r}: not an executable file (nor one on PATH)"
            )
        engine.serving.check_version(self.engine_version)
        engine.serving.check_server_env(self.env)

    @property
    def base_url(self) -> str:
        """``http://host:port`` (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


#: One DNS label (RFC 1123): letters, digits and inner hyphens, 1-63 characters.
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def check_host(host: str) -> None:
    """``--host``: an IP address (:mod:`ipaddress`) or a hostname (RFC 1123: dot-separated
    labels of letters, digits and inner hyphens, 1-63 characters each, 253 in all; the last
    not all digits, RFC 3696).

    Raises:
        ConfigError: anything else (``''``, a space, a shell metacharacter, non-ASCII).
    """
    import ipaddress  # a launch line's check: off the engine's cold path (recommend's flags)

    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    # an all-digit last label is no hostname (RFC 3696 §2): "999.1.1.1" is a bad address
    if 0 < len(name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit():
        return
    raise ConfigError(f"--host {host!r}: expected an IP address or a hostname")


def check_server_values(engine: Engine, host: str, dtype: str, attention_backend: str) -> None:
    """``--host``, ``--dtype`` and ``--attention-backend`` as the engine's parser takes them,
    so that a printed or started launch line is one the engine accepts.

    ``--host``: :func:`check_host`; ``--dtype`` and ``--attention-backend``: the engine's
    check (:meth:`specband.engines.base.EngineServing.check_server_values`: sglang's choices,
    :data:`~specband.engines.sglang_flags.DTYPE_CHOICES` and
    :data:`~specband.engines.sglang_flags.ATTENTION_BACKEND_CHOICES` or specband's ``auto``;
    vLLM's :data:`~specband.engines.vllm_serving.VLLM_DTYPE_CHOICES`, the backend unused).

    Raises:
        ConfigError: the first value the engine would refuse, naming the option.
    """
    check_host(host)
    engine.serving.check_server_values(dtype, attention_backend)


#: Server flags specband sets itself, with the specband option that sets them
#: (:func:`build_launch_command`): a ``--server-arg`` repeating one would override the
#: measured configuration (sglang's argparse keeps the last value) or the port that is
#: polled. A name ending in ``*`` stands for every flag it begins: every
#: ``--speculative-*`` flag, and every CUDA-graph batch-size flag (``--cuda-graph-max-bs*``,
#: ``--cuda-graph-bs*``, ``--cuda-graph-config``: they would change the batch sizes the
#: graphs are captured for, which ``--cuda-graph-max-bs-decode`` sets).
_COMMON_OWNED: dict[str, str] = {
    "--model-path": "--target",
    "--model": "--target",
    "--host": "--host",
    "--port": "--port",
    "--mem-fraction-static": "--mem-fraction-static",
    "--dtype": "--dtype",
    "--attention-backend": "--attention-backend",
    "--speculative-draft-model-path": "--draft",
}
SGLANG_OWNED_FLAGS: dict[str, dict[str, str]] = {
    "sweep": {
        **_COMMON_OWNED,
        **dict.fromkeys(
            ("--max-running-requests", "--cuda-graph-max-bs*", "--cuda-graph-bs*", "--cuda-graph-config*"),
            "--batch-sizes",
        ),
        "--speculative-*": "--actions",
    },
    "launch": {
        **_COMMON_OWNED,
        **dict.fromkeys(
            ("--max-running-requests", "--cuda-graph-max-bs*", "--cuda-graph-bs*", "--cuda-graph-config*"),
            "--batch-size",
        ),
        "--speculative-*": "--algo and --models (the policy picks the speculative flags)",
    },
}
#: Full names of flags that a ``*`` entry covers, for abbreviations of them.
_PREFIXED_FLAGS = (
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--cuda-graph-max-bs-decode",
    "--cuda-graph-max-bs-prefill",
    "--cuda-graph-bs-decode",
    "--cuda-graph-bs-prefill",
    "--cuda-graph-config",
)


def _owner(flag: str, owned: Mapping[str, str]) -> str | None:
    """The specband option that sets ``flag`` (a full name), or ``None``."""
    if flag in owned:
        return owned[flag]
    return next((opt for name, opt in owned.items() if name.endswith("*") and flag.startswith(name[:-1])), None)


def _owned_flag(arg: str, owned: Mapping[str, str]) -> tuple[str, str] | None:
    """``(flag, specband option)`` when ``arg`` (``--flag`` or ``--flag=value``) is, or
    abbreviates (argparse's ``allow_abbrev``), a flag specband sets; else ``None``."""
    if not arg.startswith("--") or arg == "--":
        return None
    name = arg.split("=", 1)[0]
    option = _owner(name, owned)
    if option is not None:
        return name, option
    for flag in (*owned, *_PREFIXED_FLAGS):
        if flag.startswith(name) and not flag.endswith("*"):
            return f"{name} (short for {flag})", _owner(flag, owned) or ""
    return None


#: Environment variables specband sets that a user value must not change (without step
#: times the speed falls back to the wall clock for every row).
_OWNED_ENV = ("SGLANG_RECORD_STEP_TIME",)


def check_sglang_env(env: Mapping[str, str]) -> None:
    """Refuse ``--env`` values that change what :data:`SGLANG_ENV` sets for the
    measurement (``SGLANG_RECORD_STEP_TIME=0``): sglang's
    :meth:`~specband.engines.base.EngineServing.check_server_env`.

    Raises:
        ConfigError: ``"--env SGLANG_RECORD_STEP_TIME=0: specband sets
            SGLANG_RECORD_STEP_TIME=1 ..."``.
    """
    for key in _OWNED_ENV:
        if key in env and env[key] != SGLANG_ENV[key]:
            raise ConfigError(
                f"--env {key}={env[key]}: specband sets {key}={SGLANG_ENV[key]} (the step times it measures "
                f"speed from); leave it out"
            )


#: sglang flags that read more flags from a file (sglang 0.5.23 ``server_args.py``:
#: ``--config FILE`` is a YAML file of flags, merged by ``ConfigArgumentMerger`` *before*
#: specband's own: any flag specband leaves out, e.g. every speculative flag of the
#: baseline run, would come from the file).
FLAGS_FROM_FILE: tuple[str, ...] = ("--config",)


def _reads_flags_from_file(arg: str) -> str | None:
    """The flag of :data:`FLAGS_FROM_FILE` that ``arg`` is or abbreviates (argparse's
    ``allow_abbrev``: ``--conf``), or an ``@file`` argument; else ``None``."""
    if arg.startswith("@") and len(arg) > 1:
        return arg
    if not arg.startswith("--") or arg == "--":
        return None
    name = arg.split("=", 1)[0]
    return next((flag for flag in FLAGS_FROM_FILE if flag.startswith(name) and len(name) >= 5), None)


def split_server_args(
    values: Sequence[str], *, engine: Engine | None = None, command: str = "sweep"
) -> tuple[str, ...]:
    """Split ``--server-arg`` values like a POSIX shell line (:func:`shlex.split`) and
    join the pieces in order, for :attr:`ServerConfig.extra_args`:
    ``["--log-level warning", "--trust-remote-code"]`` ->
    ``("--log-level", "warning", "--trust-remote-code")``.

    A flag that reads flags from a file (:data:`FLAGS_FROM_FILE`: ``--config``, and
    abbreviations) is refused. Flags that specband sets itself are refused (in ``--flag value`` and ``--flag=value``
    form, and abbreviated): ``--model-path``/``--model``, ``--host``, ``--port``,
    ``--mem-fraction-static``, ``--dtype``, ``--attention-backend``,
    ``--max-running-requests``, every CUDA-graph batch-size flag
    (``--cuda-graph-max-bs*``, ``--cuda-graph-bs*``, ``--cuda-graph-config``) and every
    ``--speculative-*`` flag. Appended after specband's own flags they would win (sglang's argparse keeps the
    last value): rows labelled with one action would measure another, or the server would
    listen on a port that is not polled.

    Args:
        values: the ``--server-arg`` values.
        command: ``"sweep"`` or ``"launch"``: which command's options the error names.
        engine: whose flags specband sets (``None``: the default engine's;
            :meth:`specband.engines.base.EngineServing.owned_flags`:
            sglang's :data:`SGLANG_OWNED_FLAGS`, vLLM's
            :data:`~specband.engines.vllm_serving.VLLM_OWNED_FLAGS`).

    Raises:
        ConfigError: a value that cannot be split (an unbalanced quote, a trailing
            backslash), or that sets a flag specband sets, naming the value, the flag and
            the specband option to use instead.
    """
    owned = (engine or default_engine()).serving.owned_flags(command)
    out: list[str] = []
    for value in values:
        try:
            parts = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(f"--server-arg {value!r} cannot be parsed: {exc}") from None
        for part in parts:
            from_file = _reads_flags_from_file(part)
            if from_file is not None:
                raise ConfigError(
                    f"--server-arg {value!r}: {from_file} reads server flags from a file, which would "
                    f"set flags specband {command} leaves out (the baseline's speculative flags); "
                    "give each flag as its own --server-arg"
                )
            hit = _owned_flag(part, owned)
            if hit is not None:
                flag, option = hit
                raise ConfigError(
                    f"--server-arg {value!r}: {flag} is set by specband {command}; use its {option} instead"
                )
        out += parts
    return tuple(out)


def build_launch_command(
    config: ServerConfig, action: tuple[int, int, int], max_batch_size: int | None, mem_fraction_static: float
) -> list[str]:
    """The server command line for one action, written by ``config``'s engine
    (:meth:`specband.engines.base.EngineServing.launch_command`: :func:`sglang_launch_command`, or
    :func:`specband.engines.vllm_serving.vllm_launch_args`).

    Args:
        config: model, draft, port and the other fixed flags.
        action: the speculative triple: an :class:`~specband.contract.actions.Action` is
            trusted (checked where it entered), a plain triple is checked and canonicalised
            here (:func:`~specband.contract.actions.as_action`).
        max_batch_size: the batch-size bound (sglang: ``--cuda-graph-max-bs-decode``, or
            ``--cuda-graph-max-bs`` before 0.5.14, and ``--max-running-requests``; vLLM:
            ``--max-num-seqs``); ``None`` pins none (a server whose batch size moves,
            ``launch --schedule``).
        mem_fraction_static: ``--mem-fraction-static`` (vLLM: ``--gpu-memory-utilization``).

    Raises:
        InvalidActionError: a plain triple that breaks a rule.
        ConfigError: a non-positive batch size, a mem fraction outside (0, 1), or an action
            the engine cannot run.
    """
    act: Action = as_action(action)
    return config.engine.serving.launch_command(config, act, max_batch_size, mem_fraction_static)


def sglang_launch_command(
    config: ServerFields, act: Action, max_batch_size: int | None, mem_fraction_static: float
) -> list[str]:
    """sglang's server command line for one (validated) action (see the module docstring and
    :func:`build_launch_command`).

    Raises:
        ConfigError: a non-positive batch size, a mem fraction outside (0, 1), or a
            speculative action without a draft.
    """
    if max_batch_size is not None and max_batch_size <= 0:
        raise ConfigError(f"batch size must be > 0, got {max_batch_size}")
    if not 0.0 < mem_fraction_static < 1.0:
        raise ConfigError(f"mem fraction must be in (0, 1), got {mem_fraction_static}")
    command = shlex.split(config.server_command)
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    # What leaving a flag out resolves to in sglang 0.5.23 (its parser and resolution with
    # --device cuda on a Llama target, checked with the conformance test's set-up): --host
    # 127.0.0.1 and --port 30000 are sglang's defaults (the same value: they are given so that
    # the polled address is explicit); every other flag changes the resolved value when left
    # out (mem fraction 0.95, dtype auto, no CUDA-graph bound, a memory-derived
    # max-running-requests, sglang's own attention backend), so each is needed.
    command += [
        "--model-path",
        config.model_path,
        "--host",
        config.host,
        "--port",
        str(config.port),
        "--mem-fraction-static",
        f"{mem_fraction_static:g}",
        "--dtype",
        config.dtype,
    ]
    if max_batch_size is not None:
        cuda_graph_max_bs = flag_for("cuda_graph_max_bs", parse_version(config.engine_version))
        command += [cuda_graph_max_bs, str(max_batch_size), "--max-running-requests", str(max_batch_size)]
    backend = config.attention_backend
    if backend == "auto":
        if act.speculative_eagle_topk > 1:
            command += ["--attention-backend", "flashinfer"]
    elif backend:
        command += ["--attention-backend", backend]
    if not act.is_baseline and config.draft_model_path is None:
        raise ConfigError("a speculative action needs --draft (the EAGLE3 draft model path)")
    command += config.engine.speculative_flags(act, config.draft_model_path)  # the engine's spelling
    command += list(config.extra_args)
    return command


def format_launch(command: Sequence[str], env: Mapping[str, str] | None = None, *, engine: Engine) -> str:
    """A launch as one shell line: the environment specband sets for ``engine``
    (:attr:`specband.engines.base.EngineServing.line_env`: sglang's :data:`SGLANG_ENV`, none for
    vLLM) and then ``env`` (the ``--env`` values, shell-quoted), then the shell-quoted
    command (``launch --dry-run`` and ``sweep --dry-run`` print this)."""
    merged = {**engine.serving.line_env, **dict(env or {})}
    env_text = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in merged.items())
    return f"{env_text} {shlex.join(command)}".lstrip()
