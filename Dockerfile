# celery-quartz with its PostgreSQL, Redis and dashboard extras, and a Celery project to run.
#
#   docker build -t celery-quartz .                        # the quickstart project in /app
#   docker build -t myproj --build-arg PROJECT=path/to/myproj .   # your own project instead
#
# PROJECT is copied to /app, the working directory, which is on PYTHONPATH: `celery -A proj …`
# finds a package `proj` there. Mount a project over /app to run it without rebuilding.
# The image runs as the unprivileged user `celery` (uid 10001).

FROM python:3.11-slim-bookworm

ARG PROJECT=examples/quickstart

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app

RUN groupadd --system --gid 10001 celery \
    && useradd --system --uid 10001 --gid celery --home-dir /app --shell /usr/sbin/nologin celery

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY celery_quartz ./celery_quartz
# Flower is pinned here, not a dependency of the package: only the image's flower service needs it.
# The package itself is this checkout, at the version it states (DL3013 asks for a pin on it).
# hadolint ignore=DL3013
RUN pip install ".[postgres,redis,dashboard]" "flower==2.2.0" \
    && rm -rf /src

WORKDIR /app
COPY --chown=celery:celery ${PROJECT} /app
RUN mkdir -p /app/var && chown celery:celery /app /app/var

USER 10001:10001

CMD ["celery", "-A", "proj", "beat", "-S", "celery_quartz.Scheduler", "-l", "info"]
