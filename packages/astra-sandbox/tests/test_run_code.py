"""run_code in the SandboxFusion shape, on the warm pool and cold (nsjail per call)."""

import base64

import pytest
from astra_sandbox import run_code

pytestmark = pytest.mark.nsjail


def run(pool, code: str, **extra) -> dict:
    return pool.run_code({"code": code, "language": "python", **extra})


def test_stdin_stdout_and_id_passthrough(pool):
    result = run(pool, "import sys\nprint(sys.stdin.read().upper(), end='')", stdin="abc\ndef", id="req-7")
    assert result["id"] == "req-7"
    assert (result["status"], result["run_result"]["stdout"]) == ("Success", "ABC\nDEF")
    assert result["compile_result"] is None and result["files"] == {}


def test_program_behaves_like_python_main(pool):
    code = ("import sys, threading, subprocess\n"
            "if __name__ == '__main__':\n"
            "    out = []\n"
            "    worker = threading.Thread(target=lambda: out.append(sys.argv[0].endswith('main.py')))\n"
            "    worker.start(); worker.join()\n"
            "    print(out, subprocess.run([sys.executable, '-c', 'print(6*7)'], capture_output=True,"
            " text=True).stdout.strip())\n"
            "    import atexit; atexit.register(lambda: print('bye'))\n")
    result = run(pool, code)
    assert result["run_result"]["stdout"] == "[True] 42\nbye\n", result


def test_what_python_main_py_has_besides_the_standard_library(pool):
    """The builtins the site module adds (the supervisor runs with -S) and the script's directory on sys.path."""
    ended = run(pool, "print('before')\nexit(3)\nprint('after')")
    assert (ended["run_result"]["return_code"], ended["run_result"]["stdout"]) == (3, "before\n"), ended
    assert run(pool, "quit()")["run_result"]["return_code"] == 0
    shown = run(pool, "import os, sys\nprint(type(help).__name__, callable(copyright), callable(license),"
                      " sys.path[0] == os.path.dirname(__file__))")
    assert shown["run_result"]["stdout"] == "_Helper True True True\n", shown
    sibling = run(pool, "open('helper.py', 'w').write('X = 42\\n')\nimport helper\nprint(helper.X)")
    assert sibling["run_result"]["stdout"] == "42\n", sibling


def test_input_files_and_fetched_files_as_sandboxfusion_has_them(pool, config):
    data = base64.b64encode(bytes(range(256))).decode()
    code = ("data = open('inputs/blob.bin', 'rb').read()\n"
            "open('out.txt', 'w').write(f'{len(data)} {sum(data)}')\n"
            "open('big.bin', 'wb').write(b'x' * 3_000_000)\n")
    result = run(pool, code, files={"inputs/blob.bin": data, "skipped.txt": None},
                 fetch_files=["out.txt", "missing.txt", "big.bin", "inputs/blob.bin"], compile_timeout=10)
    assert result["status"] == "Success", result
    assert base64.b64decode(result["files"]["out.txt"]) == b"256 32640"
    assert "missing.txt" not in result["files"] and "big.bin" not in result["files"]  # absent; over the cap
    assert "missing.txt" in result["message"] and "big.bin" in result["message"]
    assert len(result["files"]["out.txt"]) < config.max_output_bytes
    # a program that fetches nothing gets {} (SandboxFusion's shape)
    assert run(pool, "print(1)")["files"] == {}


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"files": {"/etc/passwd": ""}}, "not a path inside"),
    ({"files": {"../up.txt": ""}}, "not a path inside"),
    ({"files": {"a.txt": "not base64!"}}, "base64"),
    ({"files": ["a.txt"]}, "object of path"),
    ({"fetch_files": "out.txt"}, "list of paths"),
    ({"fetch_files": ["a/../../b"]}, "not a path inside"),
    ({"compile_timeout": "10"}, "must be a number"),
])
def test_bad_files_are_refused_before_anything_runs(pool, extra, fragment):
    result = run(pool, "print('ran')", **extra)
    assert result["status"] == "SandboxError" and fragment in result["message"], result


def test_an_input_file_that_cannot_be_written_is_a_sandbox_failure(pool, config):
    too_big = base64.b64encode(b"x" * (config.max_file_size_mb * 2 << 20)).decode()
    result = run(pool, "print('ran')", files={"big.bin": too_big})
    assert result["run_result"]["status"] == "Error" and "big.bin" in result["run_result"]["stderr"], result
    assert result["run_result"]["stdout"] == ""


def test_annotations_are_evaluated_as_python_does(pool):
    """No future feature of the sandbox's own reaches the program: an annotation naming something undefined
    fails as it does under `python main.py` (a program that would crash must not be judged to run)."""
    undefined = run(pool, "def f(x: Undefined):\n    return x\nprint(f(1))")
    assert undefined["run_result"]["return_code"] == 1, undefined
    assert "NameError: name 'Undefined' is not defined" in undefined["run_result"]["stderr"]
    evaluated = run(pool, "def f(x: int) -> str:\n    return str(x)\nprint(f.__annotations__)")
    assert evaluated["run_result"]["stdout"] == "{'x': <class 'int'>, 'return': <class 'str'>}\n"
    postponed = run(pool, "from __future__ import annotations\ndef f(x: Undefined):\n    return x\nprint(f(1))")
    assert postponed["run_result"]["stdout"] == "1\n"  # the program's own future import still counts


def test_failures_keep_their_return_code_and_traceback(pool):
    exited = run(pool, "import sys\nprint('partial')\nsys.exit(4)")
    assert exited["status"] == "Failed"
    assert (exited["run_result"]["status"], exited["run_result"]["return_code"]) == ("Finished", 4)
    assert exited["run_result"]["stdout"] == "partial\n"
    raised = run(pool, "def f():\n    return 1 / 0\nf()")
    stderr = raised["run_result"]["stderr"]
    assert raised["run_result"]["return_code"] == 1
    assert stderr.startswith("Traceback") and "ZeroDivisionError" in stderr and 'main.py", line 3' in stderr
    assert "zygote" not in stderr  # only the program's own frames
    message = run(pool, "raise SystemExit('bad input')")
    assert (message["run_result"]["return_code"], message["run_result"]["stderr"]) == (1, "bad input\n")


def test_time_limit_is_distinct_and_requests_cannot_raise_it(pool, config):
    spin = "while True:\n    pass"
    lowered = run(pool, spin, run_timeout=0.5)
    assert lowered["run_result"]["status"] == "TimeLimitExceeded"
    assert lowered["run_result"]["return_code"] is None and "time limit" in lowered["message"]
    raised = run(pool, "import time\ntime.sleep(%s)\nprint('done')" % (config.wall_time_s + 1), run_timeout=600)
    assert raised["run_result"]["status"] == "TimeLimitExceeded"  # capped at the configured wall time


def test_memory_limit_is_distinct_and_requests_may_lower_it(pool):
    allocate = "block = bytearray(150 * 1024 * 1024)\nprint('allocated')"
    assert run(pool, allocate)["status"] == "Success"  # fits the configured 256 MB
    lowered = run(pool, allocate, memory_limit_MB=128)
    assert lowered["run_result"]["status"] == "MemoryLimitExceeded"
    assert "MemoryError" in lowered["run_result"]["stderr"]
    assert run(pool, allocate, memory_limit_MB=-1)["status"] == "Success"  # SandboxFusion's "no limit"


def test_output_is_capped_and_marked(pool, config):
    size = config.max_output_bytes * 3
    result = run(pool, f"import sys\nsys.stdout.write('y' * {size})\nsys.stderr.write('e' * 10)")
    stdout = result["run_result"]["stdout"]
    assert stdout.startswith("y" * 1000) and "truncated" in stdout
    assert len(stdout) < config.max_output_bytes + 100
    assert result["run_result"]["stderr"] == "e" * 10


def test_private_tmp_is_wiped_between_programs(pool):
    assert run(pool, "open('/tmp/left', 'w').write('x')\nimport os\nprint(sorted(os.listdir('/tmp')))")[
        "run_result"]["stdout"] == "['left', 'main.py']\n"
    assert run(pool, "import os\nprint(sorted(os.listdir('/tmp')))")["run_result"]["stdout"] == "['main.py']\n"


def test_process_pools_work(pool):
    """multiprocessing's locks are POSIX semaphores, made in /dev/shm: in the jail, the program's own /tmp."""
    code = ("from concurrent.futures import ProcessPoolExecutor\n"
            "import multiprocessing, os\n"
            "if __name__ == '__main__':\n"
            "    with ProcessPoolExecutor(2) as workers:\n"
            "        print(sorted(workers.map(abs, [-1, -2, -3])))\n"
            "    with multiprocessing.Pool(2) as workers:\n"
            "        print(workers.map(abs, [-4]), sorted(os.listdir('/tmp')))\n")
    assert run(pool, code)["run_result"]["stdout"] == "[1, 2, 3]\n[4] ['main.py']\n"


def test_what_every_linux_has(pool):
    """The standard streams by name and a user name, as generated programs sometimes expect them."""
    code = ("import getpass, os\n"
            "open('/dev/stdout', 'w').write(open('/dev/stdin').read().upper())\n"
            "open('/dev/stderr', 'w').write('to stderr')\n"
            "print(getpass.getuser(), sorted(os.listdir('/dev/fd'))[:3])\n")
    run_result = run(pool, code, stdin="from stdin\n")["run_result"]
    assert (run_result["stdout"], run_result["stderr"]) == ("FROM STDIN\nsandbox ['0', '1', '2']\n", "to stderr")


def test_unsupported_language_and_bad_requests_are_sandbox_errors(pool, config):
    other = pool.run_code({"code": "int main(){}", "language": "cpp", "id": 3})
    assert (other["status"], other["id"], other["run_result"]) == ("SandboxError", 3, None)
    assert "not supported" in other["message"]
    for request in ({"language": "python"}, {"code": 5}, {"code": "print(1)", "run_timeout": "soon"}, ["code"]):
        assert pool.run_code(request)["status"] == "SandboxError"
        assert run_code(request, config=config)["status"] == "SandboxError"


def test_cold_run_code_starts_and_stops_its_own_jail(config):
    result = run_code({"code": "import os\nprint(os.getuid(), os.listdir('/proc/self/fd'))"}, config=config)
    assert result["status"] == "Success"
    uid, fds = result["run_result"]["stdout"].split(" ", 1)
    # with one user, the code keeps the jail's uid 0 (without a capability)
    assert uid == ("0" if config.one_user else "65534")
    assert fds.strip() == "['0', '1', '2', '3', '4', '5']"  # std, channel, the listing itself
