"""``specband govern``: a daemon beside a running sglang or vLLM server that moves each GPU's
power limit with the server's running batch size, holding the energy utilisation (average
power / limit) inside the 95-98 % band.

Stage: above :mod:`specband.deploy` (it follows a plan made from the answer: the simulated
first guess now, the joint pick of flags and limit per batch size later) and below
:mod:`specband.cli`. Modules: :mod:`~specband.govern.plan` (the plan type and its file),
:mod:`~specband.govern.firstguess` (a simulated plan), :mod:`~specband.govern.controller`
(the pure feedback loop), :mod:`~specband.govern.readings` (hostile readings are skipped),
:mod:`~specband.govern.sources` (bounded reads of the server and the GPUs),
:mod:`~specband.govern.drift` and :mod:`~specband.govern.replan` (the acceptance against the
plan), :mod:`~specband.govern.ledger` (time in band, energy, J/token),
:mod:`~specband.govern.log` and :mod:`~specband.govern.exporter` (JSONL log, Prometheus),
:mod:`~specband.govern.run` (the loop, the lock and the restores), :mod:`~specband.govern.replay`
(the same loop replayed in simulation over a batch-size trace).
"""
