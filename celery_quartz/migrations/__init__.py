"""Alembic migrations of the store's schema, shipped with the package (see ``celery quartz schema``)."""
