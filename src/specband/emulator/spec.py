"""The emulator's GPU as a typed device spec (:class:`specband.devices.DeviceSpec`): what
the CLI plugs into the sweep for ``--device emulated``, so that the device layer and the
harness import nothing of the emulator."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError, DeviceError
from specband.devices.base import GpuDevice
from specband.devices.power_limit import PowerLimitRange
from specband.emulator.env import HARDWARE_ENV, MODEL_ENV, STATE_ENV, TIME_SCALE_ENV
from specband.emulator.gpu import EmulatedDevice
from specband.emulator.models import load_performance_model
from specband.files.pathlock import PathLock
from specband.sim.power_capped import model_power_limit_range

__all__ = ["EmulatedGpuSpec"]


@dataclass(frozen=True)
class EmulatedGpuSpec:
    """One emulated GPU: its state file, performance model and time scale.

    Attributes:
        state_path: the GPU's state file, shared with the emulator servers.
        hardware: the performance-model profile id (``--emulator-hardware``).
        model: ``--emulator-model`` (``calibrated`` or ``module:function``, loaded where the
            device is opened: in a ``--ray`` worker, on its node), or a loaded performance model.
        time_scale: real seconds per emulated second (``--time-scale``).
    """

    state_path: Path
    hardware: str
    model: Any = "calibrated"
    time_scale: float = 1.0

    def performance_model(self) -> Any:
        """The performance model (loaded from its name; raises ConfigError for a bad one)."""
        if not isinstance(self.model, str):
            return self.model

        return load_performance_model(self.model, self.hardware)

    def check(self, option: str = "--emulator-state") -> None:
        """Refuse a state path that cannot be the GPU's state file, before anything runs (the
        dry run refuses it as the run does, hostile trial E06).

        Raises:
            ConfigError: it is a folder, a device, FIFO or socket, or its folder is a file.
        """
        path = self.state_path
        if path.exists() and not path.is_file():
            what = "a folder" if path.is_dir() else "not a regular file (a device, FIFO or socket)"
            raise ConfigError(
                f"{option} {path}: is {what}; give the emulated GPU's state file (JSON, written by specband)"
            )
        if path.parent.exists() and not path.parent.is_dir():
            raise ConfigError(f"{option} {path}: {path.parent} is not a folder")

    def open(self) -> GpuDevice:
        """The :class:`~specband.emulator.gpu.EmulatedDevice` of this GPU, holding a lock on its
        state file until it is closed: one sweep at a time measures on an emulated GPU (two
        sweeps sharing one measured with each other's server resident, hostile trial N52).

        Raises:
            PathBusyError: another sweep has this GPU open (one line, exit 2).
            ConfigError: :meth:`check`; DeviceError: the state file is invalid.
        """
        self.check()
        try:
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeviceError(f"{self.state_path}: cannot create its folder: {exc.strerror}") from None
        lock = PathLock(self.state_path, "the emulated GPU of another running sweep").acquire()
        try:
            return EmulatedDevice(self.state_path, self.performance_model(), self.hardware, self.time_scale, held=lock)
        except BaseException:
            lock.release()
            raise

    def power_limit_range_w(self) -> PowerLimitRange:
        """The limits this emulated GPU accepts (:func:`specband.sim.power_capped.model_power_limit_range`
        of its model); reads no state file, so a refused sweep creates none."""

        return model_power_limit_range(self.performance_model())

    def for_gpu(self, index: int) -> tuple[EmulatedGpuSpec, dict[str, str]]:
        """GPU ``index`` of a multi-GPU sweep: its own state file ``<stem>.gpu<n><suffix>``
        (each emulated GPU heats alone), and the server variable naming it."""
        state = self.state_path.with_name(f"{self.state_path.stem}.gpu{index}{self.state_path.suffix}")
        return dataclasses.replace(self, state_path=state), {STATE_ENV: str(state.resolve())}

    def server_env(self) -> dict[str, str]:
        """The environment the emulator servers read (:mod:`specband.emulator.env`)."""
        env = {
            STATE_ENV: str(self.state_path.resolve()),
            TIME_SCALE_ENV: repr(self.time_scale),
            HARDWARE_ENV: self.hardware,
        }
        if isinstance(self.model, str):
            env[MODEL_ENV] = self.model
        return env
