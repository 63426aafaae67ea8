"""What the store's tables are called: the default prefix of their names.

A setting (``quartz_table_prefix``, :class:`celery_quartz.config.Settings`) that the store's
schema and migrations apply; here, below both, so that neither imports the other for it.
"""

from __future__ import annotations

#: The prefix of every table's name unless ``quartz_table_prefix`` says otherwise (Quartz's own).
DEFAULT_TABLE_PREFIX = "quartz_"
