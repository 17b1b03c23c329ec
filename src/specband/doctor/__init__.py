"""Checks before hours of measuring: :mod:`~specband.doctor.pairs` (a target/draft pair's
configs, also run by ``sweep`` and ``launch``) and :mod:`~specband.doctor.machine` (``specband doctor``).
"""
