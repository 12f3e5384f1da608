"""Which release family wrote a chunk, when most of its messages are the scanner's bulk lines (batch and access
lines: ``sglang_fast``) and are not cut out of the chunk's bytes unless a search needs them.

``release_of`` looks for every release's traits in every message it is given.  A busy log's bulk messages are
most of the messages looked at (a chunk's first ``RELEASE_RECORDS``), and cutting them out costs more than the
search: a range of a large log paid some 30 ms for it.  Here a release whose trait cannot match a bulk message
(anchored at a message start no bulk message has) is not looked for in them at all; one whose trait can only
match as a substring is first looked for in the chunk's bytes around them, cut at line starts, a search that
finds every such match (and perhaps others): only where it finds one are the messages cut out and searched
one by one.  The release found is the same."""

from __future__ import annotations

from typing import Protocol

import polars as pl

from .sglang_log import release_of
from .sglang_patterns import ACCESS_LEVELS, BATCH_HEADS, RELEASE_ORDER, RELEASE_TRAITS

# How a bulk message starts: a batch line's head, an access line's level.
_BULK_STARTS = BATCH_HEADS + ACCESS_LEVELS
_META = set(".^$*+?{}[]()|\\")


class BulkMessages(Protocol):
    """Bulk messages, cut out only on demand."""

    def may_match(self, pattern: str) -> bool:
        """Whether ``pattern`` matches the bytes around the messages (lines, cut at line starts): every
        substring match in a message is one there."""

    def matches(self, rx: str) -> bool:
        """Whether ``rx`` matches one of the messages (each cut out as its own string)."""


def alternatives(rx: str) -> list[str]:
    """The top-level alternatives of a regex: split at each ``|`` outside groups and classes."""
    out: list[str] = []
    cur: list[str] = []
    depth, in_class, escaped = 0, False, False
    for ch in rx:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out


def literal_head(rx: str) -> str:
    """The text every match of ``rx`` starts with (at most: stops at the first construct that is not a
    plain character, or whose character may be missing or repeated)."""
    out: list[str] = []
    i = 0
    while i < len(rx):
        ch = rx[i]
        if ch == "\\":
            nxt = rx[i + 1:i + 2]
            if not nxt or nxt.isalnum():        # \d, \s, \b...: a class or an assertion, no character
                break
            i += 2
            ch = nxt
        elif ch in _META:
            break
        else:
            i += 1
        quantifier = rx[i:i + 1]
        if quantifier in ("*", "?", "{"):       # the character may be missing
            break
        out.append(ch)
        if quantifier == "+":                   # it is there, more of it may follow
            break
    return "".join(out)


def bulk_prefilter(rx: str) -> str | None:
    """A search of the bytes around bulk messages that finds every place ``rx`` may match one of them: its
    alternatives that are not anchored (matches in a message are matches in its line).  "": it never matches
    a bulk message (each alternative is anchored at a message start no bulk message has).  None: no such
    search (an alternative anchored where a bulk message may start, or anchored elsewhere)."""
    kept = []
    for alt in alternatives(rx):
        if alt.startswith("^") and "^" not in alt[1:] and "$" not in alt:
            head = literal_head(alt[1:])
            if any(head.startswith(s) or s.startswith(head) for s in _BULK_STARTS):
                return None
            continue
        if "^" in alt or "$" in alt:            # (also an escaped one, or in a class: looked for exactly)
            return None
        kept.append(f"(?:{alt})")
    return "|".join(kept)


# Each release's search of the bytes around bulk messages (``bulk_prefilter``).
BULK_PREFILTERS = {release: bulk_prefilter(rx) for release, rx in RELEASE_TRAITS}


def release_in(msgs: pl.Series, bulk: BulkMessages, known: str | None = None) -> str | None:
    """``release_of`` over ``msgs`` and the bulk messages together (None: no trait seen; with ``known``,
    only releases newer than it are looked for)."""
    return bulk_release(release_of(msgs, known), bulk, known)


def bulk_release(found: str | None, bulk: BulkMessages, known: str | None = None) -> str | None:
    """The release ``found`` in the other messages looked at (``release_of``), unless the bulk messages show
    a newer one (and newer than ``known``)."""
    newest = found or (known if known in RELEASE_ORDER else None)
    newer = RELEASE_TRAITS[:RELEASE_ORDER.index(newest) if newest else None]
    searches = [BULK_PREFILTERS[r] for r, _ in newer]
    # one pass for all the releases that have one (a busy log's release is found in its own records: the
    # newer ones are then looked for only here)
    anywhere = [s for s in searches if s]
    maybe = bool(anywhere) and bulk.may_match("|".join(anywhere))
    for (release, rx), search in zip(newer, searches, strict=True):
        if search == "" or (search is not None and not (maybe and (len(anywhere) == 1 or bulk.may_match(search)))):
            continue
        if bulk.matches(rx):
            return release
    return found
