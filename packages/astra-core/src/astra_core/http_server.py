"""The standard library's threading HTTP server, as the toolkit's local servers use it (the embedded model, the
sandbox's SandboxFusion interface, the recorded endpoint of tests).

A stage or an RL trainer at --concurrency 64 opens its connections at once. The default listen backlog of 5
overflowed: connections were reset, or their SYNs retried seconds later (measured against the embedded server with
256 connections at once: 66 reset, the slowest answered after 258 s; with this backlog none, all within 0.3 s).
"""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class HTTPServer(ThreadingHTTPServer):
    request_queue_size = 1024  # the kernel caps it at net.core.somaxconn (4096 on current kernels)
    daemon_threads = True  # a connection's thread does not hold the process's exit
