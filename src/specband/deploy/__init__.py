"""The answer and its deployment: :mod:`~specband.deploy.recommend` (what ``recommend`` decides),
:mod:`~specband.deploy.answers` (the answer types), :mod:`~specband.deploy.power_answer` (with a
power limit), :mod:`~specband.deploy.mix` (one config for a batch-size mix),
:mod:`~specband.deploy.tiers` and :mod:`~specband.deploy.schedule` (per-batch-size schedules),
:mod:`~specband.deploy.firstguess` (without a sweep), :mod:`~specband.deploy.transfer` and
:mod:`~specband.deploy.usersetup` (no silent transfer), :mod:`~specband.deploy.explain` and
:mod:`~specband.deploy.launch` (``specband launch``).
"""
