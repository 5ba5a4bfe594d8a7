"""astra_core.http_server: how the local servers announce the port they bound."""

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
