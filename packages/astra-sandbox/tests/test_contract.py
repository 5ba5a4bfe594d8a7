"""The API other packages code against (docs: /work/briefs/contracts.md), on the real jail."""

import json

import pytest
from astra_core.formats_doc import example
from astra_sandbox import SandboxConfig, SessionPool, ToolResult, open_session, run_code

ENV = example("environment")["code"]  # get_capital and get_population, as in docs/formats.md

pytestmark = pytest.mark.nsjail


def test_run_code_shape_and_success(config):
    result = run_code({"code": "print(1)", "language": "python", "stdin": "", "run_timeout": 5,
                       "memory_limit_MB": 256}, config=config)
    assert result["status"] == "Success"
    assert result["run_result"]["status"] == "Finished"
    assert result["run_result"]["stdout"] == "1\n"
    assert result["run_result"]["return_code"] == 0
    assert set(result["run_result"]) == {"status", "stdout", "stderr", "return_code", "execution_time"}


def test_session_calls_state_and_errors(pool):
    with pool.session(ENV, requirements=[]) as session:
        result = session.call("get_capital", {"country": "Norway"})
        assert isinstance(result, ToolResult)
        assert (result.ok, result.kind, result.error) == (True, "ok", None)
        assert json.loads(result.output) == {"capital": "Oslo"}
        assert result.duration_s > 0
        missing = session.call("get_capital", {"country": "Atlantis"})
        assert (missing.ok, missing.kind) == (False, "exception")
        assert missing.output == f"Error: {missing.error}" and "KeyError" in missing.error
        assert session.call("no_such_tool", {}).kind == "unknown_tool"
        assert session.call("get_capital", {"nation": "Norway"}).kind == "bad_arguments"
        assert session.alive
        assert session.state() == {"CAPITALS": {"norway": "Oslo"}, "POPULATION": {"oslo": "709,000"}}


def test_open_session_without_pool(config):
    with open_session(ENV, config=config) as session:
        assert session.call("get_population", {"city": "Oslo"}).output == '{"population": "709,000"}'


def test_unsafe_mode_warns_on_stderr(capfd):
    with SessionPool(size=1, config=SandboxConfig(jail=False)) as pool:
        with pool.session(ENV) as session:
            assert session.call("get_capital", {"country": "norway"}).ok
    assert "WITHOUT the jail" in capfd.readouterr().err


def test_an_unsafe_pool_closed_at_once_ends_its_spare_episode_and_leaves_nothing(tmp_path, monkeypatch):
    """A pool closed right after it started (a stage stopped by bad input) made the supervisor wait forever on the
    spare episode it had just forked: the kill went to the episode's session, which it had not made yet. The host
    gave up after 2 s and killed the supervisor, leaving the spare's work directory behind (about every other time)."""
    import tempfile
    import time

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for _ in range(10):
        started = time.monotonic()
        SessionPool(size=1, config=SandboxConfig(jail=False)).close()
        assert time.monotonic() - started < 1.5
        assert not list(tmp_path.glob("astra-episode-*"))


def test_unsafe_mode_episodes_work_in_the_users_temporary_directory(tmp_path, monkeypatch):
    """A cluster's /tmp may be small: the episodes' work directories follow TMPDIR (they were made in /tmp), and
    are gone once the pool is (the supervisor died on its reply to the last close when the host had stopped
    reading, leaving the spare episode's directory behind)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what TMPDIR=tmp_path gives a fresh process
    where = "import os\ndef workdir():\n    return os.getcwd()\n"
    with SessionPool(size=1, config=SandboxConfig(jail=False)) as pool:
        with pool.session(where) as session:
            workdir = session.call("workdir", {}).output
    assert workdir.startswith(str(tmp_path) + "/astra-episode-"), workdir
    assert not list(tmp_path.glob("astra-episode-*"))
