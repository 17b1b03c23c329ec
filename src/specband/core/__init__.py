"""The ground floor: what every stage uses and which knows nothing of specband above it.

:mod:`~specband.core.errors` (the exceptions) and :mod:`~specband.core.exitcodes` (exit status by
cause), :mod:`~specband.core.limits` (every input bound with its basis),
:mod:`~specband.core.optionspec` (one declaration per option), :mod:`~specband.core.batchlist`
(batch-size lists and mixes) and :mod:`~specband.core.tables` (tables that fit the terminal).
"""
