"""The study's contract: :mod:`~specband.contract.actions` (the EAGLE3 configs, the action),
:mod:`~specband.contract.reward` (the band reward), :mod:`~specband.contract.record` (the sweep row)
and :mod:`~specband.contract.state` (the decision state, the context).
"""
