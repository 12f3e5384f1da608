"""The ``TORCH_NCCL_DESYNC_DEBUG`` report as a fact on the same collective as its ProcessGroupNCCL timeout.

The report is torch's own cross-rank verdict (every rank records its collectives in the c10d store), so
it is not put to the majority vote again: it names lagging ranks, and this module says whether the
ProcessGroupNCCL SeqNums of the same process group agree.  It counts collectives from 1 per group, as
``WorkNCCL(SeqNum=…)`` does (both come from the group's collective counter), so ``#N`` is ``SeqNum=N``.

Where the timeout lines already name the same ranks, the report is one more sentence on that verdict;
where they name nobody (only the reporting rank timed out, or all reporters agree and the blamed rank
reported nothing), the report's own verdict names them (source ``desync_report``): partial evidence
still speaks.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ...ranks import rank_key

BLAME = {"never_joined", "joined_not_finished", "finished_not_joined"}


def bare_pg(pg: str | None) -> str:
    """'1(tp:0)' -> '1': a group's GUID without its description, to tie records of one group across sources."""
    return re.sub(r"\(.*\)$", "", pg or "").strip()


def tie_reports(rows: list[dict[str, Any]], torch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Report rows with the group and SeqNum of the reporting rank's timeout filled in where the report's own
    record names neither (torch logs the report as a record of its own after the timeout line)."""
    out = []
    for r in rows:
        a = json.loads(r["attrs"]) if r.get("attrs") else {}
        mine = [t for t in torch if t["rank"] == a.get("reporter") and t["seq"] is not None
                and (r["pg"] == "?" or bare_pg(t["pg"]) == bare_pg(r["pg"]))]
        if mine:
            last = max(mine, key=lambda t: t["seq"])
            if r["pg"] == "?":
                r = {**r, "pg": last["pg"]}
            a.setdefault("timeout_seq", last["seq"])
        out.append({**r, "attrs": json.dumps(a)})
    return out


def attach_reports(verdicts: list[dict[str, Any]], rows: list[dict[str, Any]],
                   label: Callable[[int], str]) -> list[dict[str, Any]]:
    """``verdicts`` (collective_verdicts rows) with each desync report tied to its group's torch verdict."""
    reports: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        a = json.loads(r["attrs"]) if r.get("attrs") else {}
        reports[(r["pg"], a.get("reporter"), a.get("timeout_seq"))].append({**r, "a": a})
    out = list(verdicts)
    for (pg, reporter, timeout_seq), rs in sorted(reports.items(), key=lambda kv: str(kv[0])):
        blamed = _blamed(rs)
        if not blamed:
            continue
        names = sorted({label(r) for r in blamed}, key=rank_key)
        torch = [v for v in out if v["source"] == "torch_nccl" and v["engine"] == rs[0]["engine"]
                 and bare_pg(v["pg"]) == bare_pg(pg)]
        agreement, named_by_torch = _agreement(set(names), torch)
        who = f"rank {reporter}'s" if reporter is not None else "the"
        said = f"The desync report ({who}, TORCH_NCCL_DESYNC_DEBUG) names {', '.join(names)} as lagging"
        for v in torch:
            v["detail"] += f" {said}; {agreement}."
        if named_by_torch:
            continue
        out.extend(_report_verdicts(rs, pg, reporter, timeout_seq, blamed, label, agreement))
    return out


def _blamed(rs: list[dict]) -> dict[int, dict]:
    """The ranks the report blames, each with its statement (the one about the lowest collective)."""
    out: dict[int, dict] = {}
    for r in sorted(rs, key=lambda r: (r["seq"] is not None, r["seq"] or 0)):
        if r["a"].get("relation") in BLAME and r["rank"] is not None and r["rank"] not in out:
            out[r["rank"]] = r
    return out


def _agreement(names: set[str], torch: list[dict]) -> tuple[str, bool]:
    """Whether the group's ProcessGroupNCCL verdicts agree with the report, and whether they already name
    exactly the blamed ranks (then the report adds a sentence, not a finding)."""
    if not torch:
        return "no ProcessGroupNCCL timeout line of this group beside it to check it against", False
    for v in torch:
        odd = set(v["ranks"] or [])
        if v["verdict"] in ("desync", "absent") and odd == names:
            return f"the ProcessGroupNCCL SeqNums agree ({'out of step' if v['verdict'] == 'desync' else 'absent'}: " \
                   f"{', '.join(sorted(odd, key=rank_key))})", True
    for v in torch:
        odd, majority = set(v["ranks"] or []), set(v["majority_ranks"] or [])
        at = f"SeqNum={v['seq']}" if v["seq"] is not None else "their SeqNums"
        if v["verdict"] in ("desync", "absent") and odd:
            return f"the ProcessGroupNCCL SeqNums disagree: they name {', '.join(sorted(odd, key=rank_key))}", False
        if v["verdict"] == "agree" and names & majority:
            return f"the ProcessGroupNCCL SeqNums disagree: they put {', '.join(sorted(names & majority, key=rank_key))} " \
                   f"at {at} with the others", False
        if v["verdict"] == "agree":
            return f"the ProcessGroupNCCL SeqNums agree: {', '.join(sorted(majority, key=rank_key))} timed out at " \
                   f"{at} and {', '.join(sorted(names, key=rank_key))} reported no timeout", False
    reporters = sorted({r for v in torch for r in (v["majority_ranks"] or [])}, key=rank_key)
    return "the ProcessGroupNCCL lines cannot confirm it" + \
        (f": only {', '.join(reporters)} reported a timeout" if reporters else ""), False


def _report_verdicts(rs: list[dict], pg: str, reporter: int | None, timeout_seq: int | None,
                     blamed: dict[int, dict], label: Callable[[int], str], agreement: str) -> list[dict[str, Any]]:
    """The report's own verdicts: a desync for ranks inside or past another collective, absent for ranks
    that never joined any."""
    out = []
    others = sorted({label(r["rank"]) for r in rs if r["rank"] is not None and r["rank"] not in blamed}
                    | ({label(reporter)} if reporter is not None and reporter not in blamed else set()), key=rank_key)
    for kind, relations in (("desync", ("joined_not_finished", "finished_not_joined")), ("absent", ("never_joined",))):
        mine = {k: r for k, r in blamed.items() if r["a"]["relation"] in relations}
        if not mine:
            continue
        clauses = "; ".join(f"{label(k)} {_statement(r)}" for k, r in sorted(mine.items()))
        ref = next((r["a"].get("next_collective") for r in mine.values() if r["a"].get("next_collective")), None)
        ref = ref or timeout_seq
        detail = (f"In pg {pg}, the desync report printed with {f'rank {reporter}' if reporter is not None else 'a'}"
                  f"'s ProcessGroupNCCL timeout" + (f" of SeqNum={timeout_seq}" if timeout_seq else "")
                  + f" (TORCH_NCCL_DESYNC_DEBUG) names the lagging ranks: {clauses}. It counts collectives from 1 "
                  f"per group, as SeqNum does, so #N is SeqNum=N; {agreement}. "
                  + ("Ranks of one group must issue the same collectives in the same order: the lagging ranks are "
                     "out of step." if kind == "desync" else
                     "The peers were waiting for them: they stopped first (their stop time is not in the evidence)."))
        ts = min((r["ts"] for r in rs if r["ts"] is not None), default=None)
        out.append({"engine": rs[0]["engine"], "source": "desync_report", "pg": pg, "verdict": kind,
                    "ranks": sorted((label(k) for k in mine), key=rank_key), "majority_ranks": others,
                    "seq": ref, "op": None, "ts": ts, "ts_basis": "read", "detail": detail,
                    "evidence": [{"file": r["path"], "line": r["line"]} for r in sorted(mine.values(),
                                                                                       key=lambda r: r["line"])]})
    return out


def _statement(r: dict) -> str:
    rel, n, m = r["a"].get("relation"), r["seq"], r["a"].get("next_collective")
    if rel == "never_joined":
        return "never joined any collective (dead, or never started)"
    if rel == "joined_not_finished":
        return f"joined but did not finish collective #{n}"
    return f"finished collective #{n} but never joined #{m}"
