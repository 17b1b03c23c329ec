"""The answer and its deployment: :mod:`~specband.deploy.recommend` (which answer a command
gets: :func:`~specband.deploy.recommend.answer`, the one dispatch), :mod:`~specband.deploy.answers`
(every answer type), :mod:`~specband.deploy.mix` (one config for a batch-size mix),
:mod:`~specband.deploy.tiers` and :mod:`~specband.deploy.schedule` (per-batch-size schedules),
:mod:`~specband.deploy.firstguess` (without a sweep), :mod:`~specband.deploy.transfer` and
:mod:`~specband.deploy.usersetup` (no silent transfer), :mod:`~specband.deploy.explain` and
:mod:`~specband.deploy.launch` (``specband launch``). The answer over several power limits is
the selector of :mod:`specband.sweeps.limit_table` over its table.
"""
