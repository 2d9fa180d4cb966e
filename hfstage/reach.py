"""Can the job reach the Hub (or its mirror) at all? A TCP connect in seconds, before the first request.

In a VPC without a NAT route (or with a mirror the subnets cannot reach) every connection attempt hangs until its
timeout and the worker's retries add up to minutes; this answers in ``attempts`` x ``timeout`` seconds with what to
fix. Only a TCP connect: nothing is sent, so no token can leak, and the host is the one the HubClient connects to (the
proxy's, when ``HTTPS_PROXY``/``HTTP_PROXY`` applies to the endpoint: urllib.request.getproxies, proxy_bypass).
Standard library only.
"""

from __future__ import annotations

import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

# The worker reads this from its environment (the staging handler sets it); unset or 0: no probe.
ENV = "HFSTAGE_PROBE_TIMEOUT_S"
GUIDE = "docs/guide/private-network.md"


def target(endpoint: str) -> tuple[str, int, str]:
    """(host, port, what) the client opens a connection to for ``endpoint``: the proxy's when one applies."""
    parts = urllib.parse.urlsplit(endpoint)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxied = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        return proxied.hostname or "", proxied.port or 80, f"the {scheme} proxy for {host}"
    return host, parts.port or (443 if scheme == "https" else 80), host


def unreachable(
    endpoint: str,
    *,
    timeout: float,
    attempts: int = 3,
    connect: Callable[..., Any] = socket.create_connection,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Why ``endpoint`` cannot be reached (a person can act on it), or None once one connect succeeds."""
    host, port, what = target(endpoint)
    error: OSError | None = None
    for attempt in range(attempts):
        try:
            connect((host, port), timeout=timeout).close()
            return None
        except OSError as e:  # socket.timeout, gaierror (DNS), ConnectionRefusedError are all OSError
            error = e
            if attempt + 1 < attempts:
                sleep(1.0)
    kind = "its name does not resolve" if isinstance(error, socket.gaierror) else type(error).__name__
    return (
        f"cannot connect to {what} ({host}:{port}; {kind}) in {attempts} attempts of {timeout:g} s. From a VPC the "
        "staging job's subnets need a NAT route to the internet, or hf_endpoint must name a Hub mirror they can "
        f"reach, and their security group must allow HTTPS out ({GUIDE})"
    )
