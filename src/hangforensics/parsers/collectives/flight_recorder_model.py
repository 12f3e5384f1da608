"""The typed records of a Flight Recorder dump (see :mod:`.flight_recorder` for the layout and the reader)."""

from __future__ import annotations

from dataclasses import dataclass, field

SOURCE = "flight_recorder"
_STATE_ORDER = {"scheduled": 0, "started": 1, "completed": 2}


@dataclass(frozen=True, slots=True)
class FrFrame:
    name: str
    filename: str | None
    line: int | None


@dataclass(frozen=True, slots=True)
class FrEntry:
    """One ring-buffer entry.  ``index`` is its 0-based position in the file's ``entries``."""

    index: int
    record_id: int | None
    pg_id: int | None                      # per-process numbering: never compare across ranks
    pg_name: str | None                    # the group's name (GUID), the same on every rank
    pg_desc: str | None
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op_id: int | None
    op: str                                # profiling_name without 'nccl:': all_reduce, send 1->2, coalesced
    is_p2p: bool
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str | None                      # scheduled | started | completed
    time_created_ns: int | None
    time_discovered_started_ns: int | None
    time_discovered_completed_ns: int | None
    timeout_ms: int | None
    retired: bool | None
    thread_id: str | None
    thread_name: str | None
    frames: tuple[FrFrame, ...]            # innermost first, as recorded
    backend: str | None = None             # the profiling name's prefix: nccl, gloo (None: no prefix)

    @property
    def seq(self) -> int | None:
        """The counter this entry is numbered by: p2p_seq_id for send/recv, else collective_seq_id."""
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id

    @property
    def group(self) -> str | None:
        """The process group's name; old dumps give only the id, which was also the name."""
        if self.pg_name:
            return self.pg_name
        return str(self.pg_id) if self.pg_id is not None else None


@dataclass(frozen=True, slots=True)
class FrGroup:
    name: str
    desc: str | None
    ranks: tuple[int, ...] | None          # global ranks, parsed from '[0, 1, 2, 3]' (never eval'd)


@dataclass(frozen=True, slots=True)
class FrStatus:
    """One ``pg_status`` item.  torch keys them by the process-local PG ID (the entries' ``pg_id``), not
    by the group's name: ``pg`` is the name that ID resolves to in this dump (None when it cannot)."""

    key: str
    pg: str | None
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None


@dataclass(frozen=True, slots=True)
class FlightRecorderDump:
    name: str                              # the file name the rank was read from
    rank: int | None                       # global rank (the file-name suffix)
    form: str                              # pickle | json | unknown
    version: str | None
    nccl_version: str | None               # nccl_version (2.7+) or else comm_lib_version (2.10+)
    comm_lib_version: str | None
    groups: dict[str, FrGroup]             # by group name
    status: dict[str, FrStatus]            # as the dump keys it (the PG ID); FrStatus.pg is the name
    entries: tuple[FrEntry, ...]
    records: int                           # entries the file holds, used or not (a binary file's "lines")
    skipped: int                           # entries that could not be used (cut off, not a dict)
    complete: bool                         # the whole file was read
    notes: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        return _label(self.name, self.rank)


def _label(name: str, rank: int | None) -> str:
    return f"flight recorder dump rank{rank}" if rank is not None else f"flight recorder dump {name or '?'}"
