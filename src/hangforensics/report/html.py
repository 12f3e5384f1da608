"""The HTML incident report: one self-contained file (inline CSS and SVG, no network), jinja2 autoescaped.

Safety: every value is escaped (autoescape on for all templates, no ``|safe`` on evidence; the timeline's
markup built here escapes each value itself), a
Content-Security-Policy meta forbids scripts (the fleet index allows only its own, by hash) and any load,
links built from evidence are relative and percent-encoded, and request payloads in evidence text are
redacted (``redaction.py``) unless the operator asks for them.

Only this module and ``reports/templates`` know about presentation: they read
the store and the findings, and build the verdict, the timeline geometry and
the evidence excerpts.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from .. import __version__
from ..analysis.findings import iso
from ..analysis.progress.segments import Segment, runs_all, segment_of
from ..analysis.rules import SEVERITIES, load_rules
from ..analysis.stacks.places import own_frames
from ..analysis.stacks.stackclasses import compact_ranks
from ..ranks import rank_key
from ..readers.logfile import read_lines
from ..redaction import redact_payloads, shorten
from ..resources import data_dir
from ..store import Store
from ..store.database import beside
from .capture_section import annotate_stacks, capture_sections, with_snapshots
from .collective_panel import collective_panels
from .data import ReportData, Window, dump_records, timeline_rows

TIMELINE_W = 860          # drawing width of the time axis, px
LABEL_W = 110
ROW_H = 26
BUCKETS = 180
EXCERPT_CHARS = 400
# defence in depth behind autoescaping: the report runs no script and loads nothing
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def templates_dir() -> Path:
    found = data_dir("reports/templates", "report.html.j2")
    if found is None:
        raise FileNotFoundError("report templates not found")
    return found


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """The templates' compiled code, kept between runs in jinja's per-user cache folder: compiling them
    costs every scan and report some 0.16 s of one core.  Keyed by each template's source, so an edited
    template is compiled again; a cache that cannot be read or written is not used."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:           # noqa: BLE001 (unreadable, cut short, another Python's: compiled afresh)
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _template_cache() -> jinja2.BytecodeCache | None:
    try:
        return _TemplateCache()
    except (OSError, RuntimeError):         # no private folder to be had (jinja refuses an unsafe one)
        return None


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    # every template is HTML and every value in it may come from evidence: escape all of them, always
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), bytecode_cache=_template_cache(),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["hms"] = lambda t: t.strftime("%H:%M:%S") if t else "?"
    env.filters["iso"] = iso
    env.filters["incident_href"] = incident_href
    return env


def _shown(text: str | None, show_payloads: bool) -> str | None:
    """Evidence-derived text as a report may show it: request payloads cut out unless asked for."""
    return text if show_payloads or not text else redact_payloads(text)


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


def incident_filename(incident_id: str) -> str:
    """The file name of an incident's report: the id when it is a plain name, else a sanitised one.

    Engine folders (and so incident ids) may hold any character but '/'; the name must not start with a
    dot, carry markup or URL syntax, or collide with another id's name (a hash of the id keeps them apart).
    """
    safe = _UNSAFE_NAME.sub("_", incident_id)[:120]
    if safe != incident_id or safe.startswith("."):
        safe = f"{safe.lstrip('.') or 'incident'}-{hashlib.sha1(incident_id.encode()).hexdigest()[:8]}"
    return f"{safe}.html"


def incident_href(incident_id: str) -> str:
    """Relative, percent-encoded link from the fleet index to an incident report (never a scheme URL)."""
    from urllib.parse import quote

    return "incidents/" + quote(incident_filename(incident_id))


def script_csp(script: str) -> str:
    """The fleet index's policy: the report's, plus exactly its own inline script (by hash)."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    return f"{REPORT_CSP}; script-src 'sha256-{digest}'"


def _minutes(a: datetime, b: datetime) -> str:
    s = (b - a).total_seconds()
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def excerpts(store: Store, wanted: list[tuple[str, set[tuple[str, int]]]],
             show_payloads: bool = False) -> list[dict[tuple[str, int], str]]:
    """Per (engine, evidence lines) of ``wanted``: the text of the lines, read back from the files (raw text
    is not stored for parsed lines).  A file is read once for all the reports quoting it, a Flight Recorder
    dump's entries are read by one query for all of them.

    Payloads are redacted on the whole line, before it is shortened: a cut value must not escape redaction.
    """
    engines = list(dict.fromkeys(engine for engine, _ in wanted))
    # (a path listed twice: the last row in ReportData.sources' order, as the report's file list has it)
    src = {(s["engine"], s["path"]): s for s in store.query(
        "SELECT engine, path, kind, abs_path FROM sources WHERE list_contains(?, engine) ORDER BY engine, path",
        [engines])}
    per_report: list[dict[str, set[int]]] = []
    need: dict[tuple[str, str], set[int]] = defaultdict(set)
    for engine, lines in wanted:
        by_path: dict[str, set[int]] = defaultdict(set)
        for path, line in lines:
            if line is not None:
                by_path[path].add(int(line))
                need[(engine, path)].add(int(line))
        per_report.append(by_path)
    dumps = {k: v for k, v in need.items() if k in src and src[k]["kind"] == "flight_recorder"}
    records = dump_records(store, dumps)       # a binary dump: its entries, described, not its bytes
    text: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    for (engine, path), lines in need.items():
        if (engine, path) not in src or (engine, path) in dumps:
            continue
        try:
            found = read_lines(Path(src[(engine, path)]["abs_path"]), lines)
        except Exception:  # a file that vanished since ingest: its excerpts are simply absent
            continue
        text[(engine, path)] = {n: shorten(_shown(t, show_payloads) or "", EXCERPT_CHARS) for n, t in found.items()}
    out: list[dict[tuple[str, int], str]] = []
    for (engine, _), by_path in zip(wanted, per_report, strict=True):
        mine: dict[tuple[str, int], str] = {}
        for path, lines in by_path.items():
            if (engine, path) in dumps:
                mine.update({(path, n): _dump_entry(records[(engine, path, n)][-1])
                             for n in lines if (engine, path, n) in records})
            else:
                got = text.get((engine, path), {})
                mine.update({(path, n): got[n] for n in lines if n in got})
        out.append(mine)
    return out


def _dump_entry(r: dict[str, Any]) -> str:
    return (f"entry {r['line']}: {r['op'] or '?'} #{r['seq']}" + (" (p2p)" if r["kind"] == "p2p" else "")
            + f" in pg {r['pg']}" + (f"({r['pg_desc']})" if r["pg_desc"] else "")
            + f", {r['state'] or 'state unknown'}" + (f", input sizes {r['sizes']}" if r["sizes"] else ""))


def _at(ts: datetime | None, fmt: str = "%H:%M:%S") -> str:
    """' at <time>', or nothing for evidence that prints no time (a pasted traceback)."""
    return f" at {ts.strftime(fmt)}" if ts is not None else ""


def verdict(engine: str, fs: list[dict[str, Any]], stall: dict | None) -> list[str]:
    """Plain sentences, most important first."""
    by_rule = defaultdict(list)
    for f in fs:
        by_rule[f["rule"]].append(f)
    out: list[str] = []
    if "stall-onset" in by_rule:
        f = by_rule["stall-onset"][0]
        out.append(f"{engine} stopped making forward progress{_at(f['ts'], '%Y-%m-%d %H:%M:%S')} while work was "
                   f"still pending, and never resumed.")
    for f in by_rule.get("all-ranks-frozen", []):
        out.append(f"All {len(f['ranks'])} ranks froze within the same second: a shared deadlock "
                   f"(collective, rendezvous or NCCL registration), not one bad rank.")
    for f in by_rule.get("first-rank-stopped", []):
        out.append(f"{', '.join(f['ranks'])} stopped first: start the investigation there.")
    for f in by_rule.get("collective-desync", []):
        out.append(f"{f['title']}: a collective desync, which the group cannot recover from (restart it).")
    for f in by_rule.get("known-signature", []):
        out.append(f"The evidence matches the known hang signature '{f.get('signature')}'.")
    for f in by_rule.get("health-check-blind", []):
        out.append(f"/health kept answering 200 for {_minutes(f['ts'], f['ts_end'])} after the stall began: "
                   f"liveness probes cannot see this hang, and load balancers kept routing to it.")
    for f in by_rule.get("watchdog-kill", []):
        hard = "took the engine down" in f["title"]
        soft = f["title"].startswith("Soft")        # neither: its timeout line is not in the evidence
        out.append(f"The scheduler watchdog fired{_at(f['ts'])} on {len(f['ranks'])} rank(s)"
                   + (" and took the engine down." if hard else " (soft: it only dumped)." if soft else "."))
    if by_rule.get("busy-leak-report"):
        out.append("The memory 'leak' printed in the watchdog dump is a red herring: it counts the in-flight "
                   "batch's own KV pages. Do not chase a KV-cache leak.")
    for f in by_rule.get("idle-memory-leak", []):
        on = f" on {', '.join(f['ranks'])}" if f["ranks"] else ""
        out.append(f"A real memory leak: the idle-path check failed{on}{_at(f['ts'])}.")
    if not out:
        out.append(f"No hang found in {engine}'s evidence: it was busy, slow or idle, not stalled.")
    return list(dict.fromkeys(out))         # one sentence once, however many findings say it


def timeline_window(engine: str, span: tuple[datetime, datetime] | None,
                    stall: dict | None) -> tuple[Window, dict | None] | None:
    """The time axis of ``engine``'s timeline (its evidence, or around the stall) and the stall it marks;
    None without dated evidence."""
    if span is None:
        return None
    t0, t1 = span
    if stall is not None and stall["onset"] is None:
        stall = None                        # onset unknown (a watchdog whose timeout is not in the evidence)
    if stall is not None:
        t0 = max(t0, stall["onset"] - timedelta(minutes=10))
        t1 = max(stall["evidence_end"], stall["onset"] + timedelta(seconds=30))
    if t1 <= t0:
        t1 = t0 + timedelta(seconds=60)
    return Window(engine, t0, t1, (t1 - t0).total_seconds() / BUCKETS), stall


def timeline(window: Window, stall: dict | None, freeze: dict | None, fs: list[dict[str, Any]],
             kinds: dict[str, str], counts: list[dict[str, Any]], probe_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometry of the inline SVG: batch cadence per logging rank, probes, onset and freeze markers.

    ``stall`` as :func:`timeline_window` returned it; ``kinds``: batch kind per logging rank; ``counts`` and
    ``probe_rows``: the window's rows (``data.timeline_rows``)."""
    t0, t1 = window.t0, window.t1
    total = (t1 - t0).total_seconds()

    def x(t: datetime) -> float:
        return round(LABEL_W + TIMELINE_W * min(max((t - t0).total_seconds() / total, 0.0), 1.0), 1)

    # progress: batch lines, or vLLM stats lines with generation throughput (one row per engine core)
    ranks = sorted(kinds, key=rank_key)
    peak = max((c["n"] for c in counts), default=1)
    by_rank: dict[Any, list[dict[str, Any]]] = {}
    for c in counts:
        by_rank.setdefault(c["rank"], []).append(c)
    rows = []
    # (per bar only what differs: a bucket's height by its count, computed once per count)
    top, width = math.log1p(peak), max(1.0, round(TIMELINE_W / BUCKETS - 0.5, 1))
    heights = {n: max(2.0, (ROW_H - 8) * math.log1p(n) / top) for n in {c["n"] for c in counts}}
    for i, rank in enumerate(ranks):
        y = 30 + i * ROW_H
        bars = []
        for c in by_rank.get(rank, ()):
            h = heights[c["n"]]
            bars.append((round(LABEL_W + TIMELINE_W * c["b"] / BUCKETS, 1), round(y + ROW_H - 4 - h, 1),
                         width, round(h, 1), c["n"]))
        rows.append({"rank": rank or ("(stats)" if kinds[rank] == "vllm" else "(main)"), "y": y,
                     "bars": _bars_svg(bars)})
    probe_y = 30 + len(ranks) * ROW_H
    probes = []
    for r in probe_rows:
        after = stall is not None and r["ts"] > stall["onset"]
        # (the time of day as digits and colons, HH:MM:SS: isoformat's, some 5x cheaper than strftime's)
        probes.append((x(r["ts"]), r["status"] == 200, after, r["status"], r["ts"].isoformat()[11:19], r["path"]))
    marks = []
    for f in fs:
        if f["rule"] == "watchdog-kill" and f["ts"] and t0 <= f["ts"] <= t1:
            marks.append({"x": x(f["ts"]), "label": "watchdog " + f["ts"].strftime("%H:%M:%S")})
    height = probe_y + ROW_H + 34
    ticks = []
    for k in range(7):
        t = t0 + timedelta(seconds=total * k / 6)
        ticks.append({"x": x(t), "label": t.strftime("%H:%M:%S")})
    out: dict[str, Any] = {
        "width": LABEL_W + TIMELINE_W + 60, "height": height, "rows": rows, "probe_y": probe_y,
        "probes": _probes_svg(probes, probe_y + 13), "marks": marks, "ticks": ticks, "axis_y": probe_y + ROW_H + 4,
        "t0": t0, "t1": t1, "onset": None, "freeze": None, "label_w": LABEL_W, "axis_end": LABEL_W + TIMELINE_W,
    }
    if stall is not None:
        out["onset"] = {"x": x(stall["onset"]), "label": "stall onset " + stall["onset"].strftime("%H:%M:%S")}
    if freeze is not None and freeze.get("ts") is not None:
        a, b = x(freeze["ts"]), x(freeze["ts_end"] or freeze["ts"])
        out["freeze"] = {"x": a - 2, "w": max(4.0, b - a + 4),
                         "label": ("froze together" if freeze["verdict"] == "together" else "first stop")}
    return out


# The timeline's thousands of small elements (bars, probe dots) as markup built here, every text value escaped
# as the template escapes it (numbers need none: their text has no markup characters): through the template,
# their attribute lookups and escapes were most of a report's rendering time.
def _bars_svg(bars: list[tuple[float, float, float, float, int]]) -> Markup:
    """A rank row's bars: (x, y, width, height, lines in the bucket), all numbers."""
    return Markup("".join(
        f'<rect x="{_number(x)}" y="{_number(y)}" width="{_number(w)}" height="{_number(h)}" fill="#2e7d32">'
        f'<title>{_number(n)} progress line(s)</title></rect>' for x, y, w, h, n in bars))


def _number(v: float | int) -> float | int:
    """A number put into markup as it is (a value of another type would be escaped: never one here)."""
    return v if isinstance(v, int | float) else escape(v)


_RINGED = 'stroke="#b3261e" stroke-width="1.2"'       # a 200 after the stall began
_CLOCK = re.compile(r"\d\d:\d\d:\d\d")


def _clock(t: str) -> str:
    """A time of day put into markup as it is: HH:MM:SS needs no escaping (anything else is escaped)."""
    return t if len(t) == 8 and _CLOCK.fullmatch(t) else str(escape(t))


def _probes_svg(probes: list[tuple[float, bool, bool, Any, str, Any]], cy: int) -> Markup:
    """The /health answers' dots: (x, status 200, after the onset, status, time HH:MM:SS, path).  The path and
    the status are escaped once per distinct value (a window's probes ask a path or two, with a few statuses),
    the time not at all (digits and colons): escaping every one was a quarter of the timelines' time in a
    fleet's reports."""
    shown: dict[Any, str] = {}

    def text(v: Any) -> str:
        got = shown.get(v)
        if got is None:
            got = shown[v] = str(escape(v))
        return got

    return Markup("".join(
        f'<circle class="probe{" after-onset" if after else ""}" cx="{_number(x)}" cy="{cy}" '
        f'r="{3.5 if after else 2.5}" fill="{"#2e7d32" if ok else "#b3261e"}" '
        f'{_RINGED if after and ok else ""}><title>{_clock(t)} {text(path)} '
        f'{text(status)}</title></circle>' for x, ok, after, status, t, path in probes))


def stack_tree(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per capture: the folded prefix tree (chains of single-child nodes merged) and the classes side by side,
    from an engine's ``rank_classes`` rows (ORDER BY capture, class_id)."""
    out = []
    for cap in sorted({r["capture"] for r in rows}):
        nodes = {r["class_id"]: dict(r, children=[]) for r in rows if r["capture"] == cap}
        roots = []
        for n in nodes.values():
            (nodes[n["parent_id"]]["children"] if n["parent_id"] is not None else roots).append(n)

        def fold(n: dict) -> dict:
            chain = [n["frame"]]
            while len(n["children"]) == 1 and n["children"][0]["ranks"] == n["ranks"]:
                n = n["children"][0]
                chain.append(n["frame"])
            return {"frames": chain, "label": n["label"], "ranks": n["ranks"], "n": len(n["ranks"]),
                    "children": [fold(c) for c in sorted(n["children"], key=lambda c: -len(c["ranks"]))]}

        tree = [fold(r) for r in roots]
        leaves = [n for n in nodes.values() if n["is_leaf"]]
        classes = []
        for leaf in sorted(leaves, key=lambda n: (-len(n["ranks"]), n["label"])):
            # innermost frames below the last node shared with any other class
            classes.append({"label": leaf["label"], "ranks": leaf["ranks"], "frames": own_frames(nodes, leaf)[:10]})
        ts = next((n["ts"] for n in nodes.values() if n["ts"]), None)
        out.append({"capture": cap, "ts": ts, "tree": tree, "classes": classes,
                    "n_ranks": sum(len(r["ranks"]) for r in roots)})
    return out


def render_report(store: Store, engines: list[str], found: list[dict[str, Any]], title_path: str = "",
                  segment: int | None = None, show_payloads: bool = False) -> str:
    """The postmortem report of ``engines``; ``segment`` scopes it to one run of the server (an incident).

    Request payloads in evidence text are redacted unless ``show_payloads``.
    """
    sections = _sections(store, engines, [(e, segment, [f for f in found if f["engine"] == e]) for e in engines],
                         show_payloads, runs_all(store, engines))
    return _page(sections, title_path, show_payloads)


# Incident reports read together: the rows of this many reports at once (memory stays bounded for a fleet
# with thousands of incidents; the queries per batch are fixed).
REPORT_BATCH = 256


def render_incidents(store: Store, incidents: list[dict[str, Any]],
                     show_payloads: bool = False) -> Iterator[tuple[dict[str, Any], str]]:
    """(incident, its report) for each of ``incidents``, each as :func:`render_incident` writes it: the store
    is read by a fixed number of queries per REPORT_BATCH incidents, whatever their number."""
    for k in range(0, len(incidents), REPORT_BATCH):
        yield from _render_batch(store, incidents[k:k + REPORT_BATCH], show_payloads)


def _render_batch(store: Store, incidents: list[dict[str, Any]],
                  show_payloads: bool) -> Iterator[tuple[dict[str, Any], str]]:
    engines = list(dict.fromkeys(i["engine"] for i in incidents))
    if not engines:
        return
    fs = defaultdict(list)
    for f in store.query("SELECT * EXCLUDE (finding_id) FROM findings WHERE list_contains(?, engine) "
                         "ORDER BY engine, finding_id", [engines]):
        fs[f["engine"]].append(f)
    segs = runs_all(store, engines)
    jobs = [(i["engine"], i["segment"],
             [f for f in fs[i["engine"]] if segment_of(segs[i["engine"]], f["ts"]) == i["segment"] or f["ts"] is None])
            for i in incidents]
    sections = _sections(store, engines, jobs, show_payloads, segs)
    for inc, section in zip(incidents, sections, strict=True):
        yield inc, _page([section], f"incident {inc['incident_id']}", show_payloads)


def render_incident(store: Store, incident: dict[str, Any], show_payloads: bool = False) -> str:
    """One incident's report: its engine's report scoped to the incident's run and findings."""
    return next(render_incidents(store, [incident], show_payloads))[1]


def _page(sections: list[dict[str, Any]], title_path: str, show_payloads: bool) -> str:
    return _env().get_template("report.html.j2").render(
        sections=sections, title_path=title_path, version=__version__, csp=REPORT_CSP,
        payloads_shown=show_payloads, generated=datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
    )


def _first(rows: list[dict[str, Any]], segment: int | None) -> dict[str, Any] | None:
    """The first of an engine's rows in ``segment`` (any when None)."""
    return next((r for r in rows if segment is None or r["segment"] == segment), None)


def _sections(store: Store, engines: list[str], jobs: list[tuple[str, int | None, list[dict[str, Any]]]],
              show_payloads: bool, runs: dict[str, list[Segment]] | None = None) -> list[dict[str, Any]]:
    """The report section of each (engine, run or None for all, findings) of ``jobs`` (of ``engines``), from a
    fixed number of queries for all of them (``ReportData``, timelines, Flight Recorder entries).  ``runs``:
    the runs of the engines whose jobs name one; the timeline of an engine with several shows that run's
    evidence and the ranks that log progress in it."""
    rules = {r.id: r for r in load_rules()}
    runs = runs or {}
    # (a report of a whole engine shows the run of its latest stall: any of its runs)
    scoped = list({(e, s.index): s for e, seg, _ in jobs if len(runs.get(e, ())) > 1
                   for s in runs[e] if seg is None or s.index == seg}.values())
    wanted = [(e, {(ev["file"], ev["line"]) for f in fs for ev in (f["evidence"] or [])}) for e, _, fs in jobs]
    texts: list[dict[tuple[str, int], str]] = []
    # the quoted lines read from the files (and a Flight Recorder dump's entries from the store) beside the
    # reports' queries (measured: 0.06 s of 0.3 s for a 200-engine fleet's reports, waited for after the
    # timelines' queries alone)
    with beside(store, lambda other: texts.extend(excerpts(other, wanted, show_payloads))):
        data = ReportData.read(store, engines, scoped)
        stalls = [_first(data.stalls.get(e, []), seg) for e, seg, _ in jobs]
        freezes = [_first(data.freezes.get(e, []), seg) for e, seg, _ in jobs]
        shown = [seg if seg is not None or stall is None else stall["segment"]
                 for (_, seg, _), stall in zip(jobs, stalls, strict=True)]
        windows = [timeline_window(e, data.run_spans.get((e, seg), data.spans.get(e)), stall)
                   for (e, _, _), seg, stall in zip(jobs, shown, stalls, strict=True)]
        counts, probes = timeline_rows(store, [w[0] if w else None for w in windows])
    sections = []
    for k, (engine, _, fs) in enumerate(jobs):
        stall, freeze, text = stalls[k], freezes[k], texts[k]
        kinds = data.progress_kinds.get(engine, {})
        if (engine, shown[k]) in data.run_spans:    # a run of several: its own ranks
            kinds = {r: kd for r, kd in kinds.items() if r in data.run_ranks.get((engine, shown[k]), ())}
        items = []
        for f in fs:
            rule = rules.get(f["rule"])
            items.append({
                **f, "ts_s": iso(f["ts"]), "ts_end_s": iso(f["ts_end"]),
                # rules quote log text in titles and details
                "title": _shown(f["title"], show_payloads), "detail": _shown(f["detail"], show_payloads),
                "description": rule.description if rule else "",
                "false_positives": rule.false_positives if rule else (),
                "evidence": [{"file": e["file"], "line": e["line"], "text": text.get((e["file"], e["line"]))}
                             for e in (f["evidence"] or [])][:12],
            })
        by_sev = [(s, [i for i in items if i["severity"] == s]) for s in SEVERITIES]
        stacks = stack_tree(data.rank_classes.get(engine, []))
        annotate_stacks(data, engine, stacks)
        window = windows[k]
        sections.append({
            "engine": engine, "summary": _summary(data.summaries.get(engine), show_payloads),
            "verdict": with_snapshots(verdict(engine, fs, stall) if fs else [], data, engine),
            "by_severity": by_sev, "stall": stall, "freeze": freeze,
            "timeline": None if window is None else timeline(window[0], window[1], freeze, fs, kinds, counts[k],
                                                             probes[k]),
            "sources": data.sources.get(engine, []),
            "herrings": [i for i in items if i["rule"] == "busy-leak-report"],
            "critical": sum(1 for f in fs if f["severity"] == "critical"), "n_findings": len(fs),
            "config": [c["attrs"] for c in data.config.get(engine, []) if c["attrs"]],
            "stacks": stacks, "captures": capture_sections(data, engine),
            "collective_panels": collective_panels(data, engine),
        })
    return sections


def _summary(s: dict[str, Any] | None, show_payloads: bool) -> dict[str, Any] | None:
    """An engine's summary (analysis/summaries/summaries.py) with its parts worded for the page."""
    if s is None:
        return None
    files = dict(s["files"] or {})
    a, b = s["span_start"], s["span_end"]
    return {
        **s, "verdict": _shown(s["verdict"], show_payloads),
        "facts": [_shown(f, show_payloads) for f in (s["facts"] or [])],
        "files_text": ", ".join(f"{n} {k.replace('_', ' ')} file{'s' if n != 1 else ''}"
                                for k, n in sorted(files.items())),
        "ranks_text": compact_ranks(list(s["ranks"] or [])) if s["ranks"] else "",
        "span_text": f"from {a:%Y-%m-%d %H:%M:%S} to {b:%Y-%m-%d %H:%M:%S}" if a and b else "",
    }


def render_fleet_index(store: Store, scan_id: int, show_payloads: bool = False) -> str:
    """The fleet view: incidents, recurrence, signatures, shared configuration, blind probes, new vs known."""
    incidents = store.query("SELECT * FROM incidents ORDER BY onset DESC NULLS LAST, engine")
    engines = store.query(
        "SELECT engine, count(*) AS files, sum(bytes) AS bytes, sum(lines) AS lines, "
        "sum(unparsed_lines) AS unparsed, count(*) FILTER (WHERE status = 'vanished') AS vanished "
        "FROM sources GROUP BY engine ORDER BY engine")
    per_day = store.query(
        "SELECT CAST(onset AS DATE) AS day, count(*) AS incidents, count(DISTINCT engine) AS engines, "
        "sum(watchdog_kills) AS kills FROM incidents WHERE onset IS NOT NULL GROUP BY ALL ORDER BY day")
    recurrence = store.query(
        "SELECT engine, count(*) AS incidents, sum(watchdog_kills) AS kills, min(onset) AS first, "
        "max(onset) AS last FROM incidents GROUP BY engine HAVING count(*) > 1 OR sum(watchdog_kills) > 0 "
        "ORDER BY kills DESC, incidents DESC, engine")
    signatures = store.query(
        "SELECT sig, count(*) AS incidents, count(DISTINCT engine) AS engines FROM "
        "(SELECT engine, unnest(signatures) AS sig FROM incidents) GROUP BY sig ORDER BY incidents DESC, sig")
    blind = store.query(
        "SELECT engine, count(*) AS incidents, max(health_blind_s) AS longest_s FROM incidents "
        "WHERE health_blind_s IS NOT NULL GROUP BY engine ORDER BY longest_s DESC, engine")
    facts = shared_facts(store)
    # never silent: engines with nothing found where a process died (a crash is not a hang, nor healthy), and
    # the others whose evidence could not have shown a hang
    verdicts = {r["engine"]: _shown(r["verdict"], show_payloads)
                for r in store.query("SELECT engine, verdict FROM engine_summaries")}
    quiet = store.query(
        "SELECT s.engine, s.capture_next, coalesce(s.died, false) AS died FROM engine_summaries s "
        "WHERE (s.died OR s.thin) AND s.engine NOT IN (SELECT engine FROM incidents) ORDER BY s.engine")
    for t in quiet:
        t["verdict"] = verdicts[t["engine"]]
    died, thin = [t for t in quiet if t["died"]], [t for t in quiet if not t["died"]]
    engines = [{**e, "verdict": verdicts.get(e["engine"], "")} for e in engines]
    scan = store.query("SELECT * FROM scans WHERE scan_id = ?", [scan_id])
    prev = store.query("SELECT * FROM scans WHERE scan_id < ? AND finished_at IS NOT NULL ORDER BY scan_id DESC "
                       "LIMIT 1", [scan_id])
    rows = []
    for i in incidents:
        rows.append({**i, "title": _shown(i["title"], show_payloads),
                     "onset_s": iso(i["onset"]) or "", "ended_s": iso(i["ended"]) or "",
                     "new": i["first_seen_scan"] == scan_id, "sev_rank": SEVERITIES.index(i["severity"]),
                     "blind_min": round(i["health_blind_s"] / 60, 1) if i["health_blind_s"] else None})
    env = _env()
    script = env.get_template("fleet.js").render()   # the exact text the index inlines, for its CSP hash
    return env.get_template("fleet.html.j2").render(
        csp=script_csp(script), payloads_shown=show_payloads,
        incidents=rows, engines=engines, per_day=per_day, recurrence=recurrence, signatures=signatures,
        blind=blind, facts=facts, died=died, thin=thin, scan=scan[0] if scan else None, prev=prev[0] if prev else None,
        n_new=sum(1 for r in rows if r["new"]), version=__version__,
        generated=datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        kills=sum(i["watchdog_kills"] or 0 for i in incidents),
        kill_engines=len({i["engine"] for i in incidents if i["watchdog_kills"]}),
    )


FACT_COLUMNS = ("enable_symm_mem", "enable_dp_attention", "enable_hicache", "disaggregation_mode", "tp_size",
                "health_generation", "nccl_version", "torch_version", "model", "release_hint")


def shared_facts(store: Store) -> list[dict[str, Any]]:
    """Configuration values shared by every engine of a group (all stalled engines, and the engines of
    each signature), with how common the same value is among the other engines."""
    facts = store.query(
        "SELECT f.*, (SELECT count(*) FROM incidents i WHERE i.engine = f.engine AND i.kind = 'stall') AS stalls, "
        "(SELECT list(DISTINCT s) FROM (SELECT unnest(signatures) AS s FROM incidents i WHERE i.engine = f.engine)) "
        "AS sigs FROM engine_facts f")
    groups = [("every stalled engine", [f for f in facts if f["stalls"]])]
    for sig in sorted({s for f in facts for s in (f["sigs"] or [])}):
        groups.append((f"signature {sig}", [f for f in facts if sig in (f["sigs"] or [])]))
    out = []
    for label, hit in groups:
        if not hit:
            continue
        rest = [f for f in facts if f not in hit]
        for col in FACT_COLUMNS:
            values = {str(f[col]) for f in hit}
            if len(values) == 1 and next(iter(values)) not in ("None", "", "null"):
                v = next(iter(values))
                out.append({"group": label, "fact": col, "value": v, "affected": len(hit),
                            "unaffected_with_it": sum(1 for f in rest if str(f[col]) == v), "unaffected": len(rest)})
    return out
