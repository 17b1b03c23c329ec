"""The serving engines, sglang and vLLM: what each accepts and answers, behind one interface.

:mod:`~specband.engines.base` (the :class:`~specband.engines.base.Engine` protocol and
:func:`~specband.engines.base.get_engine`, which the layers above call with ``--engine``'s
value once instead of comparing engine names), :mod:`~specband.engines.sglang` and
:mod:`~specband.engines.vllm` (the two engines), :mod:`~specband.engines.sglang_flags` (flags
per sglang version, the version probe), :mod:`~specband.engines.vllm_server` (vLLM's command
and ``/metrics`` counters), :mod:`~specband.engines.serverconfig` (a server's settings and
launch line), :mod:`~specband.engines.client` (the workload client, ``/server_info``),
:mod:`~specband.engines.schedule_files` (the engines' schedule formats),
:mod:`~specband.engines.cpu` (the CPU preset) and :mod:`~specband.engines.failures` (why a
launch failed).
"""
