"""nvidia-smi samples: parsing, GPU index -> rank, and the 0 % vs 100 % distinction signatures rely on."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from conftest import LogWriter, analyze_folder, by_rule

from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

FRAMES = ("    recvmsg (libc.so.6)\n    ncclCommWindowRegister (libnccl.so.2)\n"
          "    _register_segments_for_comm (sglang/srt/distributed/device_communicators/pynccl_allocator.py:417)\n"
          "    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)\n    <module> (<string>:1)\n")


def _engine(tmp_path: Path, util_after: int, header: bool = True) -> Path:
    log = LogWriter(tp=2)
    log.startup(base_gpu_id=4, gpu_id_step=2).traffic(10, 120).posts(122, 500)
    eng = log.write(tmp_path / f"eng{util_after}")
    for r in range(2):
        (eng / f"dump{r}.txt").write_text(
            f"Process {70 + r}: sglang::scheduler_TP{r}\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
            f'Thread {70 + r} (idle): "MainThread"\n' + FRAMES)
    t0 = datetime(2026, 5, 1, 10, 0, 0)
    rows = ["timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]"] if header else []
    for s in range(0, 500, 5):
        for gpu in (4, 6):
            util = 90 if s < 120 else util_after
            rows.append(f"{t0 + timedelta(seconds=s):%Y/%m/%d %H:%M:%S}.250, {gpu}, {util} %, "
                        f"{150.0 if util else 71.5:.2f} W, 61234 MiB")
    (eng / "smi").mkdir()
    (eng / "smi" / "gpus.csv").write_text("\n".join(rows) + "\n")
    return eng


def test_samples_are_typed_and_mapped_to_ranks(tmp_path: Path):
    eng = _engine(tmp_path, 0)
    with Store(":memory:") as st:
        ingest_paths(st, [eng])
        assert st.scalar("SELECT kind FROM sources WHERE path = 'smi/gpus.csv'") == "gpu_samples"
        row = st.query("SELECT * FROM gpu_rank_samples ORDER BY ts, gpu_index LIMIT 2")
        assert [(r["gpu_index"], r["rank"]) for r in row] == [(4, "TP0"), (6, "TP1")]
        assert row[0]["util_pct"] == 90.0 and row[0]["power_w"] == 150.0 and row[0]["mem_mib"] == 61234.0
        assert str(row[0]["ts"]) == "2026-05-01 10:00:00.250000"
        assert st.scalar("SELECT unparsed_lines FROM sources WHERE path = 'smi/gpus.csv'") == 0


def test_noheader_csv_is_recognised(tmp_path: Path):
    eng = _engine(tmp_path, 0, header=False)
    with Store(":memory:") as st:
        ingest_paths(st, [eng])
        assert st.scalar("SELECT count(*) FROM gpu_samples") == 200


def test_idle_gpus_support_the_symm_mem_signature_and_a_spin_rules_it_out(tmp_path: Path):
    (sig,) = by_rule(analyze_folder(_engine(tmp_path, 0)))["known-signature"]
    assert sig["signature"] == "symm-mem-window-register" and "0 % on average" in sig["detail"]
    spin = by_rule(analyze_folder(_engine(tmp_path, 100)))
    assert "symm-mem-window-register" not in [f["signature"] for f in spin.get("known-signature", [])]
