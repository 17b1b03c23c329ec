"""Launching and stopping the sglang server for one configuration.

The launch command is ``<server command> --model-path M --port P --host H
--mem-fraction-static F --dtype float16 --attention-backend flashinfer
--cuda-graph-max-bs-decode BS --max-running-requests BS [speculative flags] [extra args]``
(each flag spelt for the sglang version it runs, :mod:`specband.harness.sglang_flags`:
``--cuda-graph-max-bs`` before 0.5.14),
with ``SGLANG_RECORD_STEP_TIME=1`` and ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1`` in
the environment (docs/FACTS.md §1; the speculative flags come from
:func:`specband.actions.sglang_cli_args`). The default server command is
``python -m sglang.launch_server``; tests use ``python -m specband emulate``.

Process hygiene: the server starts in its own session (``start_new_session=True``, so
its process group id is its pid) with a parent-death signal (a crashed sweep takes its
server down); :meth:`ServerProcess.stop` sends SIGTERM to the whole group, then SIGKILL
after a grace period, and waits until no process of the group is left. Live servers are
also stopped at interpreter exit. Output goes to a log file whose tail classifies a
failed launch (:func:`classify_failure`). A command that cannot be run at all (not found,
not executable, ``python -m`` of a module that is not installed) raises
:class:`LauncherError` instead of :class:`LaunchError` (:func:`launcher_failure`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specband.actions import Action, sglang_cli_args, validate_action
from specband.devices.base import Clock
from specband.errors import ConfigError, HarnessError
from specband.harness.interrupts import deferred
from specband.harness.sglang_flags import NEWEST_VERSION, flag_for, parse_version
from specband.harness.vllm_launch import ENGINES, VLLM_OWNED_FLAGS, vllm_launch_args, vllm_spec_config

__all__ = [
    "DEFAULT_SERVER_COMMAND",
    "SGLANG_ENV",
    "LaunchError",
    "LauncherError",
    "PortInUseError",
    "ServerArgsError",
    "ServerConfig",
    "ServerProcess",
    "build_launch_command",
    "check_server_env",
    "classify_failure",
    "format_launch",
    "group_members",
    "launcher_failure",
    "port_answering",
    "process_group_alive",
    "split_server_args",
    "wait_port_free",
]

#: sglang's launcher (docs/FACTS.md §1).
DEFAULT_SERVER_COMMAND = "python -m sglang.launch_server"
#: Environment variables every launch gets (docs/FACTS.md §1): record per-step decode times for
#: ``/get_server_info``'s ``step_time_dict``; allow the context-length override.
SGLANG_ENV: dict[str, str] = {
    "SGLANG_RECORD_STEP_TIME": "1",
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
}
_SHIM = Path(__file__).with_name("_pdeathsig.py")


class LaunchError(HarnessError):
    """The server did not become healthy.

    Attributes:
        reason: a short class: ``out_of_memory_cuda_graph_capture``, ``out_of_memory``,
            ``cuda_graph_capture_failed``, ``port_in_use``, ``bad_arguments``,
            ``exited`` (any other exit), ``launch_timeout``.
        detail: the most telling log line, or the timeout.
        returncode: the server's exit status (``None`` on a timeout).
    """

    def __init__(self, reason: str, detail: str, returncode: int | None = None) -> None:
        self.reason = reason
        self.detail = detail
        self.returncode = returncode
        code = "" if returncode is None else f" (exit {returncode})"
        super().__init__(f"launch_failed: {reason}{code}: {detail}")


class LauncherError(HarnessError):
    """The server command cannot be run at all: the executable is missing or not
    executable (``OSError`` on exec, or exit status 127 / 126 before ``/health``, the
    shells' "command not found" / "cannot execute"), or ``python -m MODULE`` names a
    module that is not installed. A configuration error, not a failure of one action:
    every launch would fail the same way, so the sweep stops instead of writing an error
    row per run (and the launch is not retried)."""


class ServerArgsError(LauncherError):
    """sglang refused its command line (its argument parser's ``error:``, exit status 2):
    every launch would be refused alike, so the sweep stops at once (no error rows, no
    retry at another mem fraction)."""


class PortInUseError(HarnessError):
    """Something already answers on the server port; the sweep refuses to use it
    (its measurements would go to a foreign server)."""


@dataclass(frozen=True)
class ServerConfig:
    """Everything but the action and batch size that a launch needs.

    Attributes:
        model_path: target model (``--model-path``).
        draft_model_path: EAGLE3 draft head (``--speculative-draft-model-path``).
        server_command: the launcher, split with :func:`shlex.split`.
        host: bind address; loopback by default.
        port: HTTP port.
        dtype: ``--dtype`` (float16: the EAGLE3 draft head ships fp16; a bf16 target with
            an fp16 draft kills CUDA-graph capture, docs/FACTS.md §1).
        attention_backend: ``--attention-backend``; ``"flashinfer"`` is passed for every
            action (pinned, so that no action runs on another backend); ``"auto"``
            reproduces upstream (flashinfer only when topk > 1, else sglang's default).
        extra_args: appended to every launch (``--server-arg`` values go through
            :func:`split_server_args`).
        env: extra environment variables for the server (on top of :data:`SGLANG_ENV`;
            see :func:`check_server_env`).
        sglang_version: the sglang release the flags are spelt for
            (:func:`specband.harness.sglang_flags.resolve_sglang_version`).
        engine: ``"sglang"`` or ``"vllm"`` (:mod:`specband.harness.vllm_launch`: vLLM's
            flags, a chain action's ``--speculative-config``; ``attention_backend`` unused).
        vllm_version: the vLLM release (``None`` for sglang).
        speculative_config: vLLM only: the whole ``--speculative-config`` object (a per-batch-size
            schedule, ``launch --engine vllm --schedule``) in place of the action's.
    """

    model_path: str
    draft_model_path: str | None = None
    server_command: str = DEFAULT_SERVER_COMMAND
    host: str = "127.0.0.1"
    port: int = 30000
    dtype: str = "float16"
    attention_backend: str = "flashinfer"
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    sglang_version: str = NEWEST_VERSION
    engine: str = "sglang"
    vllm_version: str | None = None
    speculative_config: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if not self.model_path:
            raise ConfigError("--target (the model path) must not be empty")
        if not 0 < self.port < 65536:
            raise ConfigError(f"--port must be in 1..65535, got {self.port}")
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
        parse_version(self.sglang_version)
        check_server_env(self.env)

    @property
    def base_url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"


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
_OWNED_FLAGS: dict[str, dict[str, str]] = {
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


def check_server_env(env: Mapping[str, str]) -> None:
    """Refuse ``--env`` values that change what :data:`SGLANG_ENV` sets for the
    measurement (``SGLANG_RECORD_STEP_TIME=0``).

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


def split_server_args(values: Sequence[str], *, command: str = "sweep", engine: str = "sglang") -> tuple[str, ...]:
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
        engine: ``"vllm"`` refuses vLLM's flags that specband sets instead
            (:data:`~specband.harness.vllm_launch.VLLM_OWNED_FLAGS`).

    Raises:
        ConfigError: a value that cannot be split (an unbalanced quote, a trailing
            backslash), or that sets a flag specband sets, naming the value, the flag and
            the specband option to use instead.
    """
    owned = VLLM_OWNED_FLAGS if engine == "vllm" else _OWNED_FLAGS[command]
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
    """The server command line for one action.

    Args:
        config: model, draft, port and the other fixed flags.
        action: the speculative triple (validated and canonicalised).
        max_batch_size: ``--cuda-graph-max-bs-decode`` (``--cuda-graph-max-bs`` before
            sglang 0.5.14) and ``--max-running-requests``; ``None`` pins neither (a server
            whose batch size moves, ``launch --schedule``).
        mem_fraction_static: ``--mem-fraction-static``.

    Raises:
        InvalidActionError: the triple breaks a rule.
        ConfigError: a non-positive batch size or a mem fraction outside (0, 1).
    """
    act: Action = validate_action(action)
    if config.engine == "vllm":
        return vllm_launch_args(
            config.server_command,
            model_path=config.model_path,
            host=config.host,
            port=config.port,
            dtype=config.dtype,
            spec_config=config.speculative_config or vllm_spec_config(act, config.draft_model_path),
            max_batch_size=max_batch_size,
            mem_fraction=mem_fraction_static,
            extra_args=config.extra_args,
        )
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
        cuda_graph_max_bs = flag_for("cuda_graph_max_bs", parse_version(config.sglang_version))
        command += [cuda_graph_max_bs, str(max_batch_size), "--max-running-requests", str(max_batch_size)]
    backend = config.attention_backend
    if backend == "auto":
        if act.speculative_eagle_topk > 1:
            command += ["--attention-backend", "flashinfer"]
    elif backend:
        command += ["--attention-backend", backend]
    if not act.is_baseline and config.draft_model_path is None:
        raise ConfigError("a speculative action needs --draft (the EAGLE3 draft model path)")
    command += sglang_cli_args(act, config.draft_model_path)
    command += list(config.extra_args)
    return command


def format_launch(command: Sequence[str], env: Mapping[str, str] | None = None, *, engine: str = "sglang") -> str:
    """A launch as one shell line: the environment specband sets (:data:`SGLANG_ENV`; none for
    vLLM, ``engine="vllm"``) and then ``env`` (the ``--env`` values, shell-quoted), then the
    shell-quoted command (``launch --dry-run`` and ``sweep --dry-run`` print this)."""
    merged = {**(SGLANG_ENV if engine == "sglang" else {}), **dict(env or {})}
    env_text = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in merged.items())
    return f"{env_text} {shlex.join(command)}".lstrip()


def port_answering(host: str, port: int, timeout_s: float = 0.25) -> bool:
    """True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_port_free(host: str, port: int, wait_s: float = 10.0) -> None:
    """Return once nothing answers on ``host:port``, waiting up to ``wait_s`` real seconds
    for a busy port to free (a previous server may still be exiting).

    Raises:
        PortInUseError: the port still answers after ``wait_s``
            (``"port P on H is already answering; refusing to launch ..."``).
    """
    deadline = time.monotonic() + wait_s
    while port_answering(host, port):
        if time.monotonic() >= deadline:
            raise PortInUseError(
                f"port {port} on {host} is already answering; refusing to launch (stop that server or pass "
                f"another --port)"
            )
        time.sleep(0.1)


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``, from /proc."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(entry))
    return members


def listening_socket_inodes(port: int) -> set[int] | None:
    """Inodes of the TCP sockets listening on ``port`` (any address, IPv4 and IPv6), from
    ``/proc/net/tcp`` and ``/proc/net/tcp6``; ``None`` when neither can be read (not
    Linux)."""
    found: set[int] = set()
    read_any = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":  # 0A: TCP_LISTEN
                continue
            try:
                local_port = int(parts[1].rsplit(":", 1)[1], 16)
                inode = int(parts[9])
            except (IndexError, ValueError):
                continue
            if local_port == port and inode:
                found.add(inode)
    return found if read_any else None


def socket_inodes_of(pids: Sequence[int]) -> set[int]:
    """Inodes of the sockets the processes ``pids`` hold open (``/proc/<pid>/fd``)."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                with contextlib.suppress(ValueError):
                    inodes.add(int(target[8:-1]))
    return inodes


def process_group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if sys.platform.startswith("linux") and os.path.isdir("/proc/self"):
        return bool(group_members(pgid))
    return True


# A failed launch's log tail -> reason. Order matters: the first match wins.
_FAILURE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("port_in_use", re.compile(r"address already in use|\[Errno 98\]", re.I)),
    ("bad_arguments", re.compile(r"unrecognized arguments|error: argument|invalid choice|ambiguous option", re.I)),
    ("out_of_memory", re.compile(r"out of memory|OutOfMemoryError|Not enough memory|CUDA error: out of memory", re.I)),
    ("cuda_graph_capture_failed", re.compile(r"Capture cuda graph failed", re.I)),
)


def classify_failure(log_tail: str) -> tuple[str, str]:
    """Classify a failed launch from the end of its log.

    Returns:
        ``(reason, detail)``: the reason (see :class:`LaunchError`; out-of-memory during
        CUDA-graph capture is ``out_of_memory_cuda_graph_capture``) and the log line that
        shows it (or the last non-empty line).
    """
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    text = "\n".join(lines)
    for reason, pattern in _FAILURE_PATTERNS:
        if pattern.search(text):
            detail = next((ln for ln in reversed(lines) if pattern.search(ln)), lines[-1] if lines else "")
            if reason == "out_of_memory" and _FAILURE_PATTERNS[3][1].search(text):
                reason = "out_of_memory_cuda_graph_capture"
            return reason, detail[:300]
    return "exited", (lines[-1][:300] if lines else "no output")


def _capture_oom(log_tail: str) -> str | None:
    """The out-of-memory line when the log shows an out-of-memory during CUDA-graph
    capture, else ``None``."""
    oom, capture = _FAILURE_PATTERNS[2][1], _FAILURE_PATTERNS[3][1]
    if not (oom.search(log_tail) and capture.search(log_tail)):
        return None
    lines = [ln.strip() for ln in log_tail.splitlines() if oom.search(ln)]
    return lines[-1][:300] if lines else None


#: Exit statuses of a command that could not be run (POSIX shells; the exec shim).
_CANNOT_RUN_STATUSES = (126, 127)


def _python_target(command: Sequence[str]) -> tuple[str, str] | None:
    """``("module", M)`` for ``python [options] -m M ...``, ``("script", S)`` for
    ``python [options] S ...``, else ``None`` (not a Python interpreter)."""
    if not command or not Path(command[0]).name.startswith("python"):
        return None
    for i, arg in enumerate(command[1:], start=1):
        if arg == "-m":
            return ("module", command[i + 1]) if i + 1 < len(command) else None
        if not arg.startswith("-"):
            return "script", arg
    return None


def _cannot_run_pattern(command: Sequence[str]) -> re.Pattern[str] | None:
    """What Python prints when the module or script of ``command`` does not exist."""
    target = _python_target(command)
    if target is None:
        return None
    kind, name = target
    if kind == "module":
        name = re.escape(name)
        return re.compile(rf"No module named '?{name}'?$|Error while finding module specification for '{name}'")
    return re.compile(rf"can't open file '?{re.escape(name)}'?|can't open file .*{re.escape(Path(name).name)}")


def launcher_failure(command: Sequence[str], returncode: int | None, log_tail: str) -> str | None:
    """Why a server that exited before ``/health`` could not be run at all, or ``None``
    when it ran and failed (an out-of-memory, a bad flag: one action's failure).

    Args:
        command: the launch command.
        returncode: its exit status.
        log_tail: the end of its log.

    Returns:
        the telling log line (or the status) when the exit status is 126 or 127, or when
        the command is ``python -m MODULE`` and Python says that module is not installed,
        or ``python SCRIPT`` and Python cannot open that script.
    """
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip() and not ln.startswith("=== specband launch")]
    if returncode in _CANNOT_RUN_STATUSES:
        return lines[-1][:300] if lines else f"exit status {returncode}"
    pattern = _cannot_run_pattern(command)
    if pattern is not None:
        for line in reversed(lines):
            if pattern.search(line):
                return line[:300]
    return None


_LIVE: dict[int, ServerProcess] = {}
_LIVE_LOCK = threading.Lock()


def stop_live_servers(port: int | None = None, grace_s: float = 5.0) -> None:
    """Stop every server process group this process started and has not stopped yet (on
    ``port`` only, when given): at exit, and when a multi-GPU sweep is cancelled (the
    worker serving on ``port`` then sees its server die and unwinds)."""
    with _LIVE_LOCK:
        servers = [s for s in _LIVE.values() if port is None or s.port == port]
    for server in servers:
        server.stop(grace_s=grace_s)


atexit.register(stop_live_servers)


class ServerProcess:
    """One server process group.

    Args:
        command: the launch command (see :func:`build_launch_command`).
        host, port: where it will listen.
        log_path: its stdout and stderr go here (appended).
        env: the full environment (``None``: this process's plus :data:`SGLANG_ENV`).
        clock: the time base for the launch timeout and health polling.
        port_wait_s: real seconds to wait for a busy port to free before refusing it
            (a previous server may still be exiting).

    Use as a context manager: the group is stopped on success, error, timeout and
    Ctrl-C.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        host: str,
        port: int,
        log_path: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        port_wait_s: float = 10.0,
    ) -> None:
        self.command = list(command)
        self.host = host
        self.port = port
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else {**os.environ, **SGLANG_ENV}
        self.clock = clock or Clock()
        self.port_wait_s = port_wait_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        #: :func:`time.monotonic` when the process was spawned (real seconds).
        self.started_monotonic: float | None = None
        self._log_offset = 0

    @property
    def base_url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Spawn the server in a new session.

        Raises:
            PortInUseError: the port still answers after ``port_wait_s``.
            HarnessError: the log file cannot be opened
                (``"<log>: cannot write the server log (<reason>)"``).
            LauncherError: the command cannot be executed.
        """
        wait_port_free(self.host, self.port, self.port_wait_s)
        argv = self.command
        if sys.platform.startswith("linux"):
            argv = [sys.executable, "-I", str(_SHIM), str(os.getpid()), "--", *self.command]
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_path, "ab")  # noqa: SIM115 (the with below holds it, after the error check)
        except OSError as exc:
            raise HarnessError(f"{self.log_path}: cannot write the server log ({exc.strerror or exc})") from None
        # Ctrl-C / SIGTERM wait until the process is started and registered (else it would
        # run with nobody to stop it)
        with log, deferred():
            self._log_offset = log.tell()
            header = f"\n=== specband launch {time.strftime('%Y-%m-%dT%H:%M:%S')}: {shlex.join(self.command)}\n"
            log.write(header.encode())
            log.flush()
            self.started_monotonic = time.monotonic()
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LauncherError(
                    f"--server-command cannot be run: cannot execute {self.command[0]!r}: {exc.strerror or exc}"
                ) from None
            self.pgid = self.proc.pid
            with _LIVE_LOCK:
                _LIVE[self.pgid] = self

    def log_tail(self, max_bytes: int = 16384) -> str:
        """The end of this launch's log output."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                end = fh.tell()
                start = max(self._log_offset, end - max_bytes)
                fh.seek(start)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        """True while the server's main process runs."""
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, timeout_s: float, poll_s: float = 1.0) -> float:
        """Poll ``GET /health`` until it answers 200.

        Args:
            timeout_s: launch timeout in (emulated) seconds. Under a compressed clock the
                real wait is never shorter than ``min(timeout_s, 10)`` real seconds: a
                process start costs real time that the time scale does not shrink.
            poll_s: (emulated) seconds between polls (at least 20 ms real).

        Returns:
            the (emulated) seconds the launch took.

        Raises:
            LauncherError: the command could not be run (see :func:`launcher_failure`).
            ServerArgsError: sglang refused the command line (its ``error:``).
            LaunchError: the process exited (classified from its log), logged an
                out-of-memory during CUDA-graph capture (at the next poll, even while it
                keeps running) or the timeout passed.
            KeyboardInterrupt: the clock's :meth:`~specband.devices.base.Clock.sleep` between
                two polls raised it (a cancelled worker's
                :class:`~specband.harness.fleet.CancellableClock`).
        """
        import httpx

        if self.proc is None:
            raise RuntimeError("wait_healthy() before start()")
        t0 = self.clock.now()
        real_start = time.monotonic()
        real_timeout = max(self.clock.to_real(timeout_s), min(timeout_s, 10.0))
        real_poll = max(0.02, self.clock.to_real(poll_s))
        with httpx.Client(timeout=max(2.0, real_poll * 5), trust_env=False) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    tail = self.log_tail()
                    cannot_run = launcher_failure(self.command, code, tail)
                    if cannot_run is not None:
                        raise LauncherError(f"--server-command cannot be run: {cannot_run} (exit {code})")
                    reason, detail = classify_failure(tail)
                    if reason == "bad_arguments":
                        raise ServerArgsError(f"sglang refused the command line: {detail} (exit {code})")
                    if reason == "port_in_use":  # the machine, not the configuration: stop, no row
                        raise PortInUseError(
                            f"port {self.port} on {self.host}: the server could not bind it ({detail}); another "
                            "process holds it (stop it or pass another --port)"
                        )
                    raise LaunchError(reason, detail, code)
                capture_oom = _capture_oom(self.log_tail())
                if capture_oom is not None and not self._exits_within(self.OOM_EXIT_WAIT_S):
                    # sglang may log it and hang: no need to wait for the launch timeout
                    raise LaunchError("out_of_memory_cuda_graph_capture", capture_oom)
                if capture_oom is not None:
                    continue  # it exited: classified with its exit status above
                try:
                    healthy = client.get(self.base_url + "/health").status_code == 200
                except httpx.HTTPError:
                    healthy = False
                if healthy:
                    self.check_own_listener()
                    return self.clock.now() - t0
                if time.monotonic() - real_start >= real_timeout:
                    raise LaunchError("launch_timeout", f"no healthy /health within {timeout_s:g} s")
                # through the clock: a cancelled pool worker's clock raises KeyboardInterrupt
                # here, so a server it registered after the pool's stop ran is stopped now
                # (by the caller), not when the launch timeout passes
                self.clock.sleep(real_poll / self.clock.time_scale)

    def check_own_listener(self) -> None:
        """Prove that what answers on the port is this server: every socket listening on
        ``port`` (``/proc/net/tcp`` and ``tcp6``) must be held by a process of this
        server's process group (Linux; elsewhere nothing is checked).

        Raises:
            PortInUseError: a socket on the port belongs to another process (the rows would
                measure someone else's server), or this group holds none while something
                answers.
        """
        if self.pgid is None:
            return
        listeners = listening_socket_inodes(self.port)
        if listeners is None:
            return  # no /proc/net: cannot tell
        ours = socket_inodes_of(group_members(self.pgid))
        foreign = listeners - ours
        if foreign or not listeners & ours:
            raise PortInUseError(
                f"port {self.port} on {self.host} is answered by a process specband did not start (its server, "
                f"process group {self.pgid}, does not hold the listening socket); refusing to measure it (stop "
                "the other server or pass another --port)"
            )

    #: Real seconds a server that logged an out-of-memory during CUDA-graph capture gets
    #: to exit before it is classified as hung in that state.
    OOM_EXIT_WAIT_S = 3.0

    def _exits_within(self, wait_s: float) -> bool:
        """True when the process exits within ``wait_s`` real seconds."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``grace_s`` real
        seconds; return once no process of the group is left. Idempotent. Ctrl-C and
        SIGTERM received meanwhile take effect once it returns."""
        if self.pgid is None or self.proc is None:
            return
        with deferred():  # a second Ctrl-C waits until the group is gone
            self._stop(grace_s)

    def _stop(self, grace_s: float) -> None:
        pgid, proc = self.pgid, self.proc
        assert pgid is not None and proc is not None
        try:
            if process_group_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + grace_s
                while time.monotonic() < deadline:
                    proc.poll()  # reap the leader so that it does not linger as a zombie
                    if not process_group_alive(pgid):
                        break
                    time.sleep(0.02)
                else:
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()
                    deadline = time.monotonic() + grace_s
                    while process_group_alive(pgid) and time.monotonic() < deadline:
                        time.sleep(0.02)
            proc.wait()
        finally:
            with _LIVE_LOCK:
                _LIVE.pop(pgid, None)
            self.pgid = None

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
