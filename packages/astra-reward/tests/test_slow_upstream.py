"""A judge at the end of a pipe whose writer is slow (an upstream stage still generating, `tail -f`): what it has
finished is written at once, in order, not held until the next line arrives. Before, finished records stayed in
memory until more input came: a downstream reader saw nothing, and a SIGTERM meanwhile lost them.

Replies are recorded (astra_core.testing's RecordedLLM over real HTTP): the test is about control flow."""

import json
import os
import signal
import subprocess
import sys
import time

from astra_core.formats_doc import example

JUDGE = os.path.join(os.path.dirname(sys.executable), "astra-reward")


def test_finished_records_are_written_while_the_pipe_stays_open(tmp_path, recorded_llm):
    server = recorded_llm(replies=[json.dumps({"reason": "recorded", "score": 1})] * 100)
    base = example("trajectory")
    lines = [json.dumps({**base, "id": f"t{i}", "messages": [
        {"role": "user", "content": f"What is {i} + {i}?"}, {"role": "assistant", "content": str(2 * i)}]}) + "\n"
        for i in range(3)]
    out = tmp_path / "judged.jsonl"
    command = [JUDGE, "judge-trajectory", "-", "-o", str(out), "--base-url", server.base_url, "--model", "recorded"]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        run.stdin.write("".join(lines))
        run.stdin.flush()  # and the pipe stays open: upstream is still working
        deadline = time.monotonic() + 60
        while (not out.exists() or out.read_text().count("\n") < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        written = [json.loads(line)["id"] for line in out.read_text().splitlines()]
        run.send_signal(signal.SIGTERM)
        err = run.stderr.read()
    assert written == ["t0", "t1", "t2"], err
    assert run.returncode == 143 and "0 read records not finished" in err
