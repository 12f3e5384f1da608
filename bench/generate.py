"""Synthetic evidence for the benchmark: one large batch-line-heavy SGLang log, and a fleet of engines.

    python bench/generate.py big OUT.log --mb 200
    python bench/generate.py fleet OUT_DIR --engines 300 --mb-per-engine 1
    python bench/generate.py mixed OUT_DIR       # ~216 engines of every evidence kind, ~300 MB
    python bench/generate.py mixed OUT_DIR --forms   # ... its busy logs through collectors, Ray, vLLM
    python bench/generate.py mixed OUT_DIR --dense   # ~216 engines, each a busy log beside evidence of every kind
    python bench/generate.py wrap IN.log OUT.log --envelope kubectl   # a log as a collector hands it over
    python bench/generate.py vllm OUT.log --mb 100    # a busy vLLM API server's log, relayed by Ray
    python bench/generate.py job OUT.log --mb 30      # a torch.distributed training job's step log (8 ranks)

Deterministic (seeded).  The big log is what a busy TP8 engine prints over
hours: Prefill/Decode batch lines from TP0 (and, with --all-ranks, every
rank), uvicorn access lines, /health probes, and now and then other records.
Fleet engines are healthy, idle or stalled (symm-mem style with a watchdog
dump) so a scan has incidents to find.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

START = datetime(2026, 3, 1, 0, 0, 0)


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def _server_args(tp: int) -> str:
    return (f"server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size={tp}, dp_size=1, pp_size=1, "
            f"ep_size=1, enable_symm_mem=True, watchdog_timeout=300, decode_log_interval=40, base_gpu_id=0, "
            f"gpu_id_step=1)")


def busy_lines(rng: random.Random, t: datetime, seconds: float, ranks: list[str]):
    """Yield (t, line) for a busy stretch: ~8 batch lines/s per logging rank, POSTs, probes."""
    end = t + timedelta(seconds=seconds)
    port = 30000
    while t < end:
        for r in ranks:
            if rng.random() < 0.25:
                yield t, (f"[{_ts(t)} {r}] Prefill batch, #new-seq: 1, #new-token: {rng.randint(50, 3000)}, "
                          f"#cached-token: {rng.randint(0, 1500)}, token usage: 0.0{rng.randint(1, 9)}, "
                          f"#running-req: {rng.randint(1, 40)}, #queue-req: 0, cuda graph: False, "
                          f"input throughput (token/s): {rng.uniform(300, 15000):.2f}")
            else:
                n = rng.randint(1, 48)
                yield t, (f"[{_ts(t)} {r}] Decode batch, #running-req: {n}, #token: {n * rng.randint(300, 900)}, "
                          f"token usage: 0.0{rng.randint(1, 9)}, accept len: 2.5{rng.randint(0, 9)}, "
                          f"accept rate: 0.5{rng.randint(0, 9)}, cuda graph: True, "
                          f"gen throughput (token/s): {rng.uniform(200, 2500):.2f}, #queue-req: 0")
        if rng.random() < 0.5:
            port = port + 1 if port < 65000 else 30000
            yield t, f'[{_ts(t)}] INFO:     10.{rng.randint(0, 40)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
        if t.second % 10 == 0 and t.microsecond < 125000:
            yield t, f'[{_ts(t)}] INFO:     10.0.5.126:{port} - "GET /health HTTP/1.1" 200 OK'
        t += timedelta(seconds=0.125)


# Other messages of a busy server's log (what a real one holds between its batch and access lines, with a
# prefix of its own), for ``big --other``.
OTHER_MESSAGES = (
    "Cache flushed successfully!",
    "Receive: obj=GenerateReqInput(text=None, input_ids=None, sampling_params={{'temperature': 0.7, "
    "'max_new_tokens': 512}}, rid='{rid}', return_logprob=False, stream=True)",
    "Finish: obj=GenerateReqInput(rid='{rid}'), out={{'meta_info': {{'id': '{rid}', 'finish_reason': "
    "{{'type': 'stop'}}, 'prompt_tokens': 812, 'completion_tokens': 233}}}}",
    "Registering 4096 cuda graph addresses",
    "WARNING: Context length is longer than the model's max position embeddings",
)


def write_big(out: Path, mb: float, all_ranks: bool = False, seed: int = 7, other: float = 0.0) -> None:
    """A busy log of ``mb`` MB; ``other``: the share of lines that are other messages (0: nearly none)."""
    rng = random.Random(seed)
    ranks = [f"TP{i}" for i in range(8)] if all_ranks else ["TP0"]
    target = int(mb * 1e6)
    t = START
    written = 0
    with out.open("w", encoding="utf-8", buffering=1 << 20) as f:
        head = f"[{_ts(t)}] {_server_args(8)}\n"
        f.write(head)
        written += len(head)
        while written < target:
            for at, line in busy_lines(rng, t, 60, ranks):
                f.write(line + "\n")
                written += len(line) + 1
                if other and rng.random() < other:
                    note = (f"[{_ts(at)} {rng.choice(ranks)}] " + rng.choice(OTHER_MESSAGES).format(
                        rid=f"{rng.getrandbits(128):032x}") + "\n")
                    f.write(note)
                    written += len(note)
            t += timedelta(seconds=60)
            note = f"[{_ts(t)} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.7 -> 0.9\n"
            f.write(note)
            written += len(note)


def write_engine(folder: Path, kind: str, mb: float, seed: int) -> None:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    t = START + timedelta(hours=rng.randint(0, 48))
    lines = [f"[{_ts(t)}] {_server_args(4)}"]
    lines += [f"[{_ts(t)} TP{r}] Init torch distributed ends. elapsed=3.2 s, mem usage=0.7 GB" for r in range(4)]
    lines.append(f"[{_ts(t)}] The server is fired up and ready to roll!")
    target = int(mb * 1e6)
    size = sum(len(x) for x in lines)
    for tt, line in busy_lines(rng, t, 10**7, ["TP0"]):
        lines.append(line)
        size += len(line) + 1
        t = tt
        if size >= target:
            break
    if kind == "stalled":
        onset = t
        for k in range(1, 32):
            s = onset + timedelta(seconds=10 * k)
            lines.append(f'[{_ts(s)}] INFO:     10.1.1.1:{40000 + k} - "POST /generate HTTP/1.1" 200 OK')
            lines.append(f'[{_ts(s)}] INFO:     10.0.5.126:{41000 + k} - "GET /health HTTP/1.1" 200 OK')
        fire = onset + timedelta(seconds=315)
        for r in range(4):
            lines += [f"[{_ts(fire)} TP{r}] Scheduler debug info:", "scheduler.cur_batch.batch_size()=6",
                      "self.max_total_num_tokens=372965, available_size=261871, evictable_size=105150, "
                      "protected_size=0, session_held=0",
                      f"[{_ts(fire)} TP{r}] Pyspy dump for PID {1000 + r}:",
                      f"Process {1000 + r}: sglang::scheduler_TP{r}", "Python v3.12.3 (/usr/bin/python3.12)", "",
                      f'Thread {1000 + r} (idle): "MainThread"', "    recvmsg (libc.so.6)",
                      "    ncclCommWindowRegister (libnccl.so.2)",
                      "    _register_segments_for_comm (sglang/srt/distributed/device_communicators/pynccl_allocator.py:417)",
                      "    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)",
                      f"[{_ts(fire)} TP{r}] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", ""]
    elif kind == "idle":
        for k in range(1, 120):
            s = t + timedelta(seconds=10 * k)
            lines.append(f'[{_ts(s)}] INFO:     10.0.5.126:{41000 + k} - "GET /health HTTP/1.1" 200 OK')
    (folder / "server.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_fleet(out: Path, engines: int, mb: float, seed: int = 11) -> None:
    rng = random.Random(seed)
    for i in range(engines):
        kind = "stalled" if i % 10 == 3 else "idle" if i % 10 == 5 else "healthy"
        write_engine(out / f"bench-{kind}-{i:04d}", kind, mb, rng.randint(0, 10**9))


REPO = Path(__file__).resolve().parents[1]
# Engine folders of every evidence kind the tests hold: SGLang releases and collectors' envelopes, stack
# dumps of every format, Flight Recorder and NCCL RAS, torch jobs, vLLM, hostile files, real pastes.
MIXED_SOURCES = ["tests/data/families/fleet", "tests/data/variants/fleet", "tests/data/stack_variants/fleet",
                 "tests/data/hostile/fleet", "tests/data/real_pastes", "../shared/examples/fleet",
                 "../shared/examples/wrapped/fleet"]


# The forms the busy engines of ``mixed --forms`` are in, in turn: as their server printed them, as a
# collector or launcher handed them over, as a release prints with SGLANG_LOG_MS=1; and vLLM servers.
FORMS = ["plain", "kubectl", "docker-json", "plain", "ray", "vllm", "ms", "compose", "plain", "cri", "vllm"]


def write_dense(out: Path, engines: int = 216, mb: float = 1.5) -> None:
    """A fleet whose every engine logs busily (``write_fleet``: ``mb`` MB each) and holds evidence of every kind
    beside its log: the engine folders of MIXED_SOURCES copied in turn into the engines (a name an engine has
    already taken with an ``x-`` before it).  Its bytes are spread over the engines, not held by a few busy
    ones as in ``write_mixed``, and an engine has several server logs, some on other nodes (the passes that
    judge engine by engine, or file by file, show here)."""
    import shutil

    write_fleet(out, engines, mb)
    corpus = [engine for src in MIXED_SOURCES if (folder := (REPO / src).resolve()).is_dir()
              for engine in sorted(p for p in folder.iterdir() if p.is_dir())]
    for k, engine in enumerate(sorted(p for p in out.iterdir() if p.is_dir())):
        source = corpus[k % len(corpus)]
        for f in sorted(p for p in source.rglob("*") if p.is_file()):
            rel = f.relative_to(source)
            if (engine / rel).exists():
                rel = rel.with_name("x-" + rel.name)
            (engine / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, engine / rel)


def write_mixed(out: Path, big_engines: int = 22, big_mb: float = 12.0, forms: bool = False) -> None:
    """A fleet of every evidence kind: each engine folder of the test corpora (and of ../shared's examples
    when present) copied under a prefix, plus ``big_engines`` generated busy logs of ``big_mb`` MB, so that
    bytes come mostly from batch-heavy logs as in a real fleet and engines mostly from small evidence.
    ``forms``: the busy logs in the FORMS in turn (a fleet's logs come through collectors and launchers, and
    some of its engines run vLLM), not all as SGLang printed them."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    for src in MIXED_SOURCES:
        folder = (REPO / src).resolve()
        if not folder.is_dir():
            continue
        prefix = folder.parent.name if folder.name == "fleet" else folder.name
        for engine in sorted(p for p in folder.iterdir() if p.is_dir()):
            shutil.copytree(engine, out / f"{prefix}-{engine.name}", dirs_exist_ok=True)
    rng = random.Random(27)
    for i in range(big_engines):
        folder = out / f"big-{i:04d}"
        write_engine(folder, "stalled" if i % 10 == 3 else "healthy", big_mb, rng.randint(0, 10**9))
        form = FORMS[i % len(FORMS)] if forms else "plain"
        log = folder / "server.log"
        if form == "vllm":
            write_vllm(log, big_mb, seed=i)
        elif form != "plain":
            tmp = folder / "printed.log"
            log.rename(tmp)
            write_wrapped(tmp, log, form)
            tmp.unlink()


# A log line printed at ``t`` (UTC; the pod's clock is UTC+8) as each collector, launcher or setting hands it
# over: a collector's prefix, Ray's process tag, docker's JSON, a terminal's colours, SGLang's milliseconds.
def _prefixed(prefix: Callable[[datetime], str]) -> Callable[[datetime, str], str]:
    return lambda t, line: prefix(t) + line


ENVELOPES: dict[str, Callable[[datetime, str], str]] = {
    "kubectl": _prefixed(lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z "),            # kubectl --timestamps
    "cri": _prefixed(lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z stderr F "),        # a containerd pod file
    "syslog": _prefixed(lambda t: "<14>1 " + t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z gpu-node-7 sglang 4242 - - "),
    "journald": _prefixed(lambda t: t.strftime("%Y-%m-%dT%H:%M:%S") + "+0000 gpu-node-7 python3[4121]: "),
    "journald-short": _prefixed(lambda t: t.strftime("%b %d %H:%M:%S") + " gpu-node-7 python3[4121]: "),
    "docker-json": lambda t, line: json.dumps({"log": line + "\n", "stream": "stderr",
                                               "time": t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"},
                                              separators=(",", ":")),
    "compose": _prefixed(lambda t: "sglang-1  | "),                                          # docker compose logs
    "ray": _prefixed(lambda t: "(SGLangEngine pid=4242) "),                                  # relayed by Ray
    "ray-console": _prefixed(lambda t: "\x1b[36m(SGLangEngine pid=4242)\x1b[0m "),          # Ray's own console
    "ansi": lambda t, line: "\x1b[32m" + line[:21] + "\x1b[0m" + line[21:],                  # a terminal's colours
    "ms": lambda t, line: re.sub(r"^(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?=[\] ])", r"\1.123", line),  # SGLANG_LOG_MS=1
}


def write_wrapped(src: Path, out: Path, envelope: str) -> None:
    """``src`` as a collector (or launcher, or setting) hands it over: every line in ``envelope``'s form, timed
    1 ms apart from the log's start (a collector's clock, not the payload's)."""
    form = ENVELOPES[envelope]
    t = START - timedelta(hours=8)
    step = timedelta(milliseconds=1)
    with src.open(encoding="utf-8") as f, out.open("w", encoding="utf-8") as w:
        for line in f:
            w.write(form(t, line.rstrip("\n")) + "\n")
            t += step


def write_vllm(out: Path, mb: float, seed: int = 5) -> None:
    """A busy vLLM V1 API server's log of ``mb`` MB relayed by Ray (sglang-formats.md 9): a stats line every
    10 s, an access line per request (50 a second) without a time of its own."""
    rng = random.Random(seed)
    t = START
    with out.open("w", encoding="utf-8") as w:
        w.write(f"(APIServer pid=3164) INFO {t:%m-%d %H:%M:%S} [api_server.py:1885] vLLM API server version 0.11.0\n")
        size, k = 0, 0
        while size < mb * 1e6:
            t += timedelta(milliseconds=20)
            k += 1
            if k % 500 == 0:
                line = (f"(APIServer pid=3164) INFO {t:%m-%d %H:%M:%S} [loggers.py:259] Engine 000: Avg prompt "
                        f"throughput: {rng.uniform(100, 900):.1f} tokens/s, Avg generation throughput: "
                        f"{rng.uniform(100, 900):.1f} tokens/s, Running: {rng.randint(1, 40)} reqs, Waiting: 0 reqs, "
                        f"GPU KV cache usage: {rng.uniform(1, 60):.1f}%, Prefix cache hit rate: {rng.uniform(0, 60):.1f}%\n")
            else:
                line = (f"(APIServer pid=3164) INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(1, 250)}:"
                        f'{rng.randint(30000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
            w.write(line)
            size += len(line)


def write_job(out: Path, mb: float, seed: int = 6) -> None:
    """A torchrun job's log of ``mb`` MB: its 8 ranks' step lines (Python logging's time, the rank, the step;
    tests/data/torch_jobs' shape), a rank's eval line now and then."""
    rng = random.Random(seed)
    t = START
    with out.open("w", encoding="utf-8") as w:
        size, step = 0, 0
        while size < mb * 1e6:
            for rank in range(8):
                t += timedelta(milliseconds=rng.randint(1, 9))
                stamp = f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}"
                line = (f"{stamp} INFO [rank{rank}] step {step} done loss={1 / (step + 1):.4f}\n" if step % 500 or rank
                        else f"{stamp} INFO [rank{rank}] entering eval at step {step}\n")
                w.write(line)
                size += len(line)
            step += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("big")
    b.add_argument("out", type=Path)
    b.add_argument("--mb", type=float, default=200)
    b.add_argument("--all-ranks", action="store_true")
    b.add_argument("--other", type=float, default=0.0, help="share of lines that are other messages (0-1)")
    f = sub.add_parser("fleet")
    f.add_argument("out", type=Path)
    f.add_argument("--engines", type=int, default=300)
    f.add_argument("--mb-per-engine", type=float, default=1.0)
    m = sub.add_parser("mixed")
    m.add_argument("out", type=Path)
    m.add_argument("--forms", action="store_true", help="the busy engines' logs in FORMS (collectors, Ray, "
                   "SGLANG_LOG_MS, vLLM), not all as SGLang printed them")
    m.add_argument("--dense", action="store_true", help="every engine a busy log of its own beside the evidence "
                   "(write_dense), not a few busy engines beside the evidence's")
    w = sub.add_parser("wrap")
    w.add_argument("src", type=Path)
    w.add_argument("out", type=Path)
    w.add_argument("--envelope", choices=sorted(ENVELOPES), default="kubectl")
    v = sub.add_parser("vllm")
    v.add_argument("out", type=Path)
    v.add_argument("--mb", type=float, default=100)
    j = sub.add_parser("job")
    j.add_argument("out", type=Path)
    j.add_argument("--mb", type=float, default=30)
    a = ap.parse_args()
    if a.what == "vllm":
        write_vllm(a.out, a.mb)
    elif a.what == "job":
        write_job(a.out, a.mb)
    elif a.what == "wrap":
        write_wrapped(a.src, a.out, a.envelope)
    elif a.what == "mixed":
        write_dense(a.out) if a.dense else write_mixed(a.out, forms=a.forms)
    elif a.what == "big":
        a.out.parent.mkdir(parents=True, exist_ok=True)
        write_big(a.out, a.mb, a.all_ranks, other=a.other)
    else:
        write_fleet(a.out, a.engines, a.mb_per_engine)


if __name__ == "__main__":
    main()
