"""``specband probe --url URL``: read a running sglang or vLLM server and write a probe file.

The engine is found from its endpoints (each engine's
:meth:`~specband.engines.base.EngineServing.recognises`, in the engine list's order,
:func:`specband.engines.base.engine_names`) or named with ``--engine``; the engine reads the server
(:meth:`~specband.engines.base.EngineServing.probe_server`: its config, acceptance and batch sizes),
sending at most ``--max-requests`` short completion requests and nothing else that changes
it (``GET`` only otherwise). When the server is local (127.0.0.1, localhost or ::1) and an
NVIDIA GPU is present, the GPU's power and power limit are read through NVML
(:mod:`specband.devices`). The result is written, all or nothing, as the probe file whose
format is :data:`~specband.engines.probe_file.PROBE_FORMAT` version
:data:`~specband.engines.probe_file.PROBE_VERSION` (:mod:`specband.engines.probe_file`; read by
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
from specband.core.batchlist import parse_batch_sizes
from specband.core.errors import ConfigError, EngineError, SpecbandError
from specband.core.limits import (
    DEFAULT_PROBE_REQUESTS,
    MAX_GPU_INDEX,
    MAX_NEW_TOKENS,
    MAX_PROBE_REQUESTS,
    MAX_TIMEOUT_S,
)
from specband.core.optionspec import option
from specband.deploy.jointpick import ServingWorkload, workload_field
from specband.deploy.probe_sim import ProbeSimulation, profile_for_gpu, simulate_probe
from specband.deploy.table import explain_field
from specband.engines.base import Engine, engine_names, get_engine
from specband.engines.client import PROMPTS, ProbeHttp
from specband.engines.probe_file import PROBE_FORMAT, PROBE_VERSION, reading_sha256
from specband.engines.probing import ProbePlan, ServerReading, check_reading
from specband.files.fileio import check_out_path, given_path, write_text_atomic

__all__ = [
    "LOCAL_HOSTS",
    "PowerReading",
    "ProbeOutcome",
    "ProbeRequest",
    "check_url",
    "find_engine",
    "probe_file_json",
    "read_local_power",
    "run_probe",
]

#: Hosts whose GPU is this machine's (its power is read through NVML).
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/usr/lib/wsl/lib/libnvidia-ml.so.1")


def check_url(url: str) -> str:
    """``http(s)://host[:port]`` without a path, query or credentials (ConfigError; a bracketed
    host that is no IPv6 address too: urllib raises ValueError on it, hostile trial P15)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError as exc:
        raise ConfigError(f"--url is not a URL ({exc}): {url!r}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(f"--url must be http://HOST:PORT (the server's address), got {url!r}")
    if parts.username or parts.password:
        raise ConfigError("--url must not carry credentials")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"--url must be the server's base address without a path, got {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"--url has a bad port: {url!r}") from None
    bracketed = f"[{host}]" if ":" in host else host
    if parts.netloc.lower() != (bracketed if port is None else f"{bracketed}:{port}").lower():
        raise ConfigError(f"--url must be http://HOST:PORT (the server's address), got {url!r}")
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
    engine: Engine | None = option(
        "auto",
        "--engine",
        help=f"The server's engine: auto (found from its endpoints), {' or '.join(engine_names())}; the suggested "
        "configs are printed in its flags.",
        panel="input",
        metavar="NAME",
        parse=lambda value: _given_engine(value),
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
    batch_size: str | None = option(
        None,
        "--batch-size",
        "-b",
        help="Batch sizes to answer (1,8,32,64), one row each: the config and the power limit picked together "
        "(simulated). Default: the engine's tiers (sglang's default adaptive tiers 1, 8, 32, 64) and the batch sizes "
        "the server was seen running.",
        panel="model",
        metavar="N[,N...]",
        show_default=False,
    )
    prompt_tokens: int | None = workload_field("prompt")
    output_tokens: int | None = workload_field("output")
    explain: bool = explain_field()
    out: str = option(
        "specband-probe.json", "--out", help="The probe file to write (JSON).", panel="output", metavar="FILE"
    )
    force: bool = option(False, "--force", help="Replace --out if it exists.", panel="output")

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", check_url(self.url))
        object.__setattr__(self, "engine", _given_engine(self.engine))  # resolved once (ConfigError: unknown)
        for name, value in (("--timeout", self.timeout_s), ("--watch", self.watch_s)):
            if not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value}")
        given_path("--out", self.out)
        if self.batch_size is not None:
            parse_batch_sizes(self.batch_size, "--batch-size")  # a bad list, naming the option

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """``-b``'s batch sizes (empty: the default)."""
        return () if self.batch_size is None else tuple(parse_batch_sizes(self.batch_size, "--batch-size"))


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
        provenance: ``"measured"``, or ``"emulated"`` when the server was ``specband emulate``.
    """

    reading: ServerReading
    power: PowerReading | None
    power_note: str | None
    path: Path
    max_requests: int
    data: dict[str, Any]
    simulation: ProbeSimulation | None = None
    simulation_note: str | None = None
    provenance: str = "measured"


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


def _given_engine(value: str | Engine | None) -> Engine | None:
    """``--engine``: ``None`` for ``auto`` (found from the server's endpoints), else the engine."""
    return None if value is None or value == "auto" else get_engine(value)


def find_engine(http: ProbeHttp, given: str | Engine | None) -> Engine:
    """The engine ``given`` (a name or an :class:`~specband.engines.base.Engine`), or with
    ``None``/``"auto"`` the first known engine that recognises the server (EngineError: none does)."""
    given = _given_engine(given)
    if given is not None:
        return given
    engines = [get_engine(name) for name in engine_names()]
    for engine in engines:
        if engine.serving.recognises(http):
            return engine
    raise EngineError(
        f"{http.base_url} answers, but as neither {' nor '.join(e.display_name for e in engines)} "
        "(no sglang /server_info, no vLLM /version with vllm: metrics); pass --engine if it is one"
    )


def probe_file_json(
    reading: ServerReading,
    power: PowerReading | None,
    power_note: str | None,
    max_requests: int,
    provenance: str = "measured",
) -> dict[str, Any]:
    """The probe file's JSON object (:mod:`specband.engines.probe_file`: format
    ``specband-probe``, its current version, ``reading_sha256`` over what was read);
    ``provenance`` is ``"emulated"`` for ``specband emulate``'s server."""
    data: dict[str, Any] = {
        "format": PROBE_FORMAT,
        "version": PROBE_VERSION,
        "provenance": provenance,
        "engine": reading.engine.name,
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
    data["reading_sha256"] = reading_sha256(json.loads(json.dumps(data)))  # as a reader will see it
    return data


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
        EngineError: the server does not answer, answers as no known engine, fails a request, or
            reports what no server runs (:func:`~specband.engines.probing.check_reading`).
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
        reading = engine.serving.probe_server(http, plan)
    assert reading.requests_sent <= request.max_requests  # the plan's bound, kept by every engine
    check_reading(reading)  # EngineError: what --acceptance-from would refuse is never written
    power, power_note = read_local_power(request.url, request.gpu_index)
    provenance = "emulated" if http.emulated else "measured"
    data = probe_file_json(reading, power, power_note, request.max_requests, provenance)
    write_text_atomic(out, json.dumps(data, indent=2) + "\n", error=ConfigError)
    profile = request.gpu or profile_for_gpu(None if power is None else power.gpu)
    if profile is None:
        why = "pass --gpu PROFILE (e.g. h200) to see what the current and the best configs would give (simulated)"
        return ProbeOutcome(reading, power, power_note, out, request.max_requests, data, None, why, provenance)
    limits = None
    if power is not None and power.min_limit_w is not None and power.max_limit_w is not None:
        limits = (power.min_limit_w, power.max_limit_w)
    simulation = simulate_probe(
        reading,
        out,
        engine,
        profile,
        current_limit_w=None if power is None else power.power_limit_w,
        limits_w=limits,
        target_config=request.target_config,
        draft_config=request.draft_config,
        batch_sizes=request.batch_sizes or None,
        workload=ServingWorkload(request.prompt_tokens, request.output_tokens, "--prompt-tokens/--output-tokens"),
    )
    return ProbeOutcome(reading, power, power_note, out, request.max_requests, data, simulation, None, provenance)
