"""``specband probe --url URL``: read a running sglang or vLLM server and write a probe file.

The engine is found from its endpoints (each engine's
:meth:`~specband.engines.base.Engine.recognises`, in :data:`specband.engines.base.ENGINES`'
order) or named with ``--engine``; the engine reads the server
(:meth:`~specband.engines.base.Engine.probe_server`: its config, acceptance and batch sizes),
sending at most ``--max-requests`` short completion requests and nothing else that changes
it (``GET`` only otherwise). When the server is local (127.0.0.1, localhost or ::1) and an
NVIDIA GPU is present, the GPU's power and power limit are read through NVML
(:mod:`specband.devices`). The result is written, all or nothing, as the probe file whose
format is :data:`PROBE_FORMAT` version :data:`PROBE_VERSION` (read by
``--acceptance-from``); what the current and the best configs would give on this workload is
:mod:`specband.deploy.probe_sim`'s.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specband import __version__
from specband.core.errors import ConfigError, EngineError, SpecbandError
from specband.core.limits import (
    DEFAULT_PROBE_REQUESTS,
    MAX_GPU_INDEX,
    MAX_NEW_TOKENS,
    MAX_PROBE_REQUESTS,
    MAX_TIMEOUT_S,
)
from specband.core.optionspec import option
from specband.deploy.probe_sim import ProbeSimulation, profile_for_gpu, simulate_probe
from specband.engines.base import ENGINE_NAMES, Engine, get_engine
from specband.engines.client import PROMPTS, ProbeHttp
from specband.engines.probing import ProbePlan, ServerReading
from specband.files.fileio import check_out_path, given_path, write_text_atomic

__all__ = [
    "LOCAL_HOSTS",
    "PROBE_FORMAT",
    "PROBE_VERSION",
    "PowerReading",
    "ProbeOutcome",
    "ProbeRequest",
    "check_url",
    "find_engine",
    "probe_file_json",
    "read_local_power",
    "run_probe",
]

#: The probe file's ``format`` and ``version`` (the contract with ``--acceptance-from``'s reader).
PROBE_FORMAT = "specband-probe"
PROBE_VERSION = 1
#: Hosts whose GPU is this machine's (its power is read through NVML).
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/usr/lib/wsl/lib/libnvidia-ml.so.1")


def check_url(url: str) -> str:
    """``http(s)://host[:port]`` without a path, query or credentials (ConfigError)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--url must be http://HOST:PORT (the server's address), got {url!r}")
    if parts.username or parts.password:
        raise ConfigError("--url must not carry credentials")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"--url must be the server's base address without a path, got {url!r}")
    try:
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise ConfigError(f"--url has a bad port: {url!r}") from None
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class ProbeRequest:
    """Every option of ``specband probe``.

    Raises:
        ConfigError: a bad URL, ``--engine``, or ``--out`` (one line each).
    """

    url: str = option(
        ...,
        "--url",
        help="The running server's address, e.g. http://127.0.0.1:30000 (sglang) or http://127.0.0.1:8000 (vLLM).",
        panel="input",
        metavar="URL",
    )
    engine: str = option(
        "auto",
        "--engine",
        help=f"The server's engine: auto (found from its endpoints), {' or '.join(ENGINE_NAMES)}.",
        panel="input",
        metavar="NAME",
    )
    prompts: str | None = option(
        None,
        "--prompts",
        help="Your prompts (the sweep's --prompts formats: JSONL of prompt or messages, or ShareGPT JSON); "
        "the first --max-requests are sent once each and the acceptance is read from their answers. "
        "Without it the server's own counters since launch give the acceptance.",
        panel="input",
        metavar="FILE",
        show_default=False,
    )
    max_requests: int = option(
        DEFAULT_PROBE_REQUESTS,
        "--max-requests",
        help="At most this many completion requests are sent, one at a time (0: only read the server).",
        panel="grid",
        metavar="N",
        min=0,
        max=MAX_PROBE_REQUESTS,
    )
    max_new_tokens: int = option(
        64,
        "--max-new-tokens",
        help="Tokens each request decodes.",
        panel="grid",
        metavar="N",
        min=1,
        max=MAX_NEW_TOKENS,
    )
    timeout_s: float = option(
        30.0,
        "--timeout",
        help="Seconds one HTTP request may take.",
        panel="server",
        metavar="S",
        min=0.1,
        max=MAX_TIMEOUT_S,
    )
    watch_s: float = option(
        1.0,
        "--watch",
        help="Seconds over which the server's running-requests gauge is sampled for its batch sizes.",
        panel="server",
        metavar="S",
        min=0.0,
        max=600.0,
    )
    gpu: str | None = option(
        None,
        "--gpu",
        help="The server's GPU as a simulator profile (h100-sxm, h200, a100-sxm4-80gb, rtx4060-laptop) for what "
        "the configs would give (simulated). Default: the profile of NVML's GPU when the server is local; "
        "without either nothing is simulated.",
        panel="model",
        metavar="PROFILE",
        show_default=False,
    )
    gpu_index: int = option(
        0,
        "--gpu-index",
        help="NVML index of a local server's GPU.",
        panel="telemetry",
        metavar="N",
        min=0,
        max=MAX_GPU_INDEX,
    )
    target_config: str | None = option(
        None,
        "--target-config",
        help="Target model's config.json or a bundled name for the simulation (default: the server's model "
        "folder when it is local, else the bundled pair's).",
        panel="model",
        metavar="CONFIG",
        show_default=False,
    )
    draft_config: str | None = option(
        None,
        "--draft-config",
        help="EAGLE3 draft head's config.json or a bundled name (default: the server's draft folder when local).",
        panel="model",
        metavar="CONFIG",
        show_default=False,
    )
    out: str = option(
        "specband-probe.json", "--out", help="The probe file to write (JSON).", panel="output", metavar="FILE"
    )
    force: bool = option(False, "--force", help="Replace --out if it exists.", panel="output")

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", check_url(self.url))
        if self.engine != "auto":
            get_engine(self.engine)  # ConfigError: an unknown name
        for name, value in (("--timeout", self.timeout_s), ("--watch", self.watch_s)):
            if not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value}")
        given_path("--out", self.out)


@dataclass(frozen=True)
class PowerReading:
    """A local GPU's power as NVML reads it (the probe file's ``power``).

    Attributes:
        power_w: board power now, W (measured).
        power_limit_w: the enforced limit, W.
        min_limit_w, max_limit_w: the limits it accepts, W (``None`` when NVML gives none).
        gpu: its name.
    """

    power_w: float | None
    power_limit_w: float | None
    min_limit_w: float | None
    max_limit_w: float | None
    gpu: str

    def to_json(self) -> dict[str, Any]:
        """The probe file's ``power`` object."""
        return {
            "power_w": self.power_w,
            "power_limit_w": self.power_limit_w,
            "min_limit_w": self.min_limit_w,
            "max_limit_w": self.max_limit_w,
            "gpu": self.gpu,
        }


@dataclass(frozen=True)
class ProbeOutcome:
    """What ``specband probe`` read and wrote.

    Attributes:
        reading: the server's :class:`~specband.engines.probing.ServerReading`.
        power: the local GPU's power, or ``None`` (``power_note`` says why).
        power_note: why there is no power reading (``None`` when there is one).
        path: the probe file written.
        max_requests: the bound on the requests the probe could send.
        data: the probe file's JSON object.
        simulation: what the current and the best configs would give (simulated), or ``None``
            (``simulation_note`` says why).
    """

    reading: ServerReading
    power: PowerReading | None
    power_note: str | None
    path: Path
    max_requests: int
    data: dict[str, Any]
    simulation: ProbeSimulation | None = None
    simulation_note: str | None = None


def read_local_power(url: str, index: int) -> tuple[PowerReading | None, str | None]:
    """NVML's power reading of GPU ``index`` when the server at ``url`` is local and a GPU is
    present: ``(reading, None)``, else ``(None, why)``."""
    host = urlsplit(url).hostname or ""
    if host not in LOCAL_HOSTS:
        return None, f"the server is not local ({host}): its GPU's power cannot be read from here"
    if not any(Path(p).exists() for p in _DRIVER_PATHS):
        return None, "no NVIDIA driver on this machine: no GPU power read"
    try:
        from specband.devices.nvml import NvmlDevice  # lazy: NVML only where a driver exists

        device = NvmlDevice(index)
    except (SpecbandError, ImportError, OSError) as exc:
        return None, f"NVML cannot read GPU {index}: {exc}"
    try:
        limits = device.power_limit_range_w()
        power = device.read_power_w()
        return PowerReading(
            power_w=None if power is None else round(power, 3),
            power_limit_w=device.power_limit_w,
            min_limit_w=None if limits is None else limits.min_w,
            max_limit_w=None if limits is None else limits.max_w,
            gpu=device.name,
        ), None
    finally:
        device.close()


def find_engine(http: ProbeHttp, name: str) -> Engine:
    """The engine ``name``, or with ``"auto"`` the first of :data:`~specband.engines.base.ENGINES`
    that recognises the server (EngineError: none does)."""
    if name != "auto":
        return get_engine(name)
    for candidate in ENGINE_NAMES:
        engine = get_engine(candidate)
        if engine.recognises(http):
            return engine
    raise EngineError(
        f"{http.base_url} answers, but as neither {' nor '.join(get_engine(n).display_name for n in ENGINE_NAMES)} "
        "(no sglang /server_info, no vLLM /version with vllm: metrics); pass --engine if it is one"
    )


def probe_file_json(
    reading: ServerReading, power: PowerReading | None, power_note: str | None, max_requests: int
) -> dict[str, Any]:
    """The probe file's JSON object (format :data:`PROBE_FORMAT`, version :data:`PROBE_VERSION`)."""
    return {
        "format": PROBE_FORMAT,
        "version": PROBE_VERSION,
        "engine": reading.engine,
        "engine_version": reading.engine_version,
        "url": reading.url,
        "target": reading.target,
        "draft": reading.draft,
        "action": list(reading.action),
        "flags": dict(reading.flags),
        "acceptance": None if reading.acceptance is None else reading.acceptance.to_json(),
        "batch_sizes_seen": list(reading.batch_sizes_seen),
        "batch_size_source": reading.batch_size_source,
        "power": None if power is None else power.to_json(),
        "power_note": power_note,
        "requests_sent": reading.requests_sent,
        "max_requests": max_requests,
        "notes": list(reading.notes),
        "probed_at_unix": round(time.time(), 3),
        "specband_version": __version__,
    }


def _prompt_loader(path: str | None) -> Any:
    if path is None:
        return None
    from specband.harness.workload import load_prompts

    given = given_path("--prompts", path)

    def load(target: str | None) -> tuple[str, ...]:
        return load_prompts(given, target or "").prompts

    return load


def run_probe(request: ProbeRequest) -> ProbeOutcome:
    """Probe the server of ``request.url`` and write the probe file.

    Raises:
        ConfigError: ``--out`` cannot take the file, or ``--prompts`` cannot be read.
        EngineError: the server does not answer, answers as no known engine, or fails a request.
    """
    out = check_out_path(request.out, overwrite=request.force)
    if request.gpu is not None:
        from specband.sim.profile import load_profile

        load_profile(request.gpu)  # ConfigError: an unknown profile, before the server is read
    if request.target_config is not None or request.draft_config is not None:
        from specband.sim.model import model_pair

        model_pair(request.target_config, request.draft_config)  # ConfigError: a bad config, or one alone
    plan = ProbePlan(
        max_requests=request.max_requests,
        max_new_tokens=request.max_new_tokens,
        prompts=_prompt_loader(request.prompts),
        builtin_prompts=PROMPTS,
        watch_s=request.watch_s,
    )
    with ProbeHttp(request.url, request.timeout_s) as http:
        engine = find_engine(http, request.engine)
        reading = engine.probe_server(http, plan)
    assert reading.requests_sent <= request.max_requests  # the plan's bound, kept by every engine
    power, power_note = read_local_power(request.url, request.gpu_index)
    data = probe_file_json(reading, power, power_note, request.max_requests)
    write_text_atomic(out, json.dumps(data, indent=2) + "\n", error=ConfigError)
    profile = request.gpu or profile_for_gpu(None if power is None else power.gpu)
    if profile is None:
        why = "pass --gpu PROFILE (e.g. h200) to see what the current and the best configs would give (simulated)"
        return ProbeOutcome(reading, power, power_note, out, request.max_requests, data, None, why)
    simulation = simulate_probe(
        reading,
        out,
        engine,
        profile,
        current_limit_w=None if power is None else power.power_limit_w,
        target_config=request.target_config,
        draft_config=request.draft_config,
    )
    return ProbeOutcome(reading, power, power_note, out, request.max_requests, data, simulation)
