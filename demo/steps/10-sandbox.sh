# astra-sandbox: untrusted generated code in nsjail (SandboxFusion run_code), environment sessions for
# multi-turn RL on a warm pool, and the hostile-code selftest.
mkdir -p "$OUT/sandbox"

# 1. run_code requests through `astra-sandbox run`: JSONL in, SandboxFusion results out, in input order.
#    One uses a process pool (its locks live in /dev/shm: the program's own /tmp); one is hostile (reads
#    host secrets and keys, phones home) and must come back contained.
cat > "$OUT/sandbox/requests.jsonl" <<'JSONL'
{"id": "hello", "code": "print('hello from the jail')"}
{"id": "stdin", "code": "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", "stdin": "1 2 3 4"}
{"id": "pool", "code": "from concurrent.futures import ProcessPoolExecutor\nif __name__ == '__main__':\n    with ProcessPoolExecutor(2) as workers:\n        print(sum(workers.map(pow, [2, 3], [10, 2])))"}
{"id": "hostile", "code": "import os, socket\nfor path in ('/root/.ssh', '/work', '/etc/shadow'):\n    try:\n        print(path, os.listdir(path) if os.path.isdir(path) else open(path).read(20))\n    except OSError as exc:\n        print(path, 'blocked:', exc.strerror)\nprint('env:', sorted(os.environ))\ntry:\n    socket.create_connection(('127.0.0.1', 22), timeout=1)\nexcept OSError as exc:\n    print('network blocked:', exc.strerror)\nprint('uid', os.getuid())"}
{"id": "loop", "code": "while True:\n    pass", "run_timeout": 1}
{"id": "memory", "code": "hoard = [bytearray(1 << 30) for _ in range(64)]", "memory_limit_MB": 256}
JSONL
astra-sandbox run --sandbox-pool-size 2 "$OUT/sandbox/requests.jsonl" -o "$OUT/sandbox/results.jsonl"
python - "$OUT/sandbox/results.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    result = json.loads(line)
    run = result["run_result"]
    print(f"  {result['id']:<8} {result['status']:<8} {run['status']:<20} {run['stdout'].strip()[:150]!r}")
PY

# 2. An environment session: the bundled sample shop, the same calls in two episodes on one warm worker.
#    State persists within an episode (the cart, the order) and is gone in the next.
cat > "$OUT/sandbox/calls.jsonl" <<'JSONL'
{"name": "add_to_cart", "arguments": {"product": "bread", "quantity": 2}}
{"name": "checkout"}
{"name": "add_to_cart", "arguments": {"product": "bread", "quantity": 2}}
{"name": "teleport", "arguments": {}}
{"state": true}
JSONL
astra-sandbox session --episodes 2 --calls "$OUT/sandbox/calls.jsonl" > "$OUT/sandbox/session.jsonl"
python - "$OUT/sandbox/session.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    step = json.loads(line)
    shown = json.dumps(step["state"]["INVENTORY"]["bread"]) if "state" in step else f"{step['kind']:<13} {step['output'][:90]}"
    print(f"  episode {step['episode']} call {step['call']} {step.get('name', 'state'):<12} {shown}")
PY

# 3. Every hostile snippet of the security suite, each checked for containment.
astra-sandbox selftest 2> "$OUT/sandbox/selftest.log" | tee "$OUT/sandbox/selftest.txt" | tail -1
tail -1 "$OUT/sandbox/selftest.log"

# 4. Without root (a cluster): the jail maps that one user, and the code keeps it with every capability
#    dropped for good, in a pid namespace of its own. The same selftest as nobody (as root, the demo runs it
#    through scripts/as_nobody.py: nobody, in a mount namespace that makes this Python, its virtualenv and
#    the working directory reachable).
if [ "$(id -u)" = 0 ]; then
  python scripts/as_nobody.py astra-sandbox check
  python scripts/as_nobody.py astra-sandbox selftest 2> "$OUT/sandbox/selftest_one_user.log" \
    | tee "$OUT/sandbox/selftest_one_user.txt" | tail -1
  tail -1 "$OUT/sandbox/selftest_one_user.log"
else
  astra-sandbox check
  rm -f "$OUT/sandbox/selftest_one_user.txt" "$OUT/sandbox/selftest_one_user.log"  # (a root run's, if any)
  echo "  (not root: the selftest above already ran in a jail of one user)"
fi

# 5. A fresh episode for every call, as strict as nsjail per call: each comes from the worker's ready queue
#    (a batch of blank episodes forked together, waiting as the supervisor's user) and starts from bytecode
#    the worker compiled once. Idle episodes do not take the code's process limit.
python - <<'PY'
import json, time
from astra_sandbox import SandboxConfig, SessionPool
from astra_sandbox.cli import SAMPLE_ENVIRONMENT

code = json.loads(SAMPLE_ENVIRONMENT.read_text().splitlines()[0])["code"]
forks = "import os, time\ndef fork_until_refused():\n    n = 0\n    while True:\n        try:\n            pid = os.fork()\n        except OSError:\n            return n\n        if pid == 0:\n            time.sleep(30)\n            os._exit(0)\n        n += 1\n"
config = SandboxConfig()
with SessionPool(size=1, config=config) as pool:
    with pool.session(forks) as session:
        started = session.call("fork_until_refused").output
    print(f"  code started {started} processes (max_processes {config.max_processes}: it and {config.max_processes - 1} more)")
    for _ in range(20):  # warm
        with pool.session(code) as session:
            session.call("list_products")
    episodes, began = 200, time.perf_counter()
    for _ in range(episodes):
        with pool.session(code) as session:
            assert session.call("list_products").ok
    rate = episodes / (time.perf_counter() - began)
    (status,) = pool.episode_status()
    print(f"  {episodes} fresh episodes of one call each: {rate:.0f}/s on one worker; "
          f"{len(status['ready'])} blank + {len(status['loaded'])} loaded ahead waiting (batch of {config.ready_episodes})")
PY
