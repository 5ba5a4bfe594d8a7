"""astra_core.http_server: binding a local server (ports in use, IPv6 hosts) and announcing the port it bound."""

from pathlib import Path

import pytest
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


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1) to serve on")
def test_an_ipv6_host_is_served_and_named_in_brackets():
    """`--host ::1` (astra-sandbox serve counts it as loopback) was 'Address family for hostname not supported'."""
    import threading
    import urllib.request
    from http.server import BaseHTTPRequestHandler

    from astra_core.http_server import base_url, listen

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    with listen("::1", 0, Hello) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = base_url("::1", server.server_address[1])
        assert url == f"http://[::1]:{server.server_address[1]}"
        with urllib.request.urlopen(url + "/", timeout=10) as reply:
            assert reply.read() == b"hello"
        server.shutdown()
    assert base_url("127.0.0.1", 8080) == "http://127.0.0.1:8080"
