"""The dashboard and HTTP API over the shared store (``celery -A proj quartz dashboard``).

Installed with the ``dashboard`` extra (Starlette, uvicorn, Jinja2). It attaches to the store
of the app's ``quartz_*`` settings without starting a scheduler, discovers every scheduler name
in the tables, and serves a JSON API (``/api/v1``) and server-rendered pages, behind one
authorization policy (:mod:`celery_quartz.dashboard.auth`). See docs/dashboard.md.
"""

from celery_quartz.dashboard.server import create_app

__all__ = ["create_app"]
