"""torch's fr_trace analyzer text and ``ncclras -f json`` reports as collective records (issue 26).

Test data: ``tests/data/collectives/fr_trace`` holds NCCL-shaped Flight Recorder dumps and what torch 2.13's own
analyzer printed about them (``generate.py`` there runs it); ``tests/data/collectives/ras_json`` holds
``ncclras -f json`` documents written with NCCL's own format strings for the situations of the text reports
in ``tests/data/collectives/ras``.  The same situation must give the same findings, and the records must say
what the dumps (or the text report) say about the same collectives.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, by_rule

from hangforensics.analysis.collectives.collective_match import compare_process_groups
from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.parsers.collectives import flight_recorder as fr
from hangforensics.parsers.collectives import fr_trace_text, nccl_ras, nccl_ras_json
from hangforensics.parsers.collectives.collective_rows import op_key
from hangforensics.readers.kinds import detect_kind
from hangforensics.store import Store

FRT = DATA / "collectives" / "fr_trace"
RAS = DATA / "collectives" / "ras"
RJ = DATA / "collectives" / "ras_json"
DUMPS = {"opmismatch4": FRT / "dumps" / "opmismatch4", "missing4": FRT / "dumps" / "missing4",
         "sizes4": FRT / "dumps" / "sizes4", "incomplete4": FRT / "dumps" / "incomplete4",
         "sglang_tp8_behind": DATA / "collectives" / "fr" / "sglang_tp8_behind"}
TEXTS = sorted(p.name for p in FRT.glob("*.txt"))


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def analyze(folder: Path) -> tuple[list[dict], Store]:
    st = Store(":memory:")
    ingest_paths(st, [folder], mode="engine")
    return run_rules(st), st


def engine_with(tmp_path: Path, name: str, text: str) -> Path:
    eng = tmp_path / name
    eng.mkdir()
    (eng / "paste.txt").write_text(text, encoding="utf-8")
    return eng


def findings_of(folder: Path) -> dict[str, list[dict]]:
    found, st = analyze(folder)
    st.close()
    return by_rule(found)


def named(found: dict[str, list[dict]], rule: str) -> list[list[str]]:
    return [f["ranks"] for f in found.get(rule, [])]


# -- fr_trace: reading -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TEXTS)
def test_fr_trace_text_is_detected_and_every_line_read(tmp_path: Path, name: str) -> None:
    lines = lines_of(FRT / name)
    assert fr_trace_text.looks_like_fr_trace(lines)
    rep = fr_trace_text.parse_fr_trace(lines)
    assert sorted(set(rep.consumed) | set(rep.unmatched)) == list(range(len(lines)))
    assert rep.unmatched == (), [lines[i] for i in rep.unmatched]
    assert rep.rows
    shutil.copy(FRT / name, tmp_path / "notes.txt")            # the name says nothing
    assert detect_kind(tmp_path / "notes.txt") == "fr_trace"


def test_other_evidence_is_not_fr_trace() -> None:
    for p in [*RAS.glob("*.txt"), *RJ.glob("*.json")]:
        assert not fr_trace_text.looks_like_fr_trace(lines_of(p)), p
    log = ["[2026-03-14 09:26:59] Decode batch. #running-req: 3, #token: 900, token usage: 0.01",
           "collective: nccl:all_reduce", "group info: 0:default_pg"]
    assert not fr_trace_text.looks_like_fr_trace(log)


def test_fr_trace_blocks_as_fr_trace_prints_them() -> None:
    rep = fr_trace_text.parse_fr_trace(lines_of(FRT / "sglang_tp8_behind.txt"))
    kinds = [(b.kind, b.seq, b.pg, b.desc, b.op, b.missing, b.state) for b in rep.blocks]
    assert kinds == [("errors", 4018, "1", "tp:0", "broadcast", (), "completed"),
                     ("not_joined", 4019, "1", "tp:0", "all_reduce", (5,), "started"),
                     ("not_joined", 4020, "1", "tp:0", "all_reduce", (0, 1, 2, 3, 4, 5, 7), "scheduled")]
    errs = rep.blocks[0]
    assert errs.errors_complete and [(c.rank, c.error, c.state) for c in errs.culprits] == \
        [(1, "COLLECTIVE_STATE_MISMATCH", "started")]
    assert errs.frames[0].startswith("broadcast at ") and len(errs.frames) == 6
    assert rep.blocks[1].expected == tuple(range(8))


# -- fr_trace: the same findings and records as the dumps -------------------------------------------------

SITUATIONS = [
    # (text, dump set, rule the text gives, rule the dumps give, ranks both name)
    ("opmismatch4.txt", "opmismatch4", "collective-desync", "collective-desync", ["rank2"]),
    ("opmismatch4.v.txt", "opmismatch4", "collective-desync", "collective-desync", ["rank2"]),
    ("opmismatch4.v.notab.txt", "opmismatch4", "collective-desync", "collective-desync", ["rank2"]),
    ("opmismatch4.j.txt", "opmismatch4", "collective-desync", "collective-desync", ["rank2"]),
    ("opmismatch4.jv.txt", "opmismatch4", "collective-desync", "collective-desync", ["rank2"]),
    ("sizes4.txt", "sizes4", "collective-desync", "collective-desync", ["rank1"]),
    ("incomplete4.txt", "incomplete4", "collective-desync", "collective-desync", ["rank2"]),
    ("sglang_tp8_behind.txt", "sglang_tp8_behind", "collective-desync", "collective-desync", ["rank5"]),
    ("missing4.j.txt", "missing4", "collective-desync", "collective-desync", ["rank3"]),
    # fr_trace says only that rank 3's dump holds no #310 ("missing ranks"): absent, not placed; the dumps
    # show it finished #309 (behind)
    ("missing4.txt", "missing4", "first-rank-stopped", "collective-desync", ["rank3"]),
]


@pytest.mark.parametrize(("text", "dumps", "rule", "dump_rule", "ranks"), SITUATIONS)
def test_fr_trace_text_names_the_ranks_the_dumps_name(tmp_path: Path, text: str, dumps: str, rule: str,
                                                       dump_rule: str, ranks: list[str]) -> None:
    eng = tmp_path / "frt"
    eng.mkdir()
    shutil.copy(FRT / text, eng / "fr_trace.out")
    got = findings_of(eng)
    assert set(got) == {rule}, {k: named(got, k) for k in got}
    assert named(got, rule) == [ranks]
    (f,) = got[rule]
    assert "fr trace" in f["title"] or "fr_trace" in f["title"]
    assert f["evidence"] and all(e["file"] == "fr_trace.out" for e in f["evidence"])
    from_dumps = findings_of(DUMPS[dumps])
    assert named(from_dumps, dump_rule) == [ranks]


def _dump_rows(folder: Path) -> dict[tuple, object]:
    out = {}
    for p in sorted(folder.iterdir()):
        dump = fr.parse_flight_recorder(p.read_bytes(), p.name)
        for r in fr.collective_rows(dump):
            if r.seq is not None and not r.p2p:
                out[(r.rank, r.pg, r.seq)] = r
    return out


@pytest.mark.parametrize(("text", "dumps"), [(t, d) for t, d, *_ in SITUATIONS if ".j." not in t])
def test_fr_trace_records_say_what_the_dumps_say(text: str, dumps: str) -> None:
    """Every numbered record read from the text is the dump's entry on that rank: same group, number, op and
    state, and where the text gives sizes (dtypes, times) the same ones."""
    rows = [r for r in fr_trace_text.parse_fr_trace(lines_of(FRT / text)).rows if r.seq is not None]
    truth = _dump_rows(DUMPS[dumps])
    assert rows
    for r in rows:
        d = truth.get((r.rank, r.pg, r.seq))
        assert d is not None, r
        assert (r.pg_desc, op_key(r.op) if r.op else None) == (d.pg_desc, op_key(d.op) if r.op else None), (r, d)
        assert r.state is None or r.state == d.state, (r, d)
        assert not r.input_sizes or r.input_sizes == d.input_sizes, (r, d)
        assert not r.input_dtypes or r.input_dtypes == d.input_dtypes, (r, d)
        assert r.ts is None or r.ts == d.ts, (r, d)
        assert r.pg_ranks is None or r.pg_ranks == d.pg_ranks, (r, d)


def test_fr_trace_missing_ranks_are_absent_rows() -> None:
    rep = fr_trace_text.parse_fr_trace(lines_of(FRT / "missing4.txt"))
    absent = [(r.rank, r.pg, r.state) for r in rep.rows if r.seq is None]
    assert absent == [(3, "0", "missing")]
    present = sorted((r.rank, r.seq, r.op, r.state) for r in rep.rows if r.seq is not None)
    assert present == [(r, 310, "all_reduce", "started") for r in range(3)]


def test_fr_trace_missing_dumps_are_silent_members() -> None:
    """'We cannot decide … missed FR dumps from ranks ({3})': rank 3 gets no row of its group (as with the
    dumps, it is a member that left no record), and fr_trace's block does not put it at #310."""
    rep = fr_trace_text.parse_fr_trace(lines_of(FRT / "incomplete4.txt"))
    assert rep.no_dump == (3,)
    assert {r.rank for r in rep.rows} == {0, 1, 2}
    (v,) = [v for v in compare_process_groups(rep.rows) if v.kind.value == "desync"]
    assert v.odd_ranks == (2,) and "rank 3 left no record here" in v.detail


def test_fr_trace_state_mismatch_alone_names_nobody(tmp_path: Path) -> None:
    """fr_trace calls rank 1 a culprit for a state its watchdog had not caught up with: not a desync."""
    text = "\n".join(lines_of(FRT / "sglang_tp8_behind.txt")[:19])          # the #4018 block only
    assert "COLLECTIVE_STATE_MISMATCH" in text
    got = findings_of(engine_with(tmp_path, "state", text))
    assert "collective-desync" not in got and "first-rank-stopped" not in got


def test_fr_trace_without_tabulate_reads_the_reprs() -> None:
    a = fr_trace_text.parse_fr_trace(lines_of(FRT / "opmismatch4.v.txt")).rows
    b = fr_trace_text.parse_fr_trace(lines_of(FRT / "opmismatch4.v.notab.txt")).rows
    key = sorted((r.rank, r.pg, r.seq, r.op, r.state, r.input_sizes) for r in a)
    assert key == sorted((r.rank, r.pg, r.seq, r.op, r.state, r.input_sizes) for r in b)
    assert len({r.seq for r in a}) == 10                        # the Collectives table: #301 .. #310


def test_fr_trace_hashed_group_names_are_named_back() -> None:
    rows = fr_trace_text.parse_fr_trace(lines_of(FRT / "opmismatch4.jv.txt")).rows
    assert {r.pg for r in rows} == {"0"} and {r.pg_desc for r in rows} == {"default_pg"}
    assert all(r.ts is not None and r.pg_ranks == (0, 1, 2, 3) for r in rows)


def test_fr_trace_plain_j_table_rows_are_table_rows() -> None:
    rows = fr_trace_text.parse_fr_trace(lines_of(FRT / "missing4.j.txt")).rows
    assert {(r.pg, r.seq_kind) for r in rows} == {(fr_trace_text.TABLE_PG, "entry")}
    assert max(r.seq for r in rows if r.rank == 3) == 9 and max(r.seq for r in rows if r.rank == 0) == 10
    cells = ["send(s=0 d=1, input_sizes=[[4]], state=completed)", "recv(s=0 d=1, input_sizes=[[4]], state=completed)"]
    w = len(cells[0])                                           # tabulate's 'simple' layout
    p2p = fr_trace_text.parse_fr_trace([f"{'Rank 0':<{w}}  Rank 1", f"{'-' * w}  {'-' * w}", "  ".join(cells)]).rows
    assert len(p2p) == 2
    assert {r.seq_kind for r in p2p} == {"p2p"}                  # send/recv order differs by rank: never compared


# -- fr_trace: older and cut wordings (the analyzer's own format strings) -------------------------------------

FRAMES = ["collective stack trace: ", " all_reduce at /opt/torch/distributed/distributed_c10d.py:2696",
          "wrapper at /opt/torch/distributed/c10d_logger.py:83"]


def test_fr_trace_2_5_wording_with_a_rank_count(tmp_path: Path) -> None:
    """torch 2.5: 'Not all ranks joining collective 5 at entry 4' and 'expected ranks: 2' (a count)."""
    text = ["Not all ranks joining collective 5 at entry 4", "group info: 0:default_pg",
            "collective: nccl:all_reduce", "missing ranks: {1}", "input sizes: [[3, 4]]",
            "output sizes: [[3, 4]]", "expected ranks: 2", "collective state: scheduled", *FRAMES]
    rep = fr_trace_text.parse_fr_trace(text)
    assert rep.unmatched == ()
    assert sorted((r.rank, r.seq, r.state) for r in rep.rows) == [(0, 5, "scheduled"), (1, None, "missing")]
    got = findings_of(engine_with(tmp_path, "old", "\n".join(text)))
    assert named(got, "first-rank-stopped") == [["rank1"]]


def test_fr_trace_2_4_one_line_wording() -> None:
    line = "Not all ranks joining collective for group 0:default_pg collective nccl:all_reduce Missing ranks are {3}"
    rep = fr_trace_text.parse_fr_trace([line])
    assert fr_trace_text.looks_like_fr_trace([line])
    assert [(r.rank, r.pg, r.state) for r in rep.rows] == [(3, "0", "missing")]


def test_fr_trace_dtype_and_size_clauses() -> None:
    head = ["Collective sequence number: 12 has errors", "internal record id: 11", "group info: 0:default_pg",
            "collective: nccl:all_reduce", "input sizes: [[8]]", "output sizes: [[8]]", "world size: 4",
            "expected ranks: {0, 1, 2, 3}", "collective state: started"]
    dtype = "error msg: Culprit rank 3; Error type: COLLECTIVE_DTYPE_MISMATCH, Expected dtypes: '{'Float'}' does " \
            "not match found dtype: '{'Float'}/{'BFloat16'}/{'BFloat16'}'"
    rows = fr_trace_text.parse_fr_trace([*head, dtype, *FRAMES]).rows
    assert {r.rank: r.input_dtypes for r in rows} == {0: ("Float",), 1: ("Float",), 2: ("Float",), 3: ("BFloat16",)}
    (v,) = compare_process_groups(rows)
    assert v.kind.value == "desync" and v.odd_ranks == (3,)
    sizes = "error msg: Culprit rank 0; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[8]]' does " \
            "not match found input sizes: '[[9]]', Culprit rank 2; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected " \
            "input sizes: '[[8]]' does not match found input sizes: '[[9]]', Culprit rank 3; Error type: " \
            "SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[8]]' does not match found input sizes: '[[9]]'"
    # the first rank (1, never named by fr_trace) is the odd one out: three culprits agree with each other
    (v,) = compare_process_groups(fr_trace_text.parse_fr_trace([*head, sizes, *FRAMES]).rows)
    assert v.kind.value == "desync" and v.odd_ranks == (1,)


def test_fr_trace_cut_error_message_names_nobody() -> None:
    """A message cut inside its clause list: the culprits it names are not assumed to be the minority."""
    head = ["Collective 39 at entry 38 errors", "group info: 0:default_pg", "collective: nccl:all_reduce",
            "input sizes: [[1025]]", "output sizes: [[1025]]", "world size: 8",
            "expected ranks: {0, 1, 2, 3, 4, 5, 6, 7}", "collective state: scheduled",
            "error msg: Culprit rank 2; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1025]]' does "
            "not match found input sizes: '[[262144]]', Culprit rank 6; Error type: SIZE_OR_SYNTAX_MISMATCH, "
            "Expected input sizes: '[[1025]]' does not match found"]
    rep = fr_trace_text.parse_fr_trace(head)
    assert rep.unmatched == () and not rep.blocks[0].errors_complete
    assert {r.rank for r in rep.rows} == set(range(8))
    verdicts = compare_process_groups(rep.rows)
    assert not [v for v in verdicts if v.kind.value in ("desync", "absent")], verdicts


def test_fr_trace_in_a_quoted_markdown_paste(tmp_path: Path) -> None:
    body = lines_of(FRT / "missing4.txt")
    text = "\n".join(["fr_trace says:", "", "> ```", *(f"> {s}" for s in body), "> ```", "", "any idea?"])
    eng = engine_with(tmp_path, "md", text)
    assert detect_kind(eng / "paste.txt") == "fr_trace"
    found, st = analyze(eng)
    assert named(by_rule(found), "first-rank-stopped") == [["rank3"]]
    src = st.query("SELECT kind, envelope, lines, parsed_lines, unparsed_lines FROM sources")[0]
    assert src["kind"] == "fr_trace" and src["envelope"] == "markdown"
    assert src["lines"] == src["parsed_lines"] + src["unparsed_lines"] and src["parsed_lines"] == len(body)
    (rec,) = st.query("SELECT line FROM collective_records WHERE state = 'missing'")
    assert text.splitlines()[rec["line"] - 1] == "> " + body[0]   # the file's own line
    st.close()


# -- ncclras -f json ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in RJ.glob("*.json")))
def test_ras_json_is_detected_and_read_whole(tmp_path: Path, name: str) -> None:
    lines = lines_of(RJ / name)
    assert nccl_ras_json.looks_like_nccl_ras_json(lines) and not nccl_ras.looks_like_nccl_ras(lines)
    rep = nccl_ras_json.parse_nccl_ras_json(lines)
    assert rep.unmatched == () and rep.consumed == frozenset(range(len(lines)))
    assert rep.nccl_version == "2.28.7" and rep.cuda_runtime == 12090
    shutil.copy(RJ / name, tmp_path / "status")
    assert detect_kind(tmp_path / "status") == "nccl_ras"


def _key(rows) -> set[tuple]:
    return {(r.rank, r.pg, r.seq, r.op, r.state) for r in rows}


def test_ras_json_mismatch_gives_the_text_reports_records() -> None:
    text = nccl_ras.parse_nccl_ras(lines_of(RAS / "v2.26_mismatch.txt"))
    js = nccl_ras_json.parse_nccl_ras_json(lines_of(RJ / "v2.28_mismatch.json"))
    assert _key(js.rows) == _key(text.rows)                       # the communicator that agrees gives none
    assert {r.pg_ranks for r in js.rows} == {tuple(range(8))}
    odd = {(o.rank, o.relation, o.op, o.count, o.node, o.pid, o.gpu) for o in js.odd_ranks}
    assert odd == {(o.rank, o.relation, o.op, o.count, o.node, o.pid, o.gpu) for o in text.odd_ranks}


def test_ras_json_dead_rank_gives_the_text_reports_absent_rank() -> None:
    text = nccl_ras.parse_nccl_ras(lines_of(RAS / "dead_rank.txt"))
    js = nccl_ras_json.parse_nccl_ras_json(lines_of(RJ / "v2.28_dead_rank.json"))
    assert [(r.rank, r.pg, r.seq, r.state) for r in js.rows] == [(6, "3f7d9a0c5e21b844", None, "dead")]
    assert {r.rank for r in text.rows} == {6}
    (dead,) = [o for o in js.odd_ranks if o.rank is not None]
    assert (dead.relation, dead.node, dead.pid, dead.gpu) == ("dead", "10.20.4.13", 51234, 2)


@pytest.mark.parametrize(("text", "js"), [("v2.26_mismatch.txt", "v2.28_mismatch.json"),
                                          ("dead_rank.txt", "v2.28_dead_rank.json"),
                                          ("healthy.txt", "v2.28_healthy.json")])
def test_ras_json_gives_the_text_reports_findings(tmp_path: Path, text: str, js: str) -> None:
    want = findings_of(engine_with(tmp_path, "text", (RAS / text).read_text()))
    got = findings_of(engine_with(tmp_path, "json", (RJ / js).read_text()))
    assert {k: named(got, k) for k in got} == {k: named(want, k) for k in want}
    for g, w in zip(got.get("first-rank-stopped", []), want.get("first-rank-stopped", []), strict=True):
        assert g["title"] == w["title"]                            # 'rank6 reported dead (NCCL RAS)'
    for g in got.get("collective-desync", []):
        assert "communicator 9e0f2d41c8b7a613" in g["title"] and "behind" in g["detail"]


def test_ras_json_events_and_notes(tmp_path: Path) -> None:
    found, st = analyze(engine_with(tmp_path, "ras", (RJ / "v2.28_mismatch.json").read_text()))
    facts = st.query("SELECT rank, line, message, attrs FROM events WHERE kind = 'nccl_ras' ORDER BY line")
    assert [(f["rank"], json.loads(f["attrs"])["relation"]) for f in facts] == \
        [("rank2", "lagging"), ("rank2", "lagging"), ("rank6", "ahead")]
    lines = (RJ / "v2.28_mismatch.json").read_text().splitlines()
    assert all(lines[f["line"] - 1].strip() == f'"rank": {f["rank"][4:]},' for f in facts)
    assert "launched up to AllReduce operation 733119" in facts[0]["message"] + facts[1]["message"]
    st.close()
    _, st = analyze(engine_with(tmp_path, "ok", (RJ / "v2.28_healthy.json").read_text()))
    (note,) = st.query("SELECT note FROM sources")
    assert "every communicator OK" in note["note"]
    assert st.scalar("SELECT count(*) FROM collective_records") == 0
    st.close()


def test_ras_json_fenced_in_a_ticket(tmp_path: Path) -> None:
    body = (RJ / "v2.28_mismatch.json").read_text().splitlines()
    text = "\n".join(["We ran ncclras on node 0 while the job hung:", "", "```json", *body, "```", "",
                      "Why is rank 2 behind?"])
    eng = engine_with(tmp_path, "md", text)
    assert detect_kind(eng / "paste.txt") == "nccl_ras"
    found, st = analyze(eng)
    assert named(by_rule(found), "collective-desync") == [["rank2", "rank6"]]
    src = st.query("SELECT envelope, lines, parsed_lines, unparsed_lines FROM sources")[0]
    assert src["envelope"] == "markdown" and src["parsed_lines"] == len(body)
    assert src["lines"] == src["parsed_lines"] + src["unparsed_lines"]
    lines = text.splitlines()
    for r in st.query("SELECT rank, line FROM collective_records"):
        assert lines[r["line"] - 1].strip() == f'"rank": {r["rank"]},'
    st.close()


def test_ras_json_missing_commas_of_nccl_2_28_9_are_repaired() -> None:
    lines = lines_of(RJ / "v2.28_dead_rank.json")
    k = max(i for i, s in enumerate(lines) if '"nvml_dev"' in s)      # inside missing_ranks
    lines[k] = lines[k].rstrip(",")
    rep = nccl_ras_json.parse_nccl_ras_json(lines)
    assert [(r.rank, r.state) for r in rep.rows] == [(6, "dead")] and rep.unmatched == ()


def test_ras_json_not_json_is_kept_unparsed() -> None:
    lines = ["{", '  "nccl_version": "2.28.7",', '  "communicators": [', "    {", '      "hash": "0x1",']
    rep = nccl_ras_json.parse_nccl_ras_json(lines)
    assert rep.rows == () and rep.unmatched == tuple(range(len(lines)))
