"""Which HTTP requests go through the proxy the environment names (HTTP_PROXY, HTTPS_PROXY, NO_PROXY).

An endpoint elsewhere (a hosted API behind a cluster's proxy) is reached through that proxy, as curl, requests
and the OpenAI SDK do. An endpoint on this machine (the embedded model, a local vLLM) never is: a proxy cannot
reach this machine's loopback, and clusters often set HTTP_PROXY without a NO_PROXY for it.
(Imports are made on first use: a stage that asks no endpoint starts no faster with them.)
"""

from __future__ import annotations

from typing import Any


def is_loopback(url: str) -> bool:
    """Whether `url` names this machine by a loopback address or `localhost`."""
    import ipaddress
    import urllib.parse

    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_direct(url: str, timeout: float) -> Any:
    """urllib's `urlopen` without any proxy, for this machine's own servers."""
    import urllib.request

    return urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=timeout)


LOOPBACK = ("127.0.0.1", "localhost", "::1")
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def loopback_bypassed(env: dict[str, str]) -> dict[str, str]:
    """`env` with this machine's loopback in NO_PROXY (and no_proxy) when it names a proxy: for libraries we do not
    drive request by request (litellm under tau2), which honour the environment's proxy for every host."""
    if not any(env.get(name) for name in PROXY_VARIABLES):
        return env
    updated = dict(env)
    for name in ("NO_PROXY", "no_proxy"):
        present = [entry.strip() for entry in updated.get(name, "").split(",") if entry.strip()]
        updated[name] = ",".join(present + [host for host in LOOPBACK if host not in present])
    return updated
