#!/usr/bin/env python3
"""Write NCCL-shaped Flight Recorder dumps and what torch's own analyzer prints about them (run from anywhere).

    pip install tabulate            # fr_trace's tables (-j, -v) need it; without it '-j' crashes
    python3 tests/data/collectives/fr_trace/generate.py

The dumps (``dumps/<set>/nccl_trace_rank_<r>``) are built with ``../generate.py``'s entry layout (2.10, NCCL
profiling names and lifecycle: ``fr_trace`` crashes on gloo dumps, see docs/fr_trace-vs-hangforensics.md);
``sglang_tp8_behind`` is ``../fr/sglang_tp8_behind``.  Each ``<set>.<mode>.txt`` is the analyzer's stdout and
stderr as it printed them (``<set>.txt`` for no flag) (``python -m torch.distributed.flight_recorder.fr_trace DIR -p nccl_trace_rank_``
plus the mode's flags), unedited: the ``-v`` files carry its timing line ("loaded 4 files in …s"), so a
re-run differs there.  Written with torch 2.13.0+cpu and tabulate 0.10.0.

Sets (a training job's default group, 4 ranks, collectives #301-#310; #310 is the one that hangs):

* ``opmismatch4``: rank 2 broadcasts at #310 while ranks 0, 1, 3 all_reduce;
* ``missing4``: rank 3 completed #309 and never enqueued #310 (its dump has no #310);
* ``sizes4``: rank 1's all_reduce #310 has input [[25557031]], the others [[25557032]];
* ``incomplete4``: as ``opmismatch4`` with rank 3's dump missing (``--allow-incomplete-ranks``).

Modes: ``txt`` (no flag), ``v`` (``-v``: the Groups / Memberships / Collectives / NCCLCalls tables),
``v.notab`` (``-v`` without tabulate: their Python reprs), ``j`` (``-j``: entries side by side) and
``jv`` (``-j -v``: with every entry's sequence number, group and time).
"""

from __future__ import annotations

import pickle
import random
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import generate as fr_gen  # noqa: E402  (../generate.py: the dumps' entry layout)

DUMPS = HERE / "dumps"
PREFIX = "nccl_trace_rank_"
RUNS = {
    "opmismatch4": ["txt", "v", "v.notab", "j", "jv"],
    "missing4": ["txt", "j"],
    "sizes4": ["txt"],
    "incomplete4": ["txt"],
    "sglang_tp8_behind": ["txt"],
}
FLAGS = {"txt": [], "v": ["-v"], "v.notab": ["-v"], "j": ["-j"], "jv": ["-j", "-v"]}
# fr_trace imports tabulate optionally: hide it for the 'notab' mode
NO_TABULATE = "import runpy, sys; sys.modules['tabulate'] = None; " \
              "runpy.run_module('torch.distributed.flight_recorder.fr_trace', run_name='__main__')"


def train(name: str, n: int = 4, odd: int | None = None, behind: int | None = None, size_odd: int | None = None,
          no_dump: tuple[int, ...] = ()) -> None:
    d = DUMPS / name
    d.mkdir(parents=True)
    for rank in range(n):
        if rank in no_dump:
            continue
        rng = random.Random(3000 + rank)
        last = 309 if rank == behind else 310
        entries = []
        for seq in range(301, last + 1):
            op = "broadcast" if seq % 5 == 0 else "all_reduce"
            if seq == 310:
                op = "broadcast" if rank == odd else "all_reduce"
            state = "started" if seq == 310 else "completed"
            size = [[1]] if op == "broadcast" else [[25557031 if (seq == 310 and rank == size_odd) else 25557032]]
            created = fr_gen.T0 + seq * 1_400_000_000 + rng.randint(0, 2_000_000)
            entries.append(fr_gen.entry(rank, seq - 1, 0, ("0", "default_pg"), seq, op, state, created, "2.10", rng,
                                        fr_gen.TRAIN_FRAMES[op], size))
        dump = {"version": "2.10", "comm_lib_version": "2.27.3",
                "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(n)))}},
                "pg_status": {"0": fr_gen.status(last, last, 309)}, "entries": entries}
        (d / f"{PREFIX}{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def analyze(folder: Path, mode: str, out: Path) -> None:
    extra = ["--allow-incomplete-ranks"] if folder.name == "incomplete4" else []
    args = [str(folder), "-p", PREFIX, *FLAGS[mode], *extra]
    cmd = [sys.executable, "-c", NO_TABULATE, *args] if mode.endswith("notab") else \
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    out.write_text(p.stderr + p.stdout, encoding="utf-8")     # the analyzer logs to stderr


def main() -> None:
    try:
        import tabulate  # noqa: F401
    except ModuleNotFoundError:
        sys.exit("fr_trace's -j and -v tables need tabulate: pip install tabulate")
    if DUMPS.exists():
        shutil.rmtree(DUMPS)
    train("opmismatch4", odd=2)
    train("missing4", behind=3)
    train("sizes4", size_odd=1)
    train("incomplete4", odd=2, no_dump=(3,))
    for name, modes in RUNS.items():
        folder = HERE.parent / "fr" / name if name == "sglang_tp8_behind" else DUMPS / name
        for mode in modes:
            analyze(folder, mode, HERE / (f"{name}.txt" if mode == "txt" else f"{name}.{mode}.txt"))


if __name__ == "__main__":
    main()
