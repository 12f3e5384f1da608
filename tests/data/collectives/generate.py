#!/usr/bin/env python3
"""Generate the Flight Recorder test dumps under ``fr/`` (run from anywhere; rewrites ``fr/`` only).

    python3 tests/data/collectives/generate.py

Standard library only, no randomness beyond fixed seeds: a re-run writes byte-identical files.
The layout follows pytorch ``FlightRecorder.hpp`` / ``FlightRecorderDetail.hpp`` as summarised in
shared/reference/collective-formats.md: a pickle (protocol 2, as torch writes it) of plain dicts,
lists and tuples, or the JSON form (no frames, unknown times 0, ``pg_status`` values as text).

Sets (one folder each, one file per rank, the rank as the file-name suffix):

* ``sglang_tp8_behind`` (2.10, SGLang TP8): every rank but 5 has *started* all_reduce #4019 in
  group ``1`` (tp:0, PG ID 2 on every rank); rank 5 *completed* broadcast #4018 and never joined
  #4019.  Traps for a matcher: rank 1's watchdog had not yet seen #4018 complete (still
  ``started``), rank 6's host ran ahead (#4020 ``scheduled``).  The ring buffer holds 20 entries,
  so the two early default_pg entries are partly pushed out (all of them on rank 6).
* ``vllm_tp2pp2_json`` (2.7, JSON, vLLM TP2 x PP2): both TP groups hang in all_reduce #77 with
  every member started (they agree); the PP groups hold only completed send/recv.
* ``train_v24_opmismatch`` (2.4, no nccl_version / thread fields, training job): at #310 rank 2
  is in a broadcast while ranks 0 and 1 are in all_reduce; rank 3 left no dump.  Files are named
  ``trainjob-node3_nccl_trace_rank_<r>`` (host and rank in one name).
* ``healthy_v210`` (2.10, ``.pkl``): four ranks, everything completed up to #512; PG IDs equal the
  group names here, as in many SGLang dumps.

``pg_status`` is keyed by the process-local PG ID (the entries' ``pg_id``), as torch keys it.
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "fr"
T0 = int(datetime(2026, 3, 14, 9, 26, 59, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
SITE = "/usr/local/lib/python3.12/dist-packages"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"
LOGGER = f"{SITE}/torch/distributed/c10d_logger.py"
SGL = f"{SITE}/sglang/srt"
VLLM = f"{SITE}/vllm"


def fr(name: str, filename: str, line: int) -> dict:
    return {"name": name, "filename": filename, "line": line}


SCHED_TAIL = [
    fr("event_loop_overlap", f"{SGL}/managers/scheduler.py", 1042),
    fr("run_scheduler_process", f"{SGL}/managers/scheduler.py", 2771),
]
FRAMES = {
    "all_reduce": [
        fr("all_reduce", C10D, 2806),
        fr("wrapper", LOGGER, 81),
        fr("_all_reduce_out_place", f"{SGL}/distributed/parallel_state.py", 512),
        fr("all_reduce", f"{SGL}/distributed/parallel_state.py", 468),
        fr("tensor_model_parallel_all_reduce", f"{SGL}/distributed/communication_op.py", 14),
        fr("forward", f"{SGL}/layers/linear.py", 1385),
        fr("forward", f"{SGL}/models/llama.py", 312),
        fr("forward_decode", f"{SGL}/model_executor/model_runner.py", 1823),
        fr("run_batch", f"{SGL}/managers/scheduler.py", 1893),
    ]
    + SCHED_TAIL,
    "broadcast": [
        fr("broadcast", C10D, 2711),
        fr("wrapper", LOGGER, 81),
        fr("broadcast_pyobj", f"{SGL}/utils/common.py", 1120),
        fr("recv_requests", f"{SGL}/managers/scheduler.py", 1187),
    ]
    + SCHED_TAIL,
    "_all_gather_base": [
        fr("all_gather_into_tensor", C10D, 3800),
        fr("wrapper", LOGGER, 81),
        fr("_all_gather_into_tensor", f"{SGL}/distributed/parallel_state.py", 640),
        fr("all_gather", f"{SGL}/distributed/parallel_state.py", 688),
        fr("tensor_model_parallel_all_gather", f"{SGL}/distributed/communication_op.py", 19),
        fr("_get_logits", f"{SGL}/layers/logits_processor.py", 520),
        fr("forward", f"{SGL}/layers/logits_processor.py", 400),
        fr("run_batch", f"{SGL}/managers/scheduler.py", 1893),
    ]
    + SCHED_TAIL,
    "barrier": [
        fr("barrier", C10D, 4400),
        fr("wrapper", LOGGER, 81),
        fr("initialize_model_parallel", f"{SGL}/distributed/parallel_state.py", 1402),
        fr("init_torch_distributed", f"{SGL}/model_executor/model_runner.py", 702),
    ],
}


def sglang_op(seq: int) -> str:
    return "broadcast" if seq % 7 == 0 else "_all_gather_base" if seq % 7 == 6 else "all_reduce"


def sizes(op: str, seq: int) -> list[list[int]]:
    tokens = random.Random(seq).randint(1, 512)  # the same batch on every rank
    return {"broadcast": [[1]], "_all_gather_base": [[tokens, 1024]], "barrier": [[1]]}.get(
        op, [[tokens, 8192]]
    )


def entry(
    rank: int,
    record_id: int,
    pg_id: int,
    pg: tuple[str, str],
    seq: int,
    op: str,
    state: str,
    created: int,
    version: str,
    rng: random.Random,
    frames: list[dict] | None,
    size: list[list[int]],
    p2p_seq: int = 0,
    op_id: int | None = None,
) -> dict:
    started = created + rng.randint(40_000, 400_000) if state in ("started", "completed") else None
    completed = started + rng.randint(500_000, 3_000_000) if state == "completed" and started else None
    e = {
        "frames": frames if frames is not None else [],
        "record_id": record_id,
        "pg_id": pg_id,
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq,
        "op_id": op_id if op_id is not None else seq,
        "profiling_name": f"nccl:{op}",
        "time_created_ns": created,
        "duration_ms": None,
        "input_sizes": size,
        "input_dtypes": ["Float"] * len(size),
        "output_sizes": size,
        "output_dtypes": ["Float"] * len(size),
        "state": state,
        "time_discovered_started_ns": started,
        "time_discovered_completed_ns": completed,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": op.startswith(("send", "recv")),
    }
    if version == "2.10":
        e["thread_id"] = str(140230000000000 + rank * 4096)
        e["thread_name"] = "sglang::schedul"
    return e


def status(enqueued: int, started: int, completed: int) -> dict:
    return {
        "last_enqueued_collective": enqueued,
        "last_started_collective": started,
        "last_completed_collective": completed,
    }


def sglang_tp8_behind() -> None:
    d = OUT / "sglang_tp8_behind"
    d.mkdir(parents=True)
    ranks = "[0, 1, 2, 3, 4, 5, 6, 7]"
    config = {
        "0": {"name": "0", "desc": "default_pg", "ranks": ranks},
        "1": {"name": "1", "desc": "tp:0", "ranks": ranks},
    }
    for rank in range(8):
        rng = random.Random(1000 + rank)
        last = {5: 4018, 6: 4020}.get(rank, 4019)
        raw = []
        for seq, op in ((1, "broadcast"), (2, "barrier")):
            raw.append(
                (0, ("0", "default_pg"), seq, op, "completed", T0 - 3_600_000_000_000 + seq * 9_000_000_000)
            )
        for seq in range(4001, last + 1):
            state = (
                "completed" if seq <= 4018 else "started" if seq == 4019 else "scheduled"
            )  # 4020: host ahead
            if rank == 1 and seq == 4018:
                state = "started"  # completion not yet seen by the watchdog
            created = T0 + (seq - 4001) * 17_300_000 + rng.randint(0, 400_000)
            raw.append((2, ("1", "tp:0"), seq, sglang_op(seq), state, created))
        entries = [
            entry(rank, rid, pg_id, pg, seq, op, state, created, "2.10", rng, FRAMES[op], sizes(op, seq))
            for rid, (pg_id, pg, seq, op, state, created) in enumerate(raw)
        ][-20:]  # ring buffer of 20
        started = (
            max(e["collective_seq_id"] for e in entries if e["state"] == "started" and e["pg_id"] == 2)
            if rank != 5
            else 4018
        )
        completed = {1: 4017, 5: 4018}.get(rank, 4018)
        dump = {
            "version": "2.10",
            "pg_config": config,
            "comm_lib_version": "2.27.3",
            "pg_status": {"0": status(2, 2, 2), "2": status(last, started, completed)},  # keyed by PG ID
            "entries": entries,
        }
        (d / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def vllm_tp2pp2_json() -> None:
    d = OUT / "vllm_tp2pp2_json"
    d.mkdir(parents=True)
    tp = {0: ("1", "[0, 1]"), 1: ("1", "[0, 1]"), 2: ("2", "[2, 3]"), 3: ("2", "[2, 3]")}
    pp = {0: ("3", "[0, 2]"), 2: ("3", "[0, 2]"), 1: ("4", "[1, 3]"), 3: ("4", "[1, 3]")}
    for rank in range(4):
        rng = random.Random(2000 + rank)
        tp_name, tp_ranks = tp[rank]
        pp_name, pp_ranks = pp[rank]
        config = {
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
            tp_name: {"name": tp_name, "desc": "undefined", "ranks": tp_ranks},
            pp_name: {"name": pp_name, "desc": "undefined", "ranks": pp_ranks},
        }
        entries = []
        first_stage = rank in (0, 1)
        peer = rank + 2 if first_stage else rank - 2
        for k in range(1, 4):  # pipeline hand-offs: done before the hang
            op = f"send {rank}->{peer}" if first_stage else f"recv {rank}<-{peer}"
            created = T0 + k * 50_000_000 + rng.randint(0, 300_000)
            e = entry(
                rank,
                len(entries),
                3 if first_stage else 4,
                (pp_name, "undefined"),
                0,
                op,
                "completed",
                created,
                "2.7",
                rng,
                None,
                [[4096, 8192]],
                p2p_seq=k,
                op_id=k,
            )
            entries.append(e)
        for seq in range(74, 78):
            state = "started" if seq == 77 else "completed"
            created = T0 + 200_000_000 + seq * 9_000_000 + rng.randint(0, 300_000)
            entries.append(
                entry(
                    rank,
                    len(entries),
                    1,
                    (tp_name, "undefined"),
                    seq,
                    "all_reduce",
                    state,
                    created,
                    "2.7",
                    rng,
                    None,
                    sizes("all_reduce", seq),
                    op_id=seq + 3,
                )
            )
        for e in entries:  # the JSON form: no frames, unknown times are 0
            del e["frames"]
            for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                e[k] = e[k] or 0
        dump = {
            "version": "2.7",
            "nccl_version": "2.21.5",
            "pg_config": config,
            "pg_status": {  # keyed by PG ID, values as text
                "1": {k: str(v) for k, v in status(77, 77, 76).items()},
                "3" if first_stage else "4": {k: "0" for k in status(0, 0, 0)},
            },
            "entries": entries,
        }
        (d / f"nccl_trace_rank_{rank}.json").write_text(json.dumps(dump), encoding="utf-8")


TRAIN_FRAMES = {
    "all_reduce": [
        fr("all_reduce", C10D, 2501),
        fr("wrapper", LOGGER, 79),
        fr("allreduce_hook", f"{SITE}/torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py", 41),
        fr("backward", f"{SITE}/torch/_tensor.py", 581),
        fr("train_step", "/workspace/sft/train.py", 214),
        fr("main", "/workspace/sft/train.py", 388),
        fr("<module>", "/workspace/sft/train.py", 402),
    ],
    "broadcast": [
        fr("broadcast", C10D, 2411),
        fr("wrapper", LOGGER, 79),
        fr("_sync_buffers", f"{SITE}/torch/nn/parallel/distributed.py", 2011),
        fr("forward", f"{SITE}/torch/nn/parallel/distributed.py", 1639),
        fr("train_step", "/workspace/sft/train.py", 201),
        fr("main", "/workspace/sft/train.py", 388),
        fr("<module>", "/workspace/sft/train.py", 402),
    ],
}


def train_v24_opmismatch() -> None:
    d = OUT / "train_v24_opmismatch"
    d.mkdir(parents=True)
    for rank in range(3):  # rank 3 left no dump
        rng = random.Random(3000 + rank)
        entries = []
        for seq in range(301, 311):
            op = "broadcast" if seq % 5 == 0 else "all_reduce"
            if seq == 310:
                op = "broadcast" if rank == 2 else "all_reduce"
            state = "started" if seq == 310 else "completed"
            size = [[1]] if op == "broadcast" else [[25557032]]
            created = T0 + seq * 1_400_000_000 + rng.randint(0, 2_000_000)
            e = entry(
                rank,
                seq - 1,
                0,
                ("0", "default_pg"),
                seq,
                op,
                state,
                created,
                "2.4",
                rng,
                TRAIN_FRAMES[op],
                size,
            )
            del e["duration_ms"]
            entries.append(e)
        dump = {
            "version": "2.4",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
            "pg_status": {"0": status(310, 310, 309)},
            "entries": entries,
        }
        (d / f"trainjob-node3_nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def healthy_v210() -> None:
    d = OUT / "healthy_v210"
    d.mkdir(parents=True)
    config = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
        "1": {"name": "1", "desc": "tp:0", "ranks": "[0, 1, 2, 3]"},
    }
    for rank in range(4):
        rng = random.Random(4000 + rank)
        entries = [
            entry(
                rank,
                i,
                1,  # PG ID and name coincide here, as in most SGLang dumps
                ("1", "tp:0"),
                seq,
                sglang_op(seq),
                "completed",
                T0 + seq * 20_000_000 + rng.randint(0, 300_000),
                "2.10",
                rng,
                FRAMES[sglang_op(seq)],
                sizes(sglang_op(seq), seq),
            )
            for i, seq in enumerate(range(505, 513))
        ]
        dump = {
            "version": "2.10",
            "pg_config": config,
            "comm_lib_version": "2.27.3",
            "pg_status": {"0": status(1, 1, 1), "1": status(512, 512, 512)},
            "entries": entries,
        }
        (d / f"nccl_trace_rank_{rank}.pkl").write_bytes(pickle.dumps(dump, protocol=2))


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    sglang_tp8_behind()
    vllm_tp2pp2_json()
    train_v24_opmismatch()
    healthy_v210()


if __name__ == "__main__":
    main()
