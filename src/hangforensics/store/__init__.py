"""The DuckDB store: the schema (``schema``), the views SREs query (``views``), the database with its
migrations and Arrow loading (``database``), and the schema document (``docs``).

Tables are exposed as the interface views of interface.md §4; derived models (``stalls``,
``rank_stops``, ``freezes``) are rebuilt by ``analyze``.
"""

from .database import Store, check_readable, schema_version
from .docs import CONTRACT_COLUMNS, VIEW_COLUMNS, VIEW_NOTES, schema_markdown, table_columns
from .schema import CLOCKED, LOADED_TABLES, MIGRATIONS, SCHEMA_VERSION, TABLES, physical
from .views import MACROS, VIEWS, ddl_statements

__all__ = [
    "CLOCKED", "CONTRACT_COLUMNS", "LOADED_TABLES", "MACROS", "MIGRATIONS", "SCHEMA_VERSION", "TABLES", "VIEWS",
    "VIEW_COLUMNS", "VIEW_NOTES", "Store", "check_readable", "ddl_statements", "physical", "schema_markdown",
    "schema_version", "table_columns",
]
