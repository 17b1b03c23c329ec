"""The measured rows: :mod:`~specband.sweeps.dataset` (loading a sweep file),
:mod:`~specband.sweeps.benchfile` (sglang's bench files), :mod:`~specband.sweeps.origin` (where the
rows come from) and :mod:`~specband.sweeps.limit_table` (the table per power limit and its selector).
"""
