"""A Core statement compiled once, and prepared on the server where the driver does not.

psycopg2 sends every statement as text with its values in it, so PostgreSQL parses and plans it
on every execution; for the worker's two statements per execution that is most of what the
database spends on them. :class:`CompiledStatement` keeps, beside the driver's SQL, a ``PREPARE``
of the same statement with ``$n`` parameters and an ``EXECUTE`` of it by name.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

#: A psycopg2 (``pyformat``) placeholder, or an escaped percent sign.
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


@dataclass(frozen=True)
class Prepared:
    """The same statement prepared on the server: its name (a digest of the SQL, so one SQL
    text is prepared once per connection whoever runs it), ``PREPARE name(types) AS …`` and
    ``EXECUTE name(…)`` taking the same named parameters as the driver's SQL."""

    name: str
    prepare: str
    execute: str


@dataclass(frozen=True)
class CompiledStatement:
    """A statement compiled for one dialect (see :meth:`of`)."""

    #: The driver's SQL, and the parameters whose values the statement fixes (the scheduler's
    #: name, state literals); the caller adds the rest by name.
    sql: str
    fixed: dict[str, Any]
    #: psycopg2 only, else None.
    prepared: Prepared | None = None

    @classmethod
    def of(cls, statement: Any, dialect: Any) -> CompiledStatement:
        compiled = statement.compile(dialect=dialect)
        sql, fixed = str(compiled), dict(compiled.params)
        if dialect.name != "postgresql" or dialect.driver != "psycopg2":
            return cls(sql, fixed)
        order: list[str] = []

        def positional(match: re.Match[str]) -> str:
            key = match.group(1)
            if key is None:
                return "%"
            if key not in order:
                order.append(key)
            return f"${order.index(key) + 1}"

        body = _PLACEHOLDER.sub(positional, sql)
        types = [compiled.binds[key].type.compile(dialect=dialect) for key in order]
        name = "cq_" + hashlib.sha1(sql.encode()).hexdigest()[:16]
        prepare = f"PREPARE {name}({', '.join(types)}) AS {body}"
        arguments = ", ".join(f"%({key})s" for key in order)
        return cls(sql, fixed, Prepared(name, prepare, f"EXECUTE {name}({arguments})"))
