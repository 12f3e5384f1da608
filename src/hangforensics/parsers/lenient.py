"""Typed values out of untrusted plain data (a loaded pickle or JSON): the wrong type is dropped and counted.

Each reader takes the value, where it was (``entry 7``), what it is (``collective_seq_id``) and a
:class:`Problems` tally; it returns the typed value or None / empty, never raises.  The tally
becomes one note with a few quoted examples.
"""

from __future__ import annotations

import re

_INT_TEXT = re.compile(r"\s*-?\d{1,30}\s*")      # bounded: int() of a huge digit string is slow, then refused
_NOTE_EXAMPLES = 3


class Problems:
    """Values of the wrong type: counted, a few quoted in the note."""

    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []

    def add(self, where: str, what: str, value: object) -> None:
        """Count one value of the wrong type."""
        self.count += 1
        if len(self.examples) < _NOTE_EXAMPLES:
            self.examples.append(f"{what} {short_repr(value)} in {where}")


def short_repr(value: object) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def as_int(v: object, where: str, what: str, bad: Problems) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool):
        bad.add(where, what, v)
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and _INT_TEXT.fullmatch(v):       # the JSON form writes some numbers as text
        return int(v)
    bad.add(where, what, v)
    return None


def as_ns(v: object, where: str, what: str, bad: Problems) -> int | None:
    n = as_int(v, where, what, bad)
    return n if n else None                                  # the JSON form writes unknown times as 0


def as_str(v: object, where: str, what: str, bad: Problems, numbers: bool = False) -> str | None:
    """Text; ``numbers`` also takes a number for fields some versions write as one (ids, versions)."""
    if v is None:
        return None
    if isinstance(v, str) or (numbers and isinstance(v, (int, float)) and not isinstance(v, bool)):
        return str(v)
    bad.add(where, what, v)
    return None


def as_bool(v: object, where: str, what: str, bad: Problems) -> bool | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if v in (0, 1, "true", "false", "True", "False"):
        return v in (1, "true", "True")
    bad.add(where, what, v)
    return None


def as_sizes(v: object, where: str, what: str, bad: Problems) -> tuple[tuple[int, ...], ...]:
    if v is None:
        return ()
    if isinstance(v, (list, tuple)) and all(
            isinstance(s, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in s)
            for s in v):
        return tuple(tuple(s) for s in v)
    bad.add(where, what, v)
    return ()


def as_strs(v: object, where: str, what: str, bad: Problems) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return tuple(v)
    bad.add(where, what, v)
    return ()
