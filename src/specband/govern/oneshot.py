"""The two runs of ``govern`` that are not the loop: ``--restore`` (put back the limit a killed
governor, sweep or launch left, from each GPU's lock record) and ``--write-plan`` (write the
simulated first guess as a plan file, which ``--plan`` reads)."""

from __future__ import annotations

import warnings
from pathlib import Path

from specband.core.errors import ConfigError
from specband.devices.power_limit import restore_left_limit
from specband.files.fileio import check_out_path, write_text_atomic
from specband.govern.plan import GovernorPlan
from specband.govern.request import GovernRequest, parse_gpus
from specband.govern.setup import open_devices, plan_for

__all__ = ["restore_gpus", "write_plan"]


def restore_gpus(r: GovernRequest) -> list[str]:
    """``--restore``: one line per GPU of ``--gpus`` (default 0) saying what was put back.

    Raises:
        ConfigError: ``--device none``; PowerLimitBusyError: a live process holds a GPU's lock;
        DeviceError and its power-limit subclasses: NVML's answer.
    """
    if r.device == "none" or r.dry_run:
        raise ConfigError("--restore sets limits: not with --device none or --dry-run")
    gpus = parse_gpus(r.gpus) if r.gpus is not None else (0,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the device's capability warnings say nothing about a restore
        devices, _ranges = open_devices(r, gpus, 1.0, [])
    lines = []
    try:
        for index, device in zip(gpus, devices, strict=True):
            lines.append(f"GPU {index}: {restore_left_limit(device)}")
    finally:
        for d in devices:
            d.close()
    return lines


def write_plan(r: GovernRequest) -> tuple[Path, GovernorPlan]:
    """``--write-plan FILE``: the simulated first guess of ``--gpu``/``--target-config``/
    ``--draft-config``/``--acceptance-from``/``--tiers``, written all or nothing.

    Raises:
        ConfigError: no ``--gpu``, or FILE exists without ``--force``; DataError: a bad
        ``--acceptance-from``.
    """
    assert r.write_plan is not None
    if r.gpu is None:
        raise ConfigError(
            "--write-plan simulates a first guess: give --gpu PROFILE (and --target-config/--draft-config)"
        )
    out = check_out_path(r.write_plan, overwrite=r.force, option="--write-plan")
    plan = plan_for(r, None, None, None, None, [])
    write_text_atomic(out, plan.dumps(), error=ConfigError)
    return out, plan
