"""The astra-sandbox command: in-process through click's runner (the jail is real either way), and
`serve` as a real process answering real HTTP."""

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from astra_sandbox.cli import main
from click.testing import CliRunner

pytestmark = pytest.mark.nsjail

CLI = str(Path(sys.executable).with_name("astra-sandbox"))
QUICK = ["--sandbox-wall-time-s", "2", "--sandbox-cpu-time-s", "2", "--sandbox-memory-mb", "256", "--sandbox-call-timeout-s", "1"]


def cli(*args: str, stdin: str = ""):
    result = CliRunner().invoke(main, list(args), input=stdin)
    result.returncode = result.exit_code
    return result


def test_run_keeps_input_order_and_ids_with_several_workers(tmp_path):
    requests = [{"id": f"r{n}", "code": f"import time\ntime.sleep({0.3 if n % 2 == 0 else 0})\nprint({n})"}
                for n in range(6)]
    requests.insert(3, {"id": "bad", "language": "python"})
    requests.append({"id": "loop", "code": "while True:\n    pass", "run_timeout": 0.5})
    stdin = "".join(json.dumps(request) + "\n" for request in requests)
    rejects = tmp_path / "rejects.jsonl"
    done = cli("run", "--sandbox-pool-size", "3", "--skip-bad", "--rejects", str(rejects), *QUICK, stdin=stdin)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [result["id"] for result in results] == [f"r{n}" for n in range(6)] + ["loop"]
    assert [result["run_result"]["stdout"] for result in results[:6]] == [f"{n}\n" for n in range(6)]
    assert results[-1]["run_result"]["status"] == "TimeLimitExceeded"
    assert json.loads(rejects.read_text())["id"] == "bad"
    assert "read 8" in done.stderr and "rejected 1" in done.stderr and "result Failed/TimeLimitExceeded: 1" in done.stderr
    without_skip = cli("run", *QUICK, stdin=stdin)  # a request without code is bad input: named, exit 1
    assert without_skip.returncode == 1 and "<stdin>:4" in without_skip.stderr and "code" in without_skip.stderr


def test_run_without_jail_warns_loudly():
    done = cli("run", "--no-sandbox-jail", stdin='{"code": "print(2)"}\n')
    assert json.loads(done.stdout)["run_result"]["stdout"] == "2\n"
    assert "WITHOUT the jail" in done.stderr


def test_serve_answers_run_code_over_http(tmp_path):
    """...and stops on SIGTERM (`kill`, systemd, a scheduler) as on Ctrl-C: its pool closed, nothing left in the
    temporary directory (the nsjail config was, for every server stopped)."""
    port_file = tmp_path / "port"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    server = subprocess.Popen([CLI, "serve", "--port", "0", "--port-file", str(port_file), "--sandbox-pool-size", "1", *QUICK],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(temporary)})
    try:
        for _ in range(300):
            if port_file.exists() and port_file.read_text():
                break
            assert server.poll() is None, server.stderr.read()
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port_file.read_text()}"

        def post(body: bytes) -> tuple[int, dict]:
            request = urllib.request.Request(f"{base}/run_code", data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        status, result = post(json.dumps({"code": "print(input() * 2)", "stdin": "ab", "id": 1}).encode())
        assert (status, result["status"], result["run_result"]["stdout"], result["id"]) == (200, "Success", "abab\n", 1)
        status, result = post(b"{not json")
        assert (status, result["status"]) == (400, "SandboxError")
        status, result = post(b"")
        assert (status, result["status"]) == (400, "SandboxError") and "the body is empty" in result["message"]
        connection = http.client.HTTPConnection("127.0.0.1", int(port_file.read_text()), timeout=10)
        connection.putrequest("POST", "/run_code")
        connection.putheader("Content-Length", "ten")
        connection.endheaders()
        answer = connection.getresponse()
        assert answer.status == 400 and "Content-Length 'ten' is not a number" in json.loads(answer.read())["message"]
        connection.close()
        with urllib.request.urlopen(f"{base}/health", timeout=10) as response:
            assert json.loads(response.read()) == {"ok": True, "workers": 1, "jail": True}
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert server.returncode == 0, server.stderr.read()
    assert not list(temporary.iterdir())


def test_session_replays_calls_in_fresh_episodes(tmp_path):
    environment = tmp_path / "env.jsonl"
    code = "COUNT = 0\ndef bump(by=1):\n    global COUNT\n    COUNT += by\n    return COUNT\n"
    environment.write_text(json.dumps({"id": "env-1", "code": code, "requirements": []}) + "\n")
    calls = '{"name": "bump"}\n{"name": "bump", "arguments": {"by": 2}}\n{"state": true}\n{"name": "missing"}\n'
    done = cli("session", str(environment), "--episodes", "2", *QUICK, stdin=calls)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(line["episode"], line.get("output")) for line in lines if line.get("name") == "bump"] == [
        (0, "1"), (0, "3"), (1, "1"), (1, "3")]
    assert [line["state"] for line in lines if "state" in line] == [{"COUNT": 3}, {"COUNT": 3}]
    assert lines[-1]["kind"] == "unknown_tool"


def test_session_reports_a_state_it_cannot_read_and_goes_on(tmp_path):
    environment = tmp_path / "env.py"
    environment.write_text("import os\nN = 1\ndef crash():\n    os._exit(3)\n")
    done = cli("session", str(environment), "--episodes", "2", *QUICK, stdin='{"state": true}\n{"name": "crash"}\n'
                                                                               '{"state": true}\n')
    assert done.returncode == 0 and "Traceback" not in done.output, done.output
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(line["episode"], line.get("state"), "error" in line) for line in lines if "name" not in line] == [
        (0, {"N": 1}, False), (0, None, True), (1, {"N": 1}, False), (1, None, True)]
    assert "no state: the environment is no longer running" in lines[2]["error"]


@pytest.mark.parametrize(("bad_line", "says"), [
    ('{"name": "bump", "arguments":', "<stdin>:2: invalid JSON"),
    ('{"name": 42}', "<stdin>:2: field name"),
    ('["bump"]', "<stdin>:2: expected a JSON object"),
])
def test_session_stops_before_any_call_at_a_line_it_cannot_read(bad_line, says):
    done = cli("session", "--episodes", "2", *QUICK, stdin='{"name": "list_products"}\n' + bad_line + "\n")
    assert done.returncode == 1 and done.stdout == ""
    assert says in done.output and "Traceback" not in done.output


def test_session_names_a_calls_file_or_environment_it_cannot_use(tmp_path):
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"name": "list_products"}\n')
    missing = cli("session", "--calls", str(tmp_path / "nope.jsonl"), *QUICK)
    assert missing.returncode == 2 and isinstance(missing.exception, SystemExit)  # as a missing ENVIRONMENT
    assert f"'--calls': File '{tmp_path / 'nope.jsonl'}' does not exist" in missing.output
    assert "Traceback" not in missing.output
    for text, says in (("[1]\n", "not an environment record: a JSON list"), ('{"code": 5}\n', "field code"),
                       ('{"code": "", "requirements": "os"}\n', "field requirements")):
        environment = tmp_path / "env.jsonl"
        environment.write_text(text)
        bad = cli("session", str(environment), "--calls", str(calls), *QUICK)
        assert bad.returncode == 1 and f"Error: {environment}: {says}" in bad.output, bad.output
        assert bad.output.count("\n") == 1 and isinstance(bad.exception, SystemExit)
    good = cli("session", "--calls", str(calls), *QUICK)
    assert good.returncode == 0 and json.loads(good.stdout)["name"] == "list_products", good.output


@pytest.mark.parametrize(("args", "says"), [
    (["run", "--sandbox-pool-size", "0"], "Invalid value for '--sandbox-pool-size': must be >= 1, got 0"),
    (["session", "--episodes", "0"], "Invalid value for '--episodes'"),
    (["session", "--sandbox-memory-mb", "32"], "Invalid value for '--sandbox-memory-mb': must be >= 64, got 32"),
    (["check", "--sandbox-call-timeout-s", "-1"], "Invalid value for '--sandbox-call-timeout-s': must be >= 0"),
])
def test_numeric_flags_out_of_range_are_usage_errors_before_any_work(args, says):
    done = cli(*args)
    assert done.returncode == 2 and says in done.output, done.output


def test_selftest_prints_a_table_of_contained_snippets():
    # (every snippet runs in test_security.py; here the command's wiring and its table)
    done = cli("selftest", "--only", "network-loopback", "--only", "fork-bomb")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].split() == ["snippet", "contained", "evidence"]
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[2:4]}
    assert rows == {"network-loopback": "yes", "fork-bomb": "yes"}
    assert "2/2 hostile snippets tried, 2 contained" in done.stdout
    assert cli("selftest", "--only", "nonsense").returncode == 2


def test_check_reports_the_jail():
    done = cli("check")
    report = json.loads(done.stdout)
    assert report["jail"].endswith("nsjail") and report["program_status"] == "Finished"


def test_serve_refuses_a_port_file_it_cannot_write_before_starting_its_pool(tmp_path):
    done = subprocess.run([CLI, "serve", "--port", "0", "--port-file", str(tmp_path / "missing" / "port")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"cannot write a file in {tmp_path / 'missing'}: No such file or directory" in done.stderr


def test_serve_on_a_port_in_use_is_one_line_said_before_its_pool_starts():
    """It was a traceback (OSError: Address already in use), after the pool had started."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run([CLI, "serve", "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use (--port 0 picks a free port)"
