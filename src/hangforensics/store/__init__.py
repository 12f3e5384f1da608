"""The DuckDB store: the schema (``schema``), the views SREs query (``views``), the database with its
migrations and Arrow loading (``database``), and the schema document (``docs``).

Tables are exposed as the interface views of interface.md §4; derived models (``stalls``,
``rank_stops``, ``freezes``) are rebuilt by ``analyze``.
"""

from __future__ import annotations

from typing import Any

from .docs import CONTRACT_COLUMNS, VIEW_COLUMNS, VIEW_NOTES, schema_markdown, table_columns
from .schema import CLOCKED, LOADED_TABLES, MIGRATIONS, SCHEMA_VERSION, SOURCE_KEYED, TABLES, physical
from .views import MACROS, VIEWS, ddl_statements

__all__ = [
    "CLOCKED", "CONTRACT_COLUMNS", "LOADED_TABLES", "MACROS", "MIGRATIONS", "SCHEMA_VERSION", "SOURCE_KEYED", "TABLES",
    "VIEWS",
    "VIEW_COLUMNS", "VIEW_NOTES", "Store", "check_readable", "ddl_statements", "physical", "schema_markdown",
    "schema_version", "table_columns",
]


def __getattr__(name: str) -> Any:
    # the database (and DuckDB with it) on first use: a parser process reads the schema alone
    if name in ("Store", "check_readable", "schema_version"):
        from . import database
        return getattr(database, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
