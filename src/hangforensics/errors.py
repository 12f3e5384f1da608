"""Typed errors: the library raises these, the CLI turns each into one line on stderr."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar


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


class DiskFullError(HangforensicsError):
    """A write failed because its filesystem is full (database, report, temporary files)."""


def _is_disk_full(e: BaseException) -> bool:
    import errno

    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    # DuckDB reports its own failed writes as IOException text, without an errno
    return type(e).__module__.startswith(("duckdb", "_duckdb")) and (
        "No space left on device" in str(e) or "Disk quota exceeded" in str(e))


F = TypeVar("F", bound=Callable[..., Any])


def translate_disk_errors(func: F) -> F:
    """Library entry points: a full disk is the user's to fix, so it becomes one clear DiskFullError."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except HangforensicsError as e:
            if e.__cause__ is not None and _is_disk_full(e.__cause__):
                raise DiskFullError(f"no space left on device: {e}; free space, or point --db / -o / TMPDIR at "
                                    f"a larger filesystem") from e
            raise
        except Exception as e:
            if _is_disk_full(e):
                raise DiskFullError(_disk_message(e)) from e
            raise

    return wrapper  # type: ignore[return-value]


def _disk_message(e: BaseException) -> str:
    where = getattr(e, "filename", None)
    detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return (f"no space left on device{f' writing {where}' if where else ''}: free space, or point --db / -o / "
            f"TMPDIR at a larger filesystem ({detail})")
