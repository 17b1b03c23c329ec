"""The user's setup for the transfer check (:class:`specband.deploy.transfer.UserSetup`): the GPU
named by ``--gpu PROFILE`` (a simulator profile's hardware and power limit) or read through
NVML, and the models as given. A floor above the simulator and the device layer, so that
:mod:`specband.deploy.transfer` and :mod:`specband.deploy.recommend` import neither.
"""

from __future__ import annotations

from pathlib import Path

from specband.core.errors import SpecbandError
from specband.deploy.transfer import UserSetup

__all__ = ["user_gpu", "user_setup"]

#: Files present wherever the NVIDIA driver is loaded (Linux, containers with the GPU mapped,
#: WSL's ``/usr/lib/wsl/lib``); without any of them NVML cannot answer.
_NVIDIA_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/usr/lib/wsl/lib/libnvidia-ml.so.1")


def user_gpu(profile: str | None = None, index: int = 0) -> UserSetup:
    """The user's GPU as a :class:`UserSetup` (models unset): a ``--gpu PROFILE``'s hardware
    and power limit when given, else NVML's name and enforced limit of GPU ``index``, else
    unknown with the reason (no NVML on this machine: the GPU is not checked, which the
    check says).

    Raises:
        ConfigError: an unknown profile.
    """
    if profile is not None:
        from specband.sim.profile import load_profile  # lazy: off the cold path (recommend, --help)

        prof = load_profile(profile)
        return UserSetup(gpu_name=prof.hardware, gpu_source=f"--gpu {profile}", power_limit_w=prof.power_limit_w)

    if not any(Path(p).exists() for p in _NVIDIA_DRIVER_PATHS):
        # no NVIDIA driver: skip loading NVML (a cold ``recommend`` stays fast)
        return UserSetup(gpu_unchecked="no NVML here")
    try:
        from specband.devices.nvml import NvmlDevice  # lazy: NVML only where a driver exists (cold recommend)

        device = NvmlDevice(index)
    except (SpecbandError, ImportError, OSError):
        return UserSetup(gpu_unchecked="no NVML here")
    try:
        try:
            limits = device.power_limit_range_w()
        except (SpecbandError, OSError):  # a GPU that does not report it (laptops: "Not Supported")
            limits = None
        return UserSetup(
            gpu_name=device.name,
            gpu_source="NVML",
            power_limit_w=device.power_limit_w,
            power_limit_range_w=None if limits is None else (limits.min_w, limits.max_w),
        )
    finally:
        device.close()


def user_setup(
    target: str | None = None,
    draft: str | None = None,
    gpu: str | None = None,
    gpu_index: int = 0,
    *,
    read_gpu: bool = True,
) -> UserSetup:
    """The user's setup for :func:`check_transfer`: the models as given, the GPU from
    ``gpu`` (a profile) or NVML (:func:`user_gpu`; not read when ``read_gpu`` is False, e.g.
    ``launch --device none``: then the GPU is said to be unchecked).

    Raises:
        ConfigError: an unknown profile.
    """
    import dataclasses

    base = (
        user_gpu(gpu, gpu_index)
        if gpu is not None or read_gpu
        else UserSetup(gpu_unchecked="the GPU was not read: --device none")
    )
    return dataclasses.replace(base, target=target, draft=draft)
