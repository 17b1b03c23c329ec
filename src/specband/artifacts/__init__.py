"""Policy artifact folders: :mod:`~specband.artifacts.folder` (the manifest, saving and loading),
:mod:`~specband.artifacts.fit` (fitting the policies on a sweep), :mod:`~specband.artifacts.request`
(``specband train`` as data), :mod:`~specband.artifacts.pick_table` and
:mod:`~specband.artifacts.card` (the model card).
"""
