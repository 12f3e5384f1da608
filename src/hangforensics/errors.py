"""Typed errors: the library raises these, the CLI turns each into one line on stderr."""

from __future__ import annotations


class HangforensicsError(Exception):
    """Base class: anything the user can fix (bad path, bad query, busy database)."""

    exit_code = 2


class InputError(HangforensicsError):
    """A path or argument the tool cannot use."""


class DatabaseError(HangforensicsError):
    """The database cannot be opened or queried."""


class DatabaseBusyError(DatabaseError):
    """Another process holds the database's write lock."""


class QueryError(HangforensicsError):
    """An ad hoc SQL query was refused or failed."""


class RuleError(HangforensicsError):
    """A rule file is malformed or its logic failed."""
