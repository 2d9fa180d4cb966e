"""Share the files of a revision among the instances of a Processing job.

Every instance computes the same plan from the same inputs (the file list and the host names in
``/opt/ml/config/resourceconfig.json``), so no coordination is needed beyond S3 itself.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import safejson
from hfstage.hub import HubFile

RESOURCE_CONFIG = "/opt/ml/config/resourceconfig.json"
LOCAL_HOST = "local"


def read_hosts(path: str = RESOURCE_CONFIG) -> tuple[str, list[str]]:
    """(current_host, hosts) from a SageMaker resource config; ("local", ["local"]) when the file is absent.

    ValueError when the file exists but is not a resource config.
    """
    try:
        with open(path, "rb") as handle:
            config = safejson.loads(handle.read(safejson.MAX_SIZE + 1), source=path)
    except FileNotFoundError:
        return LOCAL_HOST, [LOCAL_HOST]
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the resource config {path}: {error}") from None
    current = config.get("current_host") if isinstance(config, dict) else None
    hosts = config.get("hosts") if isinstance(config, dict) else None
    if not isinstance(current, str) or not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ValueError(f"{path} lacks current_host (a string) and hosts (a list of strings)")
    hosts = sorted(set(hosts))
    if current not in hosts:
        raise ValueError(f"{path}: current_host {current!r} is not one of hosts {hosts}")
    return current, hosts


def leader(hosts: Sequence[str]) -> str:
    """The host that waits for the others and writes the manifest."""
    return sorted(hosts)[0]


def assign(files: Iterable[HubFile], hosts: Sequence[str]) -> dict[str, list[HubFile]]:
    """Each host's files: largest file first to the least-loaded host (ties: the first host in sorted order).

    Deterministic for the same files and hosts, whatever their order; every file goes to exactly one
    host, and the busiest and idlest hosts differ by at most the largest file's size. Each host's list
    is sorted by path.
    """
    names = sorted(set(hosts))
    if not names:
        raise ValueError("no hosts to assign files to")
    plan: dict[str, list[HubFile]] = {h: [] for h in names}
    loads = [(0, i) for i in range(len(names))]  # (bytes assigned, host index): a min-heap
    for file in sorted(files, key=lambda f: (-f.size, f.path)):
        load, index = heapq.heappop(loads)
        plan[names[index]].append(file)
        heapq.heappush(loads, (load + file.size, index))
    for share in plan.values():
        share.sort(key=lambda f: f.path)
    return plan
