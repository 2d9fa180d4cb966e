"""Staging throughput and memory: the worker against the two-step baseline, on the same local servers.

    .venv/bin/python benchmarks/staging.py [--scale 1.0] [--part-size-mib 64] [--parts-in-flight 8]

A synthetic repository (a few small JSON/tokenizer files and round(8 x scale) shards of 256 MiB: about
2 GiB at scale 1) is served by the fake Hub (tests/fakes/fake_hub.py; LFS files come from a second
origin) and staged into a local S3 sink (benchmarks/s3_sink.py, a separate process that counts and
discards bodies). Measured in one run, every program a separate process so that each gets its own
interpreter lock:

1. raw read: the same bytes read from the fake Hub with as many streams as the worker, discarded;
2. raw write: as many bytes uploaded to the sink as multipart parts, from memory, same concurrency;
3. the worker (hfstage) staging the repository: throughput, peak RSS, bytes written to local disk
   (/proc/<pid>/io write_bytes), CPU time;
4. the baseline: huggingface_hub.snapshot_download to a temporary directory, then boto3 upload_file of
   each file (same S3 client settings as the worker);
5. the worker again on one file of 2 GiB x scale: peak RSS for a single large file.

Throughput is repository bytes / wall time of the work (interpreter start-up and imports excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if os.environ.get("BENCH_HFSTAGE_ROOT"):  # another copy of hfstage (e.g. an older commit), for before/after
    sys.path.insert(0, os.environ["BENCH_HFSTAGE_ROOT"])

MiB = 1024 * 1024
GiB = 1024 * MiB
BUCKET = "bench"
SHARD = 256 * MiB


# -- child programs (each run as its own process) ---------------------------------------------------------


def _process_stats(started: float) -> dict[str, Any]:
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    status = {
        k: v.strip() for k, _, v in (line.partition(":") for line in Path("/proc/self/status").read_text().splitlines())
    }
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall_s": time.perf_counter() - started,
        "write_bytes": int(io["write_bytes"]),
        "vm_hwm_kib": int(status["VmHWM"].split()[0]),
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }


def child_worker(stats_file: str, argv: list[str]) -> int:
    from hfstage.worker import main

    started = time.perf_counter()
    code = main(argv)
    Path(stats_file).write_text(json.dumps({"code": code, **_process_stats(started)}))
    return code


def child_worker_profile(stats_file: str, argv: list[str]) -> int:
    """The worker under cProfile in every thread; the merged profile's top functions go to stdout."""
    import cProfile
    import io
    import pstats
    import threading

    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    original_run = threading.Thread.run

    # Each thread's own CPU time (not wall time: a thread blocked on a socket would dominate).
    def profiled_run(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.runcall(original_run, self)

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    main_profile = cProfile.Profile(time.thread_time)
    code = main_profile.runcall(child_worker, stats_file, argv)
    stats = pstats.Stats(main_profile, stream=(out := io.StringIO()))
    for profile in profiles:
        stats.add(profile)
    stats.sort_stats("tottime").print_stats(14)
    print("PROFILE-BEGIN\n" + out.getvalue().split("ncalls", 1)[-1] + "\nPROFILE-END", flush=True)
    return code


def child_baseline(stats_file: str, repo_id: str, destination: str, part_size: int, concurrency: int) -> int:
    import boto3.s3.transfer
    from huggingface_hub import snapshot_download

    from hfstage.transfer import Settings
    from hfstage.worker import make_s3_client

    s3 = make_s3_client(Settings(parts_in_flight=concurrency))  # the worker's client settings
    config = boto3.s3.transfer.TransferConfig(
        multipart_threshold=part_size, multipart_chunksize=part_size, max_concurrency=concurrency
    )
    bucket, _, prefix = destination.removeprefix("s3://").partition("/")
    tmp = tempfile.mkdtemp(prefix="hf-baseline-", dir=os.environ.get("BENCH_TMP"))
    try:
        started = time.perf_counter()
        local = Path(snapshot_download(repo_id, cache_dir=tmp))
        downloaded = time.perf_counter() - started
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            s3.upload_file(str(path), bucket, prefix + path.relative_to(local).as_posix(), Config=config)
        stats = _process_stats(started)
        stats["download_s"] = downloaded
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    Path(stats_file).write_text(json.dumps({"code": 0, **stats}))
    return 0


def child_raw_read(stats_file: str, repo_id: str, streams: int) -> int:
    from hfstage.hub import HubClient

    hub = HubClient()
    revision = hub.revision_info(repo_id, "main")
    started = time.perf_counter()

    def drain(path: str) -> int:
        buffer = memoryview(bytearray(MiB))
        total = 0
        response = hub.open_file(repo_id, revision.sha, path)
        try:
            while n := response.readinto(buffer):
                total += n
        finally:
            response.close()
        return total

    ordered = sorted(revision.files, key=lambda f: -f.size)
    with ThreadPoolExecutor(streams) as pool:
        total = sum(pool.map(drain, [f.path for f in ordered]))
    Path(stats_file).write_text(json.dumps({"code": 0, "bytes": total, **_process_stats(started)}))
    return 0


def child_raw_write(stats_file: str, total: int, part_size: int, concurrency: int) -> int:
    from hfstage.checksum import FULL_OBJECT
    from hfstage.checksum import best as best_checksum
    from hfstage.transfer import Settings
    from hfstage.worker import make_s3_client

    s3 = make_s3_client(Settings(parts_in_flight=concurrency))
    buffer = bytearray(os.urandom(MiB) * (part_size // MiB))
    algorithm = best_checksum()
    checksum = algorithm.of(buffer)
    upload = s3.create_multipart_upload(
        Bucket=BUCKET, Key="raw-write", ChecksumAlgorithm=algorithm.name, ChecksumType=FULL_OBJECT
    )
    started = time.perf_counter()
    parts = -(-total // part_size)

    def put(number: int) -> None:
        # The same bytes each time: this measures the sink and the client, not a data source.
        s3.upload_part(
            Bucket=BUCKET,
            Key="raw-write",
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=buffer,
            ChecksumAlgorithm=algorithm.name,
            **{algorithm.field: checksum},
        )

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(put, range(1, parts + 1)))
    stats = _process_stats(started)
    s3.abort_multipart_upload(Bucket=BUCKET, Key="raw-write", UploadId=upload["UploadId"])
    Path(stats_file).write_text(json.dumps({"code": 0, "bytes": parts * part_size, **stats}))
    return 0


# -- the driver -----------------------------------------------------------------------------------------


class Sink:
    """benchmarks/s3_sink.py as a subprocess, ended by its PID."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "s3_sink.py")], stdout=subprocess.PIPE, text=True
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError("the S3 sink did not start")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"

    def stats(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(f"{self.endpoint}/_stats", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run_child(env: dict[str, str], *args: str, timeout: float = 900, time_rss: bool = False) -> dict[str, Any]:
    """Run this file as a child program; its stats, plus the driver's (the fake Hub's) CPU time meanwhile.

    ``time_rss``: also its peak RSS as /usr/bin/time measures it (``max_rss_kib``): getrusage's
    RUSAGE_CHILDREN would count the driver's memory copied into the child at fork."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        stats_file = handle.name
    rss_file = stats_file + ".rss"
    wrapper = ["/usr/bin/time", "-f", "%M", "-o", rss_file] if time_rss else []
    before = resource.getrusage(resource.RUSAGE_SELF)
    # Output through a pipe, as in a job (to CloudWatch): a log file would count as the child's disk writes.
    process = subprocess.run(
        [*wrapper, sys.executable, __file__, *args[:1], stats_file, *args[1:]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
    )
    output = process.stdout.decode(errors="replace")
    after = resource.getrusage(resource.RUSAGE_SELF)
    try:
        stats = json.loads(Path(stats_file).read_text() or "{}")
        if time_rss:
            stats["max_rss_kib"] = int(Path(rss_file).read_text().split()[-1])
    finally:
        os.unlink(stats_file)
        if time_rss:
            os.unlink(rss_file)
    if process.returncode != 0 or stats.get("code") != 0:
        raise RuntimeError(f"{args[0]} failed ({process.returncode}):\n{output[-3000:]}")
    stats["hub_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    stats["output"] = output
    return stats


def steal_seconds() -> float:
    """CPU time the hypervisor gave to other guests (all CPUs): a busy neighbour slows every figure."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def summary_fields(output: str) -> dict[str, str]:
    line = next(line for line in reversed(output.splitlines()) if " event=summary " in line)
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def bench_env(sink_endpoint: str, hub_endpoint: str, tmp_root: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_"))}
    env.update(
        AWS_ENDPOINT_URL_S3=sink_endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        HF_ENDPOINT=hub_endpoint,
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HOME=str(Path(tmp_root) / "hf-home"),
        BENCH_TMP=tmp_root,
        PYTHONPATH=str(ROOT),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def create_bucket(endpoint: str) -> None:
    import boto3

    boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="b", aws_secret_access_key="b"
    ).create_bucket(Bucket=BUCKET)


def kill_when(env: dict[str, str], flags: list[str], reached: Any) -> None:
    """Start the worker with ``flags`` and SIGKILL it once ``reached()`` is true (nothing is cleaned up: the next
    run finds its uploads and checkpoints), or let it end."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        stats_file = handle.name
    killed = subprocess.Popen(
        [sys.executable, __file__, "worker", stats_file, *flags],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not reached() and killed.poll() is None:
            time.sleep(0.02)
        killed.kill()
    finally:
        killed.wait()
        os.unlink(stats_file)


def single_file(args: argparse.Namespace) -> int:
    """One large file from a Hub that paces each connection: one stream against parallel ranges, then a
    run killed at ``--kill-at`` of the file fetched (70 %) and resumed, then (``--profile``) where the worker's
    CPU goes."""
    from tests.fakes.fake_hub import FakeHub, Synthetic

    size = max(64 * MiB, int(2 * GiB * args.scale) // MiB * MiB)
    path = "model.gguf"
    rate = args.connection_mb_s * 1e6
    hub = FakeHub(connection_bytes_per_s=rate).start()
    t0 = time.perf_counter()
    hub.add_repo("bench/one-file", {"config.json": b"{}", path: Synthetic(size, seed=2024)})
    setup_s = time.perf_counter() - t0
    sink = Sink()
    tmp_root = tempfile.mkdtemp(prefix="staging-bench-", dir=str(ROOT / "benchmarks"))
    part = args.part_size_mib * MiB
    flags = [
        "--repo-id=bench/one-file",
        f"--part-size-mib={args.part_size_mib}",
        f"--parts-in-flight={args.parts_in_flight}",
        "--progress-interval-s=5",
        f"--resource-config={Path(tmp_root) / 'none.json'}",
        f"--failure-file={Path(tmp_root) / 'message'}",
    ]
    results: dict[str, dict[str, Any]] = {}
    try:
        env = bench_env(sink.endpoint, hub.endpoint, tmp_root)
        create_bucket(sink.endpoint)
        print(
            f"one file of {size / GiB:.2f} GiB, each Hub connection paced at {args.connection_mb_s:.0f} MB/s; part "
            f"size {args.part_size_mib} MiB, {args.parts_in_flight} parts in flight; Hub set up in {setup_s:.1f} s; "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before the runs",
            flush=True,
        )

        def timed(name: str, *extra: str, child: str = "worker", to: str = "", child_env: Any = None) -> None:
            before = hub.bytes_sent(path)
            steal = steal_seconds()
            where = f"--destination=s3://{BUCKET}/{to or name}/"
            stats = run_child(child_env or env, child, where, *flags, *extra, time_rss=True)
            stats["hub_bytes"] = hub.bytes_sent(path) - before
            stats["steal_s"] = steal_seconds() - steal
            results[name] = stats

        timed("start-up only (2-byte file)", "--include=config.json", to="startup")
        if args.before_root:  # the same run with an older hfstage (one stream per file, no --ranges-per-file)
            timed("before: one stream", child_env={**env, "BENCH_HFSTAGE_ROOT": args.before_root}, to="before")
        timed("one-stream", "--ranges-per-file=1")
        timed("parallel", f"--ranges-per-file={args.parts_in_flight}")

        # Killed at --kill-at: SIGKILL, so nothing is cleaned up; the rerun finds the upload and its checkpoint.
        before = hub.bytes_sent(path)
        flags_to = [f"--destination=s3://{BUCKET}/resume/", *flags]
        kill_when(env, flags_to, lambda: hub.bytes_sent(path) - before >= args.kill_at * size)
        fetched_before_kill = hub.bytes_sent(path) - before
        open_after_kill = sink.stats()["open_uploads"]
        timed("resumed", f"--ranges-per-file={args.parts_in_flight}", to="resume")
        results["resumed"]["fetched_before_kill"] = fetched_before_kill
        results["resumed"]["open_after_kill"] = open_after_kill
        if args.profile:
            if args.before_root:
                before_env = {**env, "BENCH_HFSTAGE_ROOT": args.before_root}
                timed("profile-before", child="worker-profile", child_env=before_env, to="profile-before")
            timed("profile-one-stream", "--ranges-per-file=1", child="worker-profile")
            timed("profile-parallel", f"--ranges-per-file={args.parts_in_flight}", child="worker-profile")
        final = sink.stats()
    finally:
        sink.stop()
        hub.stop()
        shutil.rmtree(tmp_root, ignore_errors=True)

    print()
    startup_cpu = results.pop("start-up only (2-byte file)")["cpu_s"]
    print(f"CPU-s/GB: the worker's CPU time less that of a run copying one 2-byte file ({startup_cpu:.2f} s), per GB")
    print(f"{'':30}{'MB/s':>9}{'seconds':>9}{'peak RSS MiB':>14}{'CPU s':>8}{'CPU-s/GB':>10}{'Hub MiB':>10}")
    for name, stats in results.items():
        print(
            f"{name:30}{size / 1e6 / stats['wall_s']:9.0f}{stats['wall_s']:9.2f}{stats['max_rss_kib'] / 1024:14.0f}"
            f"{stats['cpu_s']:8.1f}{(stats['cpu_s'] - startup_cpu) / (size / 1e9):10.2f}"
            f"{stats['hub_bytes'] / MiB:10.0f}"
        )
    one, par, res = results["one-stream"], results["parallel"], results["resumed"]
    bound = args.part_size_mib * args.parts_in_flight + 200
    print()
    print(f"parallel ranges / one stream:       {one['wall_s'] / par['wall_s']:.2f}x  (goal >= 4x)")
    print(
        f"peak RSS: one stream {one['max_rss_kib'] / 1024:.0f} MiB, parallel {par['max_rss_kib'] / 1024:.0f} MiB; "
        f"bound part size x parts in flight + 200 = {bound} MiB"
    )
    wasted = res["fetched_before_kill"] + res["hub_bytes"] - size
    print(
        f"resume: killed after {res['fetched_before_kill'] / MiB:.0f} MiB of {size / MiB:.0f} MiB fetched "
        f"({res['open_after_kill']} uploads open after the kill); the rerun fetched {res['hub_bytes'] / MiB:.0f} MiB; "
        f"fetched twice {wasted / MiB:.0f} MiB = {wasted / part:.1f} parts "
        f"(goal: under one part per part in flight, {args.parts_in_flight}); the rerun fetched "
        f"{res['hub_bytes'] / size:.0%} of the file (issue 40's goal after a kill at 70 %: at most 40 %)"
    )
    for line in res["output"].splitlines():
        if any(f" event={name} " in line for name in ("resumable", "resume_upload", "resume_discarded", "resume")):
            print("  resumed run: " + line.split(" ", 1)[-1])
    for name in ("profile-before", "profile-one-stream", "profile-parallel"):
        if name in results:
            text = results[name]["output"]
            print(f"\n{name}: top functions by own CPU time (all threads, seconds)")
            print(text.split("PROFILE-BEGIN", 1)[-1].split("PROFILE-END", 1)[0].rstrip())
    print(
        f"\nsink: {final['requests'].get('UploadPart', 0)} parts, {final['open_uploads']} uploads left open, "
        f"{final['crc_mismatches']} CRC mismatches"
    )
    return 0 if final["open_uploads"] == 0 else 1


def repeated_kills(args: argparse.Namespace) -> int:
    """The repository (round(8 x scale) shards of 256 MiB and the small files) from a Hub that paces each
    connection, staged by ``--kills`` runs each SIGKILLed once ``--kill-every`` of the repository has been fetched
    in that run, then one run to the end: bytes fetched from the Hub in all, against the repository's size."""
    from tests.fakes.fake_hub import FakeHub, Synthetic

    shards = max(1, round(8 * args.scale))
    files: dict[str, Any] = {"config.json": b"{}", "tokenizer.json": Synthetic(7 * MiB, seed=999)}
    files.update({f"model-{i:05d}-of-{shards:05d}.safetensors": Synthetic(SHARD, seed=i) for i in range(shards)})
    total = sum(len(v) if isinstance(v, bytes) else v.size for v in files.values())
    hub = FakeHub(connection_bytes_per_s=args.connection_mb_s * 1e6).start()
    hub.add_repo("bench/kills", files)
    sink = Sink()
    tmp_root = tempfile.mkdtemp(prefix="staging-bench-", dir=str(ROOT / "benchmarks"))
    flags = [
        "--repo-id=bench/kills",
        f"--destination=s3://{BUCKET}/kills/",
        f"--part-size-mib={args.part_size_mib}",
        f"--parts-in-flight={args.parts_in_flight}",
        f"--files-in-flight={args.files_in_flight}",
        "--progress-interval-s=0",
        f"--resource-config={Path(tmp_root) / 'none.json'}",
        f"--failure-file={Path(tmp_root) / 'message'}",
    ]

    def fetched() -> int:
        return sum(hub.bytes_sent(name) for name in files)

    rows = []
    try:
        env = bench_env(sink.endpoint, hub.endpoint, tmp_root)
        create_bucket(sink.endpoint)
        print(
            f"repository of {total / GiB:.2f} GiB ({shards} x 256 MiB shards + 2 small files), each Hub connection "
            f"paced at {args.connection_mb_s:.0f} MB/s; {args.kills} runs killed after {args.kill_every:.0%} of it "
            f"each, then one to the end; part size {args.part_size_mib} MiB, {args.parts_in_flight} parts in flight",
            flush=True,
        )
        for _ in range(args.kills):
            start = fetched()
            kill_when(env, flags, lambda start=start: fetched() - start >= args.kill_every * total)
            rows.append(fetched() - start)
        start = fetched()
        final_run = run_child(env, "worker", *flags)
        rows.append(fetched() - start)
        final = sink.stats()
    finally:
        sink.stop()
        hub.stop()
        shutil.rmtree(tmp_root, ignore_errors=True)
    for n, got in enumerate(rows[:-1], start=1):
        print(f"run {n}, killed:   fetched {got / MiB:7.0f} MiB")
    print(f"last run, to the end: fetched {rows[-1] / MiB:7.0f} MiB")
    manifest = " event=manifest " in final_run["output"]
    print(
        f"fetched in all: {sum(rows) / MiB:.0f} MiB for a {total / MiB:.0f} MiB repository = {sum(rows) / total:.2f}x "
        f"(issue 40's goal: at most 1.5x); manifest written at the end: {manifest}; sink: "
        f"{final['open_uploads']} uploads left open, {final['crc_mismatches']} CRC mismatches"
    )
    return 0 if final["open_uploads"] == 0 and manifest and final["crc_mismatches"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1.0: 8 shards of 256 MiB and one 2 GiB file")
    parser.add_argument("--part-size-mib", type=int, default=64)
    parser.add_argument("--parts-in-flight", type=int, default=8)
    parser.add_argument("--files-in-flight", type=int, default=4)
    parser.add_argument("--single-file", action="store_true", help="only the one-large-file runs (and resume)")
    parser.add_argument("--connection-mb-s", type=float, default=40.0, help="per-connection pace, --single-file")
    parser.add_argument("--kills", type=int, default=0, help="runs killed in turn before one runs to the end")
    parser.add_argument("--kill-every", type=float, default=0.15, help="--kills: share of the repository per run")
    parser.add_argument("--kill-at", type=float, default=0.7, help="--single-file: kill when this share is fetched")
    parser.add_argument("--profile", action="store_true", help="--single-file: also profile the worker")
    parser.add_argument("--before-root", help="--single-file: a folder holding an older hfstage/ to compare")
    args = parser.parse_args(argv)
    if args.single_file:
        return single_file(args)
    if args.kills:
        return repeated_kills(args)

    from tests.fakes.fake_hub import FakeHub, Synthetic

    part = args.part_size_mib * MiB
    shards = max(1, round(8 * args.scale))
    big = max(SHARD, int(2 * GiB * args.scale) // MiB * MiB)
    small = {
        "config.json": json.dumps({"architectures": ["BenchForCausalLM"], "hidden_size": 4096}).encode(),
        "generation_config.json": b'{"temperature": 0.7}',
        "tokenizer_config.json": b'{"model_max_length": 32768}' + b" " * 5000,
        "model.safetensors.index.json": json.dumps(
            {"weight_map": {f"layer.{i}": f"model-{i % shards:05d}.safetensors" for i in range(500)}}
        ).encode(),
        "tokenizer.json": Synthetic(7 * MiB, seed=999),
    }
    files = {**small, **{f"model-{i:05d}-of-{shards:05d}.safetensors": Synthetic(SHARD, seed=i) for i in range(shards)}}
    total = sum(len(v) if isinstance(v, bytes) else v.size for v in files.values())

    t0 = time.perf_counter()
    hub = FakeHub().start()
    hub.add_repo("bench/shards", files)
    hub.add_repo("bench/one-big", {"config.json": small["config.json"], "model.safetensors": Synthetic(big, seed=1000)})
    setup_s = time.perf_counter() - t0
    sink = Sink()
    tmp_root = tempfile.mkdtemp(prefix="staging-bench-", dir=str(ROOT / "benchmarks"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_"))}
        env.update(
            AWS_ENDPOINT_URL_S3=sink.endpoint,
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
            HF_ENDPOINT=hub.endpoint,
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HOME=str(Path(tmp_root) / "hf-home"),
            BENCH_TMP=tmp_root,
            PYTHONPATH=str(ROOT),
            # Byte-compiling our modules on import would count as disk writes; a zip import never writes them.
            PYTHONDONTWRITEBYTECODE="1",
        )
        import boto3

        boto3.session.Session().client(
            "s3",
            endpoint_url=sink.endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        ).create_bucket(Bucket=BUCKET)
        flags = [
            f"--part-size-mib={args.part_size_mib}",
            f"--parts-in-flight={args.parts_in_flight}",
            f"--files-in-flight={args.files_in_flight}",
            "--progress-interval-s=5",
            f"--resource-config={Path(tmp_root) / 'none.json'}",
            f"--failure-file={Path(tmp_root) / 'message'}",
        ]
        print(
            f"repository: {len(files)} files, {total / GiB:.2f} GiB ({shards} x 256 MiB shards + "
            f"{len(small)} small files); part size {args.part_size_mib} MiB, {args.parts_in_flight} parts and "
            f"{args.files_in_flight} files in flight; fake Hub set up (hashes) in {setup_s:.1f} s; "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )

        def sink_delta(step):
            before, steal_before = sink.stats(), steal_seconds()
            result = step()
            after = sink.stats()
            result["steal_s"] = steal_seconds() - steal_before
            result["sink_cpu_s"] = after["cpu_s"] - before["cpu_s"]
            result["sink_bytes"] = after["bytes_received"] - before["bytes_received"]
            return result

        raw_read = run_child(env, "raw-read", "bench/shards", str(args.files_in_flight))
        raw_write = sink_delta(lambda: run_child(env, "raw-write", str(total), str(part), str(args.parts_in_flight)))
        worker = sink_delta(
            lambda: run_child(env, "worker", "--repo-id=bench/shards", f"--destination=s3://{BUCKET}/worker/", *flags)
        )
        baseline = sink_delta(
            lambda: run_child(
                env, "baseline", "bench/shards", f"s3://{BUCKET}/baseline/", str(part), str(args.parts_in_flight)
            )
        )
        single = run_child(env, "worker", "--repo-id=bench/one-big", f"--destination=s3://{BUCKET}/one-big/", *flags)
        final = sink.stats()
    finally:
        sink.stop()
        hub.stop()
        shutil.rmtree(tmp_root, ignore_errors=True)

    def mb_s(nbytes: float, seconds: float) -> float:
        return nbytes / 1e6 / seconds

    worker_rate = mb_s(total, worker["wall_s"])
    baseline_rate = mb_s(total, baseline["wall_s"])
    read_rate = mb_s(raw_read["bytes"], raw_read["wall_s"])
    write_rate = mb_s(raw_write["bytes"], raw_write["wall_s"])
    bound_mib = args.part_size_mib * args.parts_in_flight + 200
    cores = os.cpu_count() or 1
    busy = (worker["cpu_s"] + worker["hub_cpu_s"] + worker["sink_cpu_s"]) / worker["wall_s"]
    steal = worker["steal_s"] / worker["wall_s"]
    summary = summary_fields(worker["output"])

    print()
    print(f"{'':34}{'MB/s':>9}{'seconds':>9}{'peak RSS MiB':>14}{'disk writes':>13}{'CPU s':>8}")
    rows = [
        ("raw read from the fake Hub", read_rate, raw_read),
        ("raw multipart write to the sink", write_rate, raw_write),
        ("worker (hfstage), 256 MiB shards", worker_rate, worker),
        ("baseline: snapshot_download+upload", baseline_rate, baseline),
        (f"worker, one {big / GiB:.2f} GiB file", mb_s(big + len(small["config.json"]), single["wall_s"]), single),
    ]
    for name, rate, stats in rows:
        print(
            f"{name:34}{rate:9.0f}{stats['wall_s']:9.2f}{stats['vm_hwm_kib'] / 1024:14.0f}"
            f"{stats['write_bytes']:13d}{stats['cpu_s']:8.1f}"
        )
    print()
    print(f"worker / baseline throughput:        {worker_rate / baseline_rate:.2f}x  (must be >= 1.0)")
    print(f"worker / raw Hub read throughput:    {worker_rate / read_rate:.2f}x")
    print(f"worker / raw sink write throughput:  {worker_rate / write_rate:.2f}x")
    print(
        f"baseline split: download {baseline['download_s']:.2f} s, upload "
        f"{baseline['wall_s'] - baseline['download_s']:.2f} s; it wrote {baseline['write_bytes'] / MiB:.0f} MiB "
        f"to local disk, the worker {worker['write_bytes']} bytes"
    )
    for label, stats in (("256 MiB shards", worker), (f"one {big / GiB:.2f} GiB file", single)):
        peak = stats["vm_hwm_kib"] / 1024
        verdict = "within" if peak <= bound_mib else "ABOVE"
        print(
            f"worker peak RSS, {label}: {peak:.0f} MiB, {verdict} part size x parts in flight + 200 MiB "
            f"= {args.part_size_mib} x {args.parts_in_flight} + 200 = {bound_mib} MiB"
        )
    print(
        f"CPU during the worker run: worker {worker['cpu_s'] / worker['wall_s']:.2f} cores, fake Hub "
        f"{worker['hub_cpu_s'] / worker['wall_s']:.2f}, sink {worker['sink_cpu_s'] / worker['wall_s']:.2f}: "
        f"{busy:.2f} of {cores} cores busy, plus {steal:.2f} taken by the hypervisor (steal)"
    )
    ceiling = min(read_rate, write_rate)
    if busy + steal >= 0.8 * cores:
        limit = (
            f"CPU: {busy:.2f} of the {cores} cores are busy with the three processes ({steal:.2f} more stolen by "
            f"the hypervisor); the worker itself needs "
            f"{worker['cpu_s'] / (total / 1e9):.1f} CPU-s per GB (SHA-256 and the checksum of every byte, socket "
            "copies), "
            f"i.e. about {total / 1e6 / worker['cpu_s']:.0f} MB/s per core"
        )
    elif worker_rate >= 0.8 * ceiling:
        limit = "the " + ("fake Hub (source)" if read_rate <= write_rate else "sink (destination)")
    else:
        limit = "the worker's pipeline (neither the servers nor the CPUs are saturated)"
    print(f"limiting side: {limit}")
    print(
        "a large file is fetched as several byte ranges at once (hashed in order); --single-file measures that "
        "against one stream on a Hub that paces each connection"
    )
    print(
        f"worker CPU per GB (including start-up): {worker['cpu_s'] / (total / 1e9):.2f} CPU-s/GB on the shards, "
        f"{single['cpu_s'] / (big / 1e9):.2f} on the one large file"
    )
    print(
        f"worker summary: files={summary.get('files')} uploaded={summary.get('uploaded')} "
        f"skipped={summary.get('skipped')} mb_per_s={summary.get('mb_per_s')}; sink: "
        f"{final['requests'].get('UploadPart', 0)} parts, {final['open_uploads']} uploads left open, "
        f"{final['crc_mismatches']} CRC mismatches"
    )
    return 0 if worker_rate >= baseline_rate and worker["write_bytes"] == 0 else 1


CHILDREN = {
    "worker": lambda stats, rest: child_worker(stats, rest),
    "worker-profile": lambda stats, rest: child_worker_profile(stats, rest),
    "baseline": lambda stats, rest: child_baseline(stats, rest[0], rest[1], int(rest[2]), int(rest[3])),
    "raw-read": lambda stats, rest: child_raw_read(stats, rest[0], int(rest[1])),
    "raw-write": lambda stats, rest: child_raw_write(stats, int(rest[0]), int(rest[1]), int(rest[2])),
}

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in CHILDREN:
        sys.exit(CHILDREN[sys.argv[1]](sys.argv[2], sys.argv[3:]))
    sys.exit(main())
