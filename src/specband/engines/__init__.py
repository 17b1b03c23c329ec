"""The serving engines (sglang, vLLM, and any a plug-in registers) behind one interface.

:func:`get_engine` turns an ``--engine`` value (or a file's ``engine`` column) into the
:class:`~specband.engines.base.Engine` once, where it enters; that object is what travels
through the stages, which call it instead of comparing engine names. The engine list is data
(:mod:`specband.core.engine_table`); :func:`register_engine` adds one at run time.

:mod:`~specband.engines.base` (the interfaces), :mod:`~specband.engines.sglang` and
:mod:`~specband.engines.vllm` (the two engines: what each runs and how it spells a config),
:mod:`~specband.engines.sglang_serving` and :mod:`~specband.engines.vllm_serving` (their
serving halves, loaded when something serves), :mod:`~specband.engines.sglang_flags` (flags
per sglang version, the version probe), :mod:`~specband.engines.vllm_server` (vLLM's command
and ``/metrics`` counters), :mod:`~specband.engines.serverconfig` (a server's settings and
launch line), :mod:`~specband.engines.client` (the workload client, ``/server_info``),
:mod:`~specband.engines.schedule_files` (the engines' schedule formats),
:mod:`~specband.engines.cpu` (the CPU preset) and :mod:`~specband.engines.failures` (why a
launch failed).
"""

from specband.engines.base import (
    Engine,
    default_engine,
    engine_field,
    engine_names,
    get_engine,
    register_engine,
    unregister_engine,
)

__all__ = [
    "Engine",
    "default_engine",
    "engine_field",
    "engine_names",
    "get_engine",
    "register_engine",
    "unregister_engine",
]
