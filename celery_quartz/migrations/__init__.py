"""Alembic migrations of the store's schema, shipped in the package (``celery quartz schema``)."""
