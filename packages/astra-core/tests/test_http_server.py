"""astra_core.http_server: how the local servers announce the port they bound."""

from pathlib import Path

from astra_core.http_server import announce_port


def test_the_port_is_announced_through_a_temporary_file_of_its_own(tmp_path):
    """The port file was written through its name with the suffix swapped for .tmp: `mktemp -u` names
    (/tmp/tmp.XXXXXX, the demo's) all went through /tmp/tmp.tmp, so two servers starting at once could move each
    other's port into place, and a client would talk to the wrong server. (`astra-core serve` and `astra-sandbox
    serve` announce their ports this way.)"""
    in_flight = tmp_path / "tmp.tmp"  # another server's port, being announced at this moment
    in_flight.write_text("41001")
    announce_port(str(tmp_path / "tmp.AbCdEf"), 42002)
    assert (tmp_path / "tmp.AbCdEf").read_text() == "42002"
    assert in_flight.read_text() == "41001"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tmp.AbCdEf", "tmp.tmp"]


def test_a_port_file_that_cannot_be_written_is_refused_before_the_model_loads(tmp_path):
    """It was a traceback once the server was up (after the model had loaded), and the server gone."""
    from astra_core.cli import main
    from click.testing import CliRunner

    for port_file, reason in ((tmp_path / "missing" / "port", "No such file or directory"),
                              ("/proc/port", "No such file or directory")):
        done = CliRunner().invoke(main, ["serve", "--port", "0", "--port-file", str(port_file)])
        assert done.exit_code == 2, done.output
        assert f"cannot write a file in {Path(port_file).parent}: {reason}" in done.output


def test_a_port_out_of_range_is_refused_by_every_server_command():
    """It was a traceback (OverflowError from bind)."""
    from astra_core.cli import main
    from click.testing import CliRunner

    for command in (["serve"], ["view", "-", "--serve"]):
        done = CliRunner().invoke(main, [*command, "--port", "70000"], input="")
        assert done.exit_code == 2 and "70000 is not in the range 0<=x<=65535" in done.output, done.output
