#!/usr/bin/env python3
"""Write ``ncclras -f json`` reports (NCCL 2.28+) for the situations of the hand-written text reports in ``../ras``

    python3 tests/data/collectives/ras_json/generate_json.py

The document is built with the calls and format strings of NCCL's ``src/ras/client_support.cc``
(``jsonWriteHeader``, ``jsonStartCommunicator``, ``jsonWriteRankData``, ``jsonStartMissingRanks``,
``jsonWriteMissingRank``, ``jsonEndCommunicator``, ``jsonWriteFooter``), so the files are byte for byte
what the client prints: NCCL's indentation, ``"hash": "0x%lx"`` (no leading zeros, where the text prints
``%016lx``), an empty line inside an empty ``missing_ranks`` array.  One counter per collective type
(``ncclFuncToString`` of the first ``NCCL_NUM_FUNCTIONS``: Broadcast, Reduce, AllGather, ReduceScatter,
AllReduce).

* ``v2.28_mismatch.json`` = ``../ras/v2.26_mismatch.txt``: communicator 9e0f2d41c8b7a613 (8 ranks on one node):
  AllReduce 733120 on six ranks, rank 2 at 733119, rank 6 at 733121; Broadcast 20418, rank 2 at 20417;
  a second communicator (0a61c3e5d2f7b908, printed 0xa61c3e5d2f7b908) where every count agrees;
* ``v2.28_dead_rank.json`` = ``../ras/dead_rank.txt``: communicator 3f7d9a0c5e21b844 of 8 ranks on two nodes,
  rank 6 missing, its process 51234 on node 10.20.4.13 (GPU 2) considered dead; one collection timeout;
* ``v2.28_healthy.json``: two nodes of four, one communicator, every count equal.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
OPS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


class Out:
    """rasOutAppend."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def __call__(self, s: str) -> None:
        self.parts.append(s)

    def text(self) -> str:
        return "".join(self.parts)


def b(v: bool) -> str:
    return "true" if v else "false"


def report(comms: list[dict], timeouts: int = 0, secs: float = 0.42) -> str:
    o = Out()
    o("{\n")
    o('  "nccl_version": "2.28.7",\n')
    o('  "cuda_runtime_version": 12090,\n')
    o('  "cuda_driver_version": 12090,\n')
    o('  "timestamp": "2026-03-14 09:27:05",\n')
    o(f'  "communicators_count": {len(comms)},\n')
    o('  "communicators": [\n')
    for ci, c in enumerate(comms):
        if ci:
            o(",\n")
        o("    {\n")
        o(f'      "hash": "0x{c["hash"]:x}",\n')
        o(f'      "secondary_hash": "0x{c["host_hash"]:x}:0x{c["pid_hash"]:x}",\n')
        o(f'      "size": {c["size"]},\n')
        o(f'      "ranks_count": {len(c["ranks"])},\n')
        o(f'      "missing_ranks_count": {len(c["missing"])},\n')
        o('      "ranks": [\n')
        for ri, r in enumerate(c["ranks"]):
            if ri:
                o(",\n")
            o("        {\n")
            o(f'          "rank": {r["rank"]},\n')
            o(f'          "host": "{r["host"]}",\n')
            o(f'          "pid": {r["pid"]},\n')
            o(f'          "cuda_dev": {r["gpu"]},\n')
            o(f'          "nvml_dev": {r["gpu"]},\n')
            o('          "status": {\n')
            o('            "init_state": 0,\n')
            o('            "async_error": 0,\n')
            o(f'            "finalize_called": {b(False)},\n')
            o(f'            "destroy_flag": {b(False)},\n')
            o(f'            "abort_flag": {b(False)}\n')
            o("          },\n")
            o('          "collective_counts": {\n')
            for k, op in enumerate(OPS):
                o(f'            "{op}": {r["counts"].get(op, 0)}')
                if k < len(OPS) - 1:
                    o(",")
                o("\n")
            o("          }\n")
            o("        }")
        o("\n      ],\n")
        o('      "missing_ranks": [\n')
        for mi, m in enumerate(c["missing"]):
            if mi:
                o(",\n")
            o("        {\n")
            o(f'          "rank": {m["rank"]},\n')
            o(f'          "host": "{m["host"]}",\n')
            o(f'          "pid": {m["pid"]},\n')
            o(f'          "cuda_dev": {m["gpu"]},\n')
            o(f'          "nvml_dev": {m["gpu"]},\n')
            o('          "status": {\n')
            o(f'            "unresponsive": {b(m["unresponsive"])},\n')
            o(f'            "considered_dead": {b(m["dead"])}\n')
            o("          }\n")
            o("        }")
        o("\n      ]\n")
        o("    }")
    o("\n  ],\n")
    o('  "ras": {\n')
    o(f'    "collection_time_sec": {secs:.3f},\n')
    o(f'    "timeouts_count": {timeouts}\n')
    o("  }\n")
    o("}\n")
    return o.text()


def rank(r: int, host: str, pid: int, gpu: int, **counts: int) -> dict:
    return {"rank": r, "host": host, "pid": pid, "gpu": gpu, "counts": counts}


def mismatch() -> str:
    node = "10.15.83.92"
    ranks = []
    for r in range(8):
        ar = {2: 733119, 6: 733121}.get(r, 733120)
        bc = 20417 if r == 2 else 20418
        ranks.append(rank(r, node, 412005 + r, r, Broadcast=bc, AllGather=1204, AllReduce=ar))
    other = [rank(r, node, 412005 + r, r, Broadcast=3, AllReduce=96) for r in range(8)]
    return report([
        {"hash": 0x9E0F2D41C8B7A613, "host_hash": 0x51D2C3A4B5E6F708, "pid_hash": 0x64A1B2C3, "size": 8,
         "ranks": ranks, "missing": []},
        {"hash": 0x0A61C3E5D2F7B908, "host_hash": 0x51D2C3A4B5E6F708, "pid_hash": 0x64A1B2C3, "size": 8,
         "ranks": other, "missing": []},
    ])


def dead_rank() -> str:
    pids = {0: 51201, 1: 51202, 2: 51203, 3: 51204, 4: 51231, 5: 51232, 6: 51234, 7: 51235}
    ranks = [rank(r, "10.20.4.12" if r < 4 else "10.20.4.13", pids[r], r % 4, AllReduce=48213, Broadcast=12)
             for r in range(8) if r != 6]
    missing = [{"rank": 6, "host": "10.20.4.13", "pid": 51234, "gpu": 2, "unresponsive": True, "dead": True}]
    return report([{"hash": 0x3F7D9A0C5E21B844, "host_hash": 0x7E11D0C2A3B4C5D6, "pid_hash": 0x1C2D3E4F,
                    "size": 8, "ranks": ranks, "missing": missing}], timeouts=1, secs=5.0)


def healthy() -> str:
    ranks = [rank(r, "10.20.4.12" if r < 4 else "10.20.4.13", 51201 + r, r % 4, AllReduce=90210, AllGather=4410,
                  Broadcast=7) for r in range(8)]
    return report([{"hash": 0xC4E2A0F1B3D5E7F9, "host_hash": 0x7E11D0C2A3B4C5D6, "pid_hash": 0x1C2D3E4F,
                    "size": 8, "ranks": ranks, "missing": []}])


def main() -> None:
    (HERE / "v2.28_mismatch.json").write_text(mismatch(), encoding="utf-8")
    (HERE / "v2.28_dead_rank.json").write_text(dead_rank(), encoding="utf-8")
    (HERE / "v2.28_healthy.json").write_text(healthy(), encoding="utf-8")


if __name__ == "__main__":
    main()
