"""The serving engines, sglang and vLLM: what each accepts and answers.

:mod:`~specband.engines.sglang_flags` (flags per sglang version, the version probe),
:mod:`~specband.engines.vllm` and :mod:`~specband.engines.vllm_server` (vLLM's actions, launch line
and metrics), :mod:`~specband.engines.serverconfig` (the launch line of either),
:mod:`~specband.engines.client` (the workload client, ``/server_info``),
:mod:`~specband.engines.schedule_files` (the engines' schedule formats), :mod:`~specband.engines.cpu`
(the CPU preset) and :mod:`~specband.engines.failures` (why a launch failed).
"""
