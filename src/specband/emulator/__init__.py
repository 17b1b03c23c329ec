"""The sglang emulator: everything ``specband emulate`` and ``--device emulated`` run on a CPU.

* :mod:`specband.emulator.server`: an sglang-compatible HTTP server (``specband emulate``)
  whose decode steps follow a performance model (:mod:`specband.emulator.engine`: its
  scheduler; :mod:`specband.emulator.options` and :mod:`specband.emulator.faults`: its own
  settings and the faults it injects);
* :mod:`specband.emulator.gpu`: the emulated GPU it draws power on, a state file shared
  with the sweep process (:class:`~specband.emulator.gpu.EmulatedDevice` is its
  :class:`~specband.devices.base.GpuDevice`);
* :mod:`specband.emulator.models`: which performance model drives both.

It is held to sglang by ``tests/engines/test_sglang_conformance.py`` (the same parser,
the same resolution of the speculative flags).
"""
