"""Files a user names, read and written safely: :mod:`~specband.files.fileio` (all-or-nothing
writes, bounded reads), :mod:`~specband.files.jsonl`, :mod:`~specband.files.safeload` (model files
without running code), :mod:`~specband.files.bounded` (untrusted work in a limited child) and
:mod:`~specband.files.hub` (hub ids wherever a path is taken).
"""
