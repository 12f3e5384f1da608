"""Generate ``faulthandler_chars.txt`` (deterministic): ``python generate.py``.

Two scheduler processes hit a bus error at the same moment and both dump into the one stderr; their
writes interleave character by character (a few bytes each, seeded).  The first rank writes alone for
its first lines, so those frames are certain; after the second rank's ``Fatal Python error`` nothing
is.  The other files of this folder are written by hand (see README.md).
"""

from __future__ import annotations

import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

RANK_A = """Fatal Python error: Bus error

Thread 0x00007e5b972ba640 (most recent call first):
  File "/usr/lib/python3.12/selectors.py", line 468 in select
  File "/usr/lib/python3.12/asyncio/base_events.py", line 1952 in _run_once
  File "/usr/lib/python3.12/threading.py", line 1010 in run
  File "/usr/lib/python3.12/threading.py", line 1073 in _bootstrap_inner
  File "/usr/lib/python3.12/threading.py", line 1030 in _bootstrap

Current thread 0x00007e8cfe679640 (most recent call first):
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py", line 1634 in invoke_fused_moe_kernel
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py", line 1560 in forward_decode
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 1962 in run_batch

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""

RANK_B = """Fatal Python error: Bus error

Thread 0x00007ec20e7c3640 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 359 in wait
  File "/usr/lib/python3.12/queue.py", line 171 in get
  File "/usr/lib/python3.12/threading.py", line 1010 in run
  File "/usr/lib/python3.12/threading.py", line 1073 in _bootstrap_inner
  File "/usr/lib/python3.12/threading.py", line 1030 in _bootstrap

Current thread 0x00007e5a38bab4c0 (most recent call first):
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 650 in replay
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py", line 1560 in forward_decode

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def interleave(a: str, b: str, alone: int, rng: random.Random) -> str:
    """``a``'s first ``alone`` characters, then both writers a few characters at a time."""
    out, i, j = [a[:alone]], alone, 0
    while i < len(a) or j < len(b):
        if j < len(b) and (i >= len(a) or rng.random() < 0.5):
            n = rng.randint(1, 9)
            out.append(b[j:j + n])
            j += n
        else:
            n = rng.randint(1, 9)
            out.append(a[i:i + n])
            i += n
    return "".join(out)


if __name__ == "__main__":
    # the first rank's preamble, its first thread header and two frames go out before the second starts
    alone = RANK_A.index("  File", RANK_A.index("line 468")) + 40
    (HERE / "faulthandler_chars.txt").write_text(interleave(RANK_A, RANK_B, alone, random.Random(11)))
