"""A file's kind, from its content alone (its name carries no meaning): server log, stack dumps of each
format, failed captures, GPU samples, empty, binary or unknown.  The kind is the *payload's*: a file's
collector or paste envelope is stripped from its head first (a py-spy dump pasted in ``> `` quotes is a
py-spy dump, a kubectl-wrapped log a server log)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import NamedTuple

from ..errors import InputError
from ..parsers.capture.capture_errors import looks_like_capture_error
from ..parsers.capture.capture_files import looks_like_manifest, looks_like_process_facts
from ..parsers.capture.process_snapshot import looks_like_process_snapshot
from ..parsers.collectives.flight_recorder import looks_like_flight_recorder
from ..parsers.collectives.fr_trace_text import looks_like_fr_trace
from ..parsers.collectives.nccl_ras import looks_like_nccl_ras
from ..parsers.collectives.nccl_ras_json import looks_like_nccl_ras_json
from ..parsers.gpu import looks_like_nvidia_smi
from ..parsers.sglang.sglang_patterns import BARE_TRACEBACK, LEAK_TEXT
from ..parsers.stacks import faulthandler, gdb, hand_summary, native_trace, pyspy
from ..parsers.torch_jobs.train_steps import STEP_LINE
from ..parsers.vllm.vllm_patterns import STATS_MESSAGE
from .envelopes import EnvelopeStack, Unwrapper
from .logfile import (
    GZIP_MAGIC,
    HEAD_BYTES,
    decode_head,
    hash_head,
    head_hash,
    head_text,
    is_gzip,
    open_binary,
)
from .payload import head_lines, sniff

# The raw first bytes a Flight Recorder dump is recognised by
FR_HEAD_BYTES = 8192


LOG_SNIFF = re.compile(
    r"^(?:[\w.-]+(?:[-_]\d+)?\s*\| ?)?(?:"
    r"(?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*)?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"     # SGLang prefix
    r"|(?:\[rank\d+\]:)?\[[IWEF](?:\d{3,4} \d\d:\d\d:\d\d\.\d+| [\w.]+\.\w+:\d+\])"    # torch glog (< 2.3: no time)
    r"|(?:\([\w .=-]*pid=\d+(?:, ip=[\d.]+)?\)\s*)?(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"  # vLLM
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? - vllm(?:\.[\w.]+)? - [A-Z]+ - "    # vLLM under logging's format
    r"|" + STATS_MESSAGE +                                                       # a vLLM stats message alone
    r"|Environment: \S+="
    # a torch.distributed job's own lines: a rank's traceback or error under torchrun's prefix, torchrun's
    # elastic agent (glog form, or logging's default before torch 2.3), its failure summary, a gloo abort
    r"|\[rank\d+\]: ?(?:Traceback \(|(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): )"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/\S*:\d+\] "
    r"|(?:INFO|WARNING|ERROR|CRITICAL):torch\.distributed\.[\w.]+:"
    r"|torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError:"
    r"|Root Cause \(first observed failure\):|  exitcode  : -?\d+ \(pid: \d+\)"
    r"|terminate called after throwing an instance of 'gloo::"
    # an idle leak check without a log prefix (a Python warning line, a ValueError line, an older wording)
    r"|" + LEAK_TEXT +
    # a job's own dated step / iteration lines (parsers/torch_jobs/train_steps.py)
    r"|" + STEP_LINE.removeprefix("^") +
    r")",
    re.M,
)


BARE_TRACEBACK_SNIFF = re.compile(BARE_TRACEBACK, re.M)

STACK_KINDS = ("pyspy_dump", "pyspy_json", "gdb_dump", "faulthandler_dump", "native_trace")
# The JSON files of a `hangforensics capture` bundle (interface.md §6).
CAPTURE_KINDS = ("capture_manifest", "process_facts")


# Every kind detect_kind can return (sources.kind).
# What reporters write by hand (stacks summarised to a few names per rank, tables, timelines) and /metrics
# excerpts (parsers/stacks/hand_summary.py): read by ingest/hand_parse.py.
REPORTER_KINDS = ("hand_summary", "metrics_text")
KINDS = ("server_log", *STACK_KINDS, "capture_error", "gpu_samples", "flight_recorder", "nccl_ras", "fr_trace",
         *CAPTURE_KINDS, "process_snapshot", *REPORTER_KINDS, "empty", "binary", "unreadable", "unknown")


def detect_kind(path: Path) -> str:
    """The kind of an evidence file, from its content alone (its name carries no meaning).

    server_log; stack dumps: pyspy_dump (py-spy text), pyspy_json, gdb_dump (gdb ``thread apply
    all bt`` / ``py-bt``), faulthandler_dump, native_trace (numbered C++/gdb frames);
    capture_error (py-spy/gdb failure output); gpu_samples (nvidia-smi CSV); flight_recorder (a PyTorch
    Flight Recorder dump, pickle or JSON); nccl_ras (``ncclras`` output, text or ``-f json``); fr_trace (torch's
    Flight Recorder analyzer's text); capture_manifest and
    process_facts (a capture bundle's manifest.json and proc/round<k>.json); process_snapshot (top /
    ps output); hand_summary (stacks, tables or a timeline a reporter wrote by hand) and metrics_text
    (a ``/metrics`` excerpt); empty, binary, unreadable or unknown.
    """
    return sniff_kind(path)[0]


def sniff_kind(path: Path, head: str | None = None, raw: bytes | None = None) -> tuple[str, EnvelopeStack | None]:
    """The kind of a file's payload and the envelope around it (None for files not read as text); ``head``:
    the file's ``head_text``, when read already, and ``raw`` its first bytes as they are on disk (a plain
    file's)."""
    try:
        head = head_text(path) if head is None else head
    except InputError:
        return "unreadable", None
    if not head:
        return "empty", None
    if looks_like_flight_recorder(raw[:FR_HEAD_BYTES]) if raw is not None else _flight_recorder_head(path):
        # (a pickle is binary: tested before the binary test)
        return "flight_recorder", None
    if looks_binary(head):
        return "binary", None
    # (NUL runs in a text file, a crash's or copytruncate's, are skipped)
    stack, lines = sniff(head_lines(head), last_cut=not head.endswith("\n"))
    kind = payload_kind("\n".join(lines) if stack.layers else head.replace("\x00", ""), lines)
    if kind == "unknown" and "hard_wrap" in stack.layers:
        kind, stack = _unwrapped_table(head_lines(head), stack) or (kind, stack)
    if kind == "unknown":
        # what a reporter wrote by hand (rank labels and prose are the evidence: read before the envelope)
        kind = hand_summary.kind_of(head_lines(head.replace("\x00", ""))) or kind
    return kind, stack


class ContentProbe(NamedTuple):
    """What planning reads of a file's content (``probe_content``)."""

    kind: str
    hhash: str                          # the hash of its head: its identity across renames ('' unreadable)
    compressed: bool                    # gzip
    envelope: EnvelopeStack | None
    dated: float | None = None          # the latest full date of its head and tail (``last_full_date``), epoch s


# A time printed with its full date (a four-digit year): SGLang's and Python logging's, a collector's ISO
# 8601 (kubectl, CRI, docker), nvidia-smi's.  Year-less lines of the same engine take their year from one.
# This century's only: a clock never set prints 1970 (the evidence of when its lines were written is not it).
FULL_DATE = re.compile(r"(20\d\d)([-/])(0[1-9]|1[0-2])\2(0[1-9]|[12]\d|3[01])[ T]"
                       r"([01]\d|2[0-3]):([0-5]\d):([0-5]\d)(?!\d)")
# Kinds whose dates are the engine's evidence (not a copied text's: a reporter's prose, an unknown file)
DATING_KINDS = frozenset({"server_log", "gpu_samples", "nccl_ras", "capture_manifest", "process_facts",
                          "process_snapshot", "capture_error", "metrics_text"})


_NOT_BEFORE_DATE = frozenset("0123456789.:/-")     # a FULL_DATE after one of these is part of a longer number


def _full_dates(text: str, at: int = 0) -> Iterator[re.Match[str]]:
    """The FULL_DATEs of ``text`` from ``at`` on (a lookbehind in the pattern costs three times the search)."""
    for m in FULL_DATE.finditer(text, at):
        if not m.start() or text[m.start() - 1] not in _NOT_BEFORE_DATE:
            yield m


def last_full_date(*texts: str) -> float | None:
    """The latest time printed with its full date among the first of ``texts`` (a file's head: its first
    such time) and the others (its tail: their last), naive as printed, in epoch seconds; None without one."""
    found = []
    for i, text in enumerate(texts):
        m = next(_full_dates(text), None) if i == 0 else _last_match(text)
        if m is not None:
            y, _, mo, d, h, mi, s = m.groups()
            try:
                found.append(datetime(int(y), int(mo), int(d), int(h), int(mi), int(s)).timestamp())
            except (ValueError, OverflowError, OSError):
                continue
    return max(found) if found else None


def _last_match(text: str) -> re.Match[str] | None:
    """The last FULL_DATE in ``text``: looked for in its last lines first (a log's every line has one: the
    whole tail's matches cost 1.6 ms a file)."""
    for back in (4096, len(text)):
        at = max(0, len(text) - back)
        at = text.find("\n", at) + 1 if at else 0          # from a line's start
        m = None
        for m in _full_dates(text, at):                     # noqa: B007 (the last one)
            pass
        if m is not None or at == 0:
            return m
    return None


def _tail_text(path: Path, size: int) -> str:
    """The last HEAD_BYTES of a plain file larger than its head ('' otherwise, or when unreadable)."""
    if size <= HEAD_BYTES:
        return ""
    try:
        with path.open("rb") as f:
            f.seek(size - HEAD_BYTES)
            return f.read(HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def probe_content(path: Path) -> ContentProbe:
    """A file's kind and envelope (``sniff_kind``), the hash of its head, whether it is gzip and the latest full
    date of its head and (a plain file's) tail (of a kind that dates the engine: ``DATING_KINDS``; a log
    written for months dates its engine by its end); a file that cannot be read is ``unreadable``."""
    raw = _plain_head(path)
    head: str | None
    if raw is not None:                         # one read gives the text, the hash and the Flight Recorder test
        head = decode_head(raw)
    else:
        try:
            head = head_text(path)
        except InputError:
            head = None
    kind, stack = sniff_kind(path, head, raw) if head is not None else ("unreadable", None)
    try:
        if raw is not None:
            hhash, compressed = hash_head(raw), False
        else:
            hhash = head_hash(path) if kind != "unreadable" else ""
            compressed = kind != "unreadable" and is_gzip(path)
    except (InputError, OSError, EOFError):
        kind, hhash, compressed = "unreadable", "", False
    dated = None
    if head is not None and kind in DATING_KINDS:
        with contextlib.suppress(OSError):
            size = path.stat().st_size       # (a file within its head: the head is its tail too)
            dated = last_full_date(head, "" if compressed else head if size <= HEAD_BYTES else _tail_text(path, size))
    return ContentProbe(kind, hhash, compressed, stack, dated)


def _plain_head(path: Path) -> bytes | None:
    """A file's first HEAD_BYTES as they are on disk, when they are its head as ``head_text`` and ``head_hash``
    read it (not gzip, no leading NUL run to skip): probing opened a file five times (its head, its hash, the
    Flight Recorder test, gzip's magic twice), some 0.1 ms each.  None otherwise, or when it cannot be read."""
    try:
        with path.open("rb") as f:
            raw = f.read(HEAD_BYTES)
    except OSError:
        return None
    return None if raw[:2] == GZIP_MAGIC or raw[:1] == b"\x00" else raw


def _unwrapped_table(raw: list[str], stack: EnvelopeStack) -> tuple[str, EnvelopeStack] | None:
    """fr_trace's tables (tabulate pads every row to one width, and a row of ops ends and the next begins
    without a space) read like a terminal's hard wrap: when the lines under the other layers are fr_trace's
    output, they are not wrapped."""
    keep = [i for i, layer in enumerate(stack.layers) if layer != "hard_wrap"]
    inner = EnvelopeStack(tuple(stack.layers[i] for i in keep), tuple(stack.param(i) for i in keep))
    lines = Unwrapper(inner, year_hint=2000).feed(raw, 1, final=True).payload if inner.layers else raw
    return ("fr_trace", inner) if looks_like_fr_trace(lines) else None


def payload_kind(head: str, lines: list[str]) -> str:
    """The kind of a head of payload text (``lines``: the same, split)."""
    first = [s for s in lines if s.strip()][:5]
    if first and (pyspy.PROCESS_RE.match(first[0]) or pyspy.THREAD_RE.match(first[0])):
        return "pyspy_dump"
    if looks_like_nvidia_smi(lines):
        return "gpu_samples"
    if capture_kind := _capture_kind(head):
        return capture_kind
    if looks_like_nccl_ras(lines) or looks_like_nccl_ras_json(lines):
        return "nccl_ras"
    if looks_like_fr_trace(lines):
        return "fr_trace"
    if pyspy.looks_like_json(head):
        return "pyspy_json"
    if looks_like_capture_error(lines[:200]):
        return "capture_error"
    if gdb.looks_like_gdb(lines, strong_only=True):
        return "gdb_dump"
    # A dump's own first line wins over a stray log line or two later in the file (a log that
    # happens to start with a crash is still a log).
    few_log_lines = sum(1 for _ in islice(LOG_SNIFF.finditer(head), 3)) < 3     # (a log's head has hundreds)
    if few_log_lines and faulthandler.looks_like_faulthandler(lines, strong_only=True):
        return "faulthandler_dump"
    if few_log_lines and native_trace.looks_like_trace(lines, strong_only=True):
        return "native_trace"
    if few_log_lines and looks_like_process_snapshot(lines):
        return "process_snapshot"           # (a log pasted after a ps listing is still a log)
    if LOG_SNIFF.search(head):
        return "server_log"
    if pyspy.looks_like_pyspy(lines) or pyspy.looks_like_pyspy_part(lines):
        return "pyspy_dump"                 # (a later part of a dump starts with frames, no header)
    if gdb.looks_like_gdb(lines):
        return "gdb_dump"
    if faulthandler.looks_like_faulthandler(lines):
        return "faulthandler_dump"
    if native_trace.looks_like_trace(lines):
        return "native_trace"
    if BARE_TRACEBACK_SNIFF.search(head):
        return "server_log"                 # a traceback of the engine's code pasted without its log line
    return "unknown"


def _capture_kind(head: str) -> str | None:
    if looks_like_manifest(head):
        return "capture_manifest"
    if looks_like_process_facts(head):
        return "process_facts"
    return None


def _flight_recorder_head(path: Path) -> bool:
    """The raw first bytes name a Flight Recorder dump (the decoded text head mangles a pickle's bytes)."""
    try:
        with open_binary(path) as f:
            return looks_like_flight_recorder(f.read(FR_HEAD_BYTES))
    except (OSError, EOFError):
        return False


# Undecodable bytes and control characters a text file does not hold (tab, newlines, form feed and the
# escape of ANSI colours are fine).
_NOT_TEXT = re.compile("[\x01-\x08\x0b\x0e-\x1a\x1c-\x1f\ufffd]")


def looks_binary(head: str) -> bool:
    """Binary content (a core file, a profile, random bytes) rather than text with a few bad bytes:
    more than 10 % of the first 8 KiB of non-NUL characters are undecodable or control characters."""
    sample = head.replace("\x00", "")[:8192]
    if not sample:
        return True                          # nothing but NUL bytes
    return len(_NOT_TEXT.findall(sample)) > 0.1 * len(sample)
