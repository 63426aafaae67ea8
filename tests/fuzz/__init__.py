"""Fuzzing the parsers a user's input reaches: every input parses or raises one of our own errors
(:class:`celery_quartz.errors.QuartzError`), and none takes long.

``tests/unit/test_fuzz.py`` runs a short campaign of each target; ``python -m tests.fuzz`` runs a
long one (see ``--help``) and prints the counts to record in ``bench/RESULTS.md``.
"""
