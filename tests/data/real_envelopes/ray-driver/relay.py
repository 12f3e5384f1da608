"""A Ray actor named SGLangEngine that prints an SGLang server log's lines to its stdout/stderr, as an SGLang
engine under Ray does: Ray's log monitor relays them to the driver's console, each behind the actor's tag."""
import sys
import time

import ray


@ray.remote
class SGLangEngine:
    def replay(self, lines):
        for line in lines:
            print(line, file=sys.stderr, flush=True)
        return len(lines)

if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().splitlines()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=True)
    e = SGLangEngine.remote()
    n = ray.get(e.replay.remote(lines))
    time.sleep(3)           # (the log monitor relays asynchronously)
    ray.shutdown()
