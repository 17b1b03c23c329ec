"""What ``govern`` settles before its loop starts: the server's engine and facts, its clock,
the GPUs and their limits, and the plan (read, or simulated as a first guess).

The server's GPUs are ``--gpus``, else those it reports (sglang's ``tp_size`` ranks from
``base_gpu_id``), else GPU 0. Each is read through NVML (``--device nvml``/``auto``) or is the
emulator's GPU (``--device emulated``); with ``--dry-run`` and no NVML the server alone is read
(``--device none``, or ``auto`` without NVML: said once). The clock is the emulator's when the
server is ``specband emulate`` (its time-scale header: every duration of the loop is then in
emulated seconds), else real time.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specband.core.errors import ConfigError, DeviceError, EngineError
from specband.deploy.probe import find_engine
from specband.deploy.probe_sim import profile_for_gpu
from specband.devices import NullDevice, NvmlDevice
from specband.devices.base import Clock, GpuDevice
from specband.devices.power_limit import PowerLimitError, PowerLimitRange
from specband.engines.base import Engine
from specband.engines.client import ProbeHttp, emulator_time_scale
from specband.engines.probing import ServerFacts
from specband.govern.firstguess import first_guess_plan
from specband.govern.plan import GovernorPlan, read_plan
from specband.govern.request import GovernRequest, parse_gpus, parse_tiers

__all__ = ["Governed", "open_devices", "plan_for", "prepare"]


@dataclass
class Governed:
    """The server, its GPUs and the plan, as the loop takes them.

    Attributes:
        engine: the server's engine.
        facts: what the server is.
        clock: the governor's clock (emulated seconds against the emulator).
        gpus: the governed NVML indices.
        devices: their devices (a :class:`~specband.devices.base.NullDevice` where none is read).
        ranges: each GPU's limits (``None`` where the device gives none: a dry run only).
        plan: the plan followed.
        notes: what to say before the loop starts.
    """

    engine: Engine
    facts: ServerFacts
    clock: Clock
    gpus: tuple[int, ...]
    devices: list[GpuDevice]
    ranges: list[PowerLimitRange | None]
    plan: GovernorPlan
    notes: list[str] = field(default_factory=list)


def open_devices(
    r: GovernRequest, gpus: Sequence[int], time_scale: float, notes: list[str]
) -> tuple[list[GpuDevice], list[PowerLimitRange | None]]:
    """Open each governed GPU and read its limits.

    Raises:
        DeviceError: NVML missing or failing without ``--dry-run`` (or with ``--device nvml``);
        PowerLimitError: a GPU that cannot set limits, without ``--dry-run``;
        ConfigError: ``--device emulated`` on more than GPU 0, or without ``--emulator-state``.
    """
    devices: list[GpuDevice] = []
    if r.device == "emulated":
        if list(gpus) != [0]:
            raise ConfigError("--device emulated is one GPU (the emulator's state file): --gpus 0")
        if r.plugged is None:
            raise ConfigError("--device emulated needs --emulator-state (the emulator's --state-file)")
        devices.append(r.plugged(time_scale).open())
    elif r.device == "none":
        devices = [NullDevice(name=f"gpu {i} (not read)") for i in gpus]
    else:
        for i in gpus:
            try:
                devices.append(NvmlDevice(i))
            except DeviceError as exc:
                if not r.dry_run or r.device == "nvml":
                    for d in devices:
                        d.close()
                    raise DeviceError(
                        f"govern sets power limits through NVML: {exc}; --dry-run watches without it"
                    ) from None
                notes.append(f"GPU {i}: {exc}; the dry run reads the server only")
                devices.append(NullDevice(name=f"gpu {i} (not read)"))
    ranges: list[PowerLimitRange | None] = []
    for i, d in zip(gpus, devices, strict=True):
        try:
            ranges.append(d.power_limit_range_w())
        except PowerLimitError as exc:
            if not r.dry_run:
                raise
            notes.append(f"GPU {i}: {exc}")
            ranges.append(None)
    if not r.dry_run and any(rng is None for rng in ranges):
        raise PowerLimitError("a governed GPU cannot set its power limit (its device gives no range)")
    return devices, ranges


def _pair(r: GovernRequest, facts: ServerFacts, notes: list[str]) -> tuple[str | None, str | None]:
    """The pair the first guess simulates: the options, else the server's own folders when both
    are local, else the bundled pair (said)."""
    if r.target_config is not None or r.draft_config is not None:
        return r.target_config, r.draft_config
    local = [p for p in (facts.target, facts.draft) if p and (Path(p) / "config.json").is_file()]
    if len(local) == 2:
        return facts.target, facts.draft
    notes.append(
        "the first guess simulates the bundled pair (Llama-3.2-1B + its EAGLE3 head): the server's models are not "
        "local folders here; give --target-config/--draft-config (bundled names such as llama-3.1-8b-instruct work)"
    )
    return None, None


def plan_for(
    r: GovernRequest,
    engine: Engine | None,
    facts: ServerFacts | None,
    gpu_range: PowerLimitRange | None,
    device_name: str | None,
    notes: list[str],
) -> GovernorPlan:
    """``--plan``'s plan, or the simulated first guess (:func:`~specband.govern.firstguess.first_guess_plan`).

    Raises:
        ConfigError: no profile to simulate on; DataError: a bad plan file.
    """
    if r.plan is not None:
        return read_plan(r.plan)
    profile = r.gpu or (r.emulator_hardware if r.device == "emulated" else profile_for_gpu(device_name))
    if profile is None:
        raise ConfigError(
            f"no plan: give --plan FILE, or --gpu PROFILE for a simulated first guess (NVML's GPU, "
            f"{device_name or 'none'}, has no built-in profile)"
        )
    target, draft = _pair(r, facts, notes) if facts is not None else (r.target_config, r.draft_config)
    chains_only = engine is not None and not any(a[1] > 1 for a in engine.actions)
    extra = [facts.action] if facts is not None and facts.action else []
    return first_guess_plan(
        profile,
        target,
        draft,
        acceptance_from=r.acceptance_from,
        batch_sizes=parse_tiers(r.tiers),
        gpu_range=gpu_range,
        range_source=None if gpu_range is None else f"NVML ({device_name})",
        chains_only=chains_only,
        extra_actions=extra,
    )


def prepare(r: GovernRequest, server_http: Callable[[], ProbeHttp]) -> Governed:
    """Find the engine, read the server's facts, open the GPUs and make the plan.

    Raises:
        EngineError: the server does not answer, as no known engine, or without ``/metrics``;
        and the errors of :func:`open_devices` and :func:`plan_for`.
    """
    assert r.url is not None
    scale = emulator_time_scale(r.url, r.timeout_s) or 1.0
    with server_http() as http:
        engine = find_engine(http, r.engine)
        facts = engine.serving.server_facts(http)
    if not facts.metrics_enabled:
        raise EngineError(f"{r.url} serves no /metrics: {'; '.join(facts.notes) or 'nothing to read'}")
    notes = [n for n in facts.notes if "--gpus" not in n or r.gpus is None]
    gpus = parse_gpus(r.gpus) if r.gpus is not None else (facts.gpus or (0,))
    if r.device == "emulated" and r.gpus is None:
        gpus = (0,)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        devices, ranges = open_devices(r, gpus, scale, notes)
    notes += [str(w.message) for w in caught]
    try:
        known = next((rng for rng in ranges if rng is not None), None)
        plan = plan_for(r, engine, facts, known, devices[0].name, notes)
    except BaseException:
        for d in devices:
            d.close()
        raise
    return Governed(engine, facts, Clock(scale), tuple(gpus), devices, ranges, plan, notes)
