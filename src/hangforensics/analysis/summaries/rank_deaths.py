"""Which rank of a torch.distributed job died, and how: torchrun's own account (its failure summary and its
elastic agent's lines, events of kind ``rank_exit``) with the ranks' gloo / c10d errors (``c10d_error``).

A rank killed by a signal other than the launcher's own SIGTERM (the OOM killer's SIGKILL, a C++ abort's
SIGABRT, a SIGSEGV) is the one to name first; ranks that then exited with an error (exit code 1 on the
closed connection, a gloo timeout) are its consequence, and ranks the launcher stopped with SIGTERM are
the launcher cleaning up.  With no such signal, the summary's root cause (its first observed failure)
is named first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...ranks import label_global_rank, rank_key
from ...store import Store

CRASH_SIGNALS = {"SIGSEGV": "crashed with SIGSEGV", "SIGBUS": "crashed with SIGBUS", "SIGILL": "crashed with SIGILL",
                 "SIGFPE": "crashed with SIGFPE"}
CLOSED = {"connection_closed", "connection_reset", "broken_pipe"}


@dataclass
class Death:
    """One worker process's exit as the launcher reports it (merged across its summary and agent lines)."""

    rank: int | None                 # global rank (the summary's); None when only the agent's line names it
    label: str                       # 'rank2' (the engine's label of that global rank), or 'local rank 2 (pid N)'
    exit_code: int | None
    signal: str | None
    pid: int | None = None
    local_rank: int | None = None
    host: str | None = None
    ts: datetime | None = None
    root_cause: bool = False         # the launcher's first observed failure
    error: str | None = None         # the exception line of a traceback the rank recorded (@record)
    evidence: list[dict[str, Any]] = field(default_factory=list)

    @property
    def culprit(self) -> bool:
        """Killed by a signal other than the launcher's own SIGTERM."""
        return self.signal is not None and self.signal != "SIGTERM"


@dataclass
class JobDeaths:
    """An engine's worker exits and its ranks' gloo / c10d errors."""

    deaths: list[Death] = field(default_factory=list)
    errors: dict[str, list[dict[str, Any]]] = field(default_factory=dict)   # rank label ('' unranked) -> attrs
    agent_signal: str | None = None  # a signal the launcher itself received (a scheduler stopping the job)

    @property
    def culprits(self) -> list[Death]:
        return sorted((d for d in self.deaths if d.culprit), key=lambda d: (not d.root_cause, d.ts or datetime.max))

    def timeouts(self) -> dict[str, dict[str, Any]]:
        """Rank label ('' for lines no prefix names) -> its first collective timeout (gloo names no sequence
        number: not which collective)."""
        return {r: next(a for a in errs if a.get("event") == "collective_timeout")
                for r, errs in self.errors.items() if any(a.get("event") == "collective_timeout" for a in errs)}


def gather(store: Store, engine: str, labels: list[str]) -> JobDeaths:
    return gather_all(store, [engine], {engine: labels})[engine]


def gather_all(store: Store, engines: list[str], labels: dict[str, list[str]]) -> dict[str, JobDeaths]:
    """``gather`` of every engine of ``engines`` (``labels``: each engine's rank labels) in three queries."""
    exits: dict[str, list[dict[str, Any]]] = {}
    for r in store.query(
            "SELECT engine, path, line, ts, rank, attrs FROM events WHERE list_contains(?, engine) "
            "AND kind = 'rank_exit' ORDER BY engine, ts NULLS LAST, path, line", [engines]):
        exits.setdefault(r["engine"], []).append(r)
    out = {e: _deaths(exits.get(e, []), labels.get(e, [])) for e in engines}
    for e in store.query("SELECT engine, rank, attrs FROM events WHERE list_contains(?, engine) "
                         "AND kind = 'c10d_error' ORDER BY engine, path, line", [engines]):
        out[e["engine"]].errors.setdefault(e["rank"] or "", []).append(json.loads(e["attrs"] or "{}"))
    for r in store.query(
            "SELECT engine, s FROM (SELECT engine, json_extract_string(attrs, '$.signal') AS s, row_number() OVER "
            "(PARTITION BY engine ORDER BY ts NULLS LAST) AS n FROM events WHERE list_contains(?, engine) "
            "AND kind = 'torch_elastic' AND json_extract_string(attrs, '$.event') = 'death_signal') WHERE n = 1",
            [engines]):
        out[r["engine"]].agent_signal = r["s"]
    return out


def _deaths(rows: list[dict[str, Any]], labels: list[str]) -> JobDeaths:
    """The worker exits of one engine's ``rank_exit`` rows (by time, file, line)."""
    out = JobDeaths()
    by_pid: dict[Any, Death] = {}
    agent: list[tuple[dict, dict]] = []
    for r in rows:
        a = json.loads(r["attrs"] or "{}")
        if a.get("source") == "elastic_agent":
            agent.append((r, a))
            continue
        rank = _global(r["rank"])
        key = a.get("pid") if a.get("pid") is not None else ("rank", rank, r["path"], r["line"])
        d = by_pid.get(key)
        if d is None:
            d = by_pid[key] = Death(rank, _label(rank, a, labels), a.get("exit_code"), a.get("signal"),
                                    a.get("pid"), a.get("local_rank"), a.get("host"), r["ts"])
        d.root_cause = d.root_cause or bool(a.get("root_cause"))
        d.error = d.error or a.get("error")
        d.evidence.append({"file": r["path"], "line": r["line"]})
    for r, a in agent:                  # the agent's line: its first observed failure, by pid
        d = by_pid.get(a.get("pid"))
        if d is None:
            d = by_pid[a.get("pid")] = Death(None, _label(None, a, labels), a.get("exit_code"), a.get("signal"),
                                              a.get("pid"), a.get("local_rank"), None, r["ts"])
        elif r["ts"] is not None:
            d.ts = r["ts"]              # the agent's glog time has milliseconds; the summary's only seconds
        d.root_cause = True
        d.evidence.append({"file": r["path"], "line": r["line"]})
    out.deaths = sorted(by_pid.values(), key=lambda d: (rank_key(d.label), d.pid or 0))
    return out


def _global(label: str | None) -> int | None:
    return int(label[4:]) if label and label.startswith("rank") and label[4:].isdigit() else None


def _label(rank: int | None, a: dict, labels: list[str]) -> str:
    if rank is not None:
        return label_global_rank(rank, labels)
    if a.get("local_rank") is not None:
        return f"local rank {a['local_rank']}" + (f" (pid {a['pid']})" if a.get("pid") is not None else "")
    return f"pid {a.get('pid')}"


def _hm(ts: datetime | None) -> str:
    return f" at {ts:%H:%M:%S}" if ts else ""


def _names(deaths: list[Death]) -> str:
    names = [d.label for d in deaths]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _abort_error(d: Death, jd: JobDeaths) -> dict[str, Any] | None:
    """The C++ exception that aborted ``d``: its own, or the one nobody's prefix names when ``d`` is the only
    rank that aborted (std::terminate prints no rank prefix)."""
    own = [a for a in jd.errors.get(d.label, []) if a.get("abort")]
    if own:
        return own[0]
    aborted = [x for x in jd.deaths if x.signal == "SIGABRT"]
    loose = [a for a in jd.errors.get("", []) if a.get("abort")]
    return loose[0] if loose and aborted == [d] else None


def _how(d: Death, jd: JobDeaths) -> str:
    code = f"exit code {d.exit_code}" if d.exit_code is not None else "no exit code"
    if d.signal == "SIGABRT":
        err = _abort_error(d, jd)
        on = f" on {err.get('exception')}: {err.get('reason')}" if err else (f" on {d.error}" if d.error else "")
        return f"{d.label} aborted (SIGABRT, {code}){_hm(d.ts)}{on}"
    if d.signal in CRASH_SIGNALS:
        return f"{d.label} {CRASH_SIGNALS[d.signal]} ({code}){_hm(d.ts)}"
    return f"{d.label} was killed by {d.signal} ({code}){_hm(d.ts)}"


def _cause(deaths: list[Death], jd: JobDeaths) -> str:
    """What the failed ranks' own gloo / c10d errors say, in a few words."""
    errs = [a for d in deaths for a in jd.errors.get(d.label, [])[:1]]
    if not errs:
        errs = [{"reason": d.error} for d in deaths if d.error]
    if not errs:
        return ""
    kinds = {a.get("error") for a in errs}
    if kinds <= CLOSED and None not in kinds:
        return " on the closed connection"
    if kinds == {"timeout"}:
        ops = sorted({a.get("op") for a in errs if a.get("op")})
        ms = sorted({a.get("timeout_ms") for a in errs if a.get("timeout_ms")})
        backend = errs[0].get("backend") or "gloo"
        return f" on {backend} {'/'.join(ops)} timeouts" + (f" ({', '.join(map(str, ms))} ms)" if ms else "")
    if len(errs) == 1:
        return f" on {(errs[0].get('exception') + ': ') if errs[0].get('exception') else ''}{errs[0].get('reason')}"
    return " on " + "; ".join(dict.fromkeys(str(a.get("reason")) for a in errs))


def words(jd: JobDeaths) -> str | None:
    """The deaths in one clause, the one to blame first; None when the launcher reported none."""
    if not jd.deaths:
        return None
    culprits = jd.culprits
    failed = sorted((d for d in jd.deaths if (d.exit_code or 0) > 0),
                    key=lambda d: (not d.root_cause, d.ts or datetime.max, rank_key(d.label)))
    stopped = [d for d in jd.deaths if d.signal == "SIGTERM"]
    parts = [_how(d, jd) for d in culprits]
    if not culprits and failed:
        first, failed = failed[0], failed[1:]
        parts.append(f"{first.label} failed first (exit code {first.exit_code}){_hm(first.ts)}{_cause([first], jd)}")
    if failed:
        codes = sorted({d.exit_code for d in failed})
        parts.append(f"{_names(failed)} then failed (exit code {', '.join(map(str, codes))}){_cause(failed, jd)}")
    if stopped and parts:
        parts.append(f"the launcher then stopped {_names(stopped)} (SIGTERM)")
    elif stopped:
        who = f"torchrun received {jd.agent_signal} and" if jd.agent_signal else "the launcher"
        parts.append(f"{who} stopped {_names(stopped)} (SIGTERM){_hm(min((d.ts for d in stopped if d.ts), default=None))}")
    return "; ".join(parts)


def culprit_words(jd: JobDeaths) -> str | None:
    """Only the ranks a signal killed (beside a hang finding, which says the rest)."""
    c = jd.culprits
    return "; ".join(_how(d, jd) for d in c) if c else None


def facts(jd: JobDeaths) -> list[str]:
    out = []
    for d in jd.deaths:
        if d.exit_code is None:
            continue
        how = f"exit code {d.exit_code}" + (f" ({d.signal})" if d.signal else "")
        where = ", ".join(x for x in (f"pid {d.pid}" if d.pid is not None else "", f"on {d.host}" if d.host else "",
                                       f"{d.ts:%Y-%m-%d %H:%M:%S}" if d.ts else "") if x)
        out.append(f"torchrun: {d.label} exited with {how}" + (f" ({where})" if where else "")
                   + (" - the launcher's root cause" if d.root_cause else "") + ".")
    reasons: dict[str, list[str]] = {}
    for rank, errs in jd.errors.items():
        for a in errs:
            key = f"{a.get('backend') or 'c10d'}: {a.get('reason')}"
            reasons.setdefault(key, []).append(rank or "a rank the line does not name")
    for key, ranks in reasons.items():
        named = sorted(set(ranks), key=rank_key)
        out.append(f"{key} ({', '.join(named)}).")
    return out


def capture_next(jd: JobDeaths) -> list[str]:
    """What would say more about the deaths: the kernel's word on a SIGKILL, the abort's own stack."""
    out = []
    for d in jd.culprits:
        if d.signal == "SIGKILL":
            where = f" of {d.host}" if d.host else ""
            when = f"{d.ts:%H:%M:%S}" if d.ts else "the kill"
            out.append(f"the kernel log{where} around {when} (dmesg -T, journalctl -k): whether "
                       f"the OOM killer (or a cgroup memory limit) sent {d.label}'s SIGKILL"
                       + (f" to pid {d.pid}" if d.pid is not None else "")
                       + "; else whoever else sends SIGKILL there (a scheduler, a health checker)")
        elif d.signal in ("SIGABRT", *CRASH_SIGNALS):
            err = _abort_error(d, jd) if d.signal == "SIGABRT" else None
            if err and err.get("error") == "size_mismatch":
                out.append("the shapes each rank passed to the collective that aborted (a Flight Recorder dump of "
                           "every rank, TORCH_FR_BUFFER_SIZE=2000, records each collective's sizes)")
            out.append(f"a core dump or native stack of {d.label} (ulimit -c unlimited, or py-spy dump --native "
                       f"while it runs): where the {d.signal} came from")
    return out
