"""The worker's command line as a user meets it: ``--help``, the defaults the README promises, and the reason
each bad argument is refused (a Processing job's ExitMessage is all the user reads)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hfstage.transfer import Settings
from hfstage.worker import EXIT_USAGE, Failure, build_parser, main, make_s3_client, parse_args

ROOT = Path(__file__).resolve().parents[2]
OK = ["--repo-id=Org/Name", "--destination=s3://bkt/p/"]

# Each option's line in ``--help``: what it does, and its default where it has one (docs/guide/staging.md,
# "The worker, by hand").
HELP = {
    "--repo-id": "Hugging Face model repository, e.g. Qwen/Qwen3-8B",
    "--revision": "branch, tag or commit SHA (default: main)",
    "--destination": "s3://bucket/prefix/: files go to <prefix>/<Org>--<Name>/<sha>/",
    "--include": "glob of files to copy (repeatable, or one JSON array); default all",
    "--exclude": "glob of files to skip (repeatable, or one JSON array)",
    "--token-secret-arn": "Secrets Manager secret holding the Hub token; default: $HF_TOKEN, if set",
    "--part-size-mib": "multipart part size in MiB, 5-5120 (default 64)",
    "--parts-in-flight": "part buffers in memory, all files together (default 8)",
    "--files-in-flight": "files copied at once (default 4)",
    "--ranges-per-file": "byte ranges of one file fetched at once; 1: one stream",
    "--range-size-mib": "size of each such range, at most (default 16)",
    "--max-attempts": "failures of a file in a row with no new byte read (default 5)",
    "--retry-base-s": "first retry delay; doubles each attempt (default 1)",
    "--retry-window-s": "a file failing this long stops (default 1800)",
    "--timeout-s": "Hub connect/read timeout in seconds (default 60)",
    "--resource-config": "host list of a multi-instance job (/opt/ml/config/resourceconfig.json)",
    "--leader-wait-s": "how long the leader waits for the other hosts",
    "--leader-poll-s": "how often the leader checks the other hosts' files",
    "--progress-interval-s": "seconds between progress lines; 0: none",
    "--pack-as-tarball": "one gzip tar of the files (a LoRA adapter's ArtifactUrl)",
    "--failure-file": "where the failure reason goes (default $HFSTAGE_FAILURE_FILE or /opt/ml/output/message)",
}


def test_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"], prog="hfstage") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: hfstage ")
    assert "Copy one Hugging Face model revision into S3, verified, with no local copy." in text
    for option, help_text in HELP.items():
        assert re.search(rf"{re.escape(option)}( [A-Z_]+)? {re.escape(help_text)}", text), option
    assert {a.option_strings[-1] for a in build_parser()._actions} - {"--help"} == set(HELP)


def test_defaults_are_the_ones_the_readme_promises() -> None:
    args = parse_args(OK)
    readme = " ".join((ROOT / "docs" / "guide" / "staging.md").read_text().split())
    promised = {
        "part_size_mib": 64,
        "parts_in_flight": 8,
        "files_in_flight": 4,
        "ranges_per_file": 8,
        "range_size_mib": 16,
        "max_attempts": 5,
        "retry_base_s": 1,
        "retry_window_s": 1800,
        "timeout_s": 60,
        "progress_interval_s": 10,
    }
    for name, value in promised.items():
        assert getattr(args, name) == value
        assert re.search(rf"`--{name.replace('_', '-')}` \((?:[^)]*, )?{value}\b", readme), name
    assert (args.revision, args.include, args.exclude, args.token_secret_arn, args.failure_file) == (
        "main",
        [],
        [],
        None,
        None,
    )
    assert args.resource_config == "/opt/ml/config/resourceconfig.json"
    assert (args.leader_wait_s, args.leader_poll_s) == (6 * 3600.0, 15.0)  # a job's other hosts: hours, polled
    assert (args.bucket, args.prefix, args.repo_id) == ("bkt", "p/", "Org/Name")


def test_numbers_are_parsed_as_numbers() -> None:
    args = parse_args(
        [
            *OK,
            "--part-size-mib=6",
            "--parts-in-flight=3",
            "--files-in-flight=2",
            "--ranges-per-file=1",
            "--range-size-mib=3",
            "--max-attempts=9",
            "--retry-base-s=0.5",
            "--timeout-s=2.5",
            "--leader-wait-s=7",
            "--leader-poll-s=0.5",
            "--progress-interval-s=0",
            "--revision=v1.0",
            "--token-secret-arn=arn:aws:secretsmanager:eu-west-1:1:secret:x",
            "--failure-file=/tmp/m",
            "--resource-config=/tmp/rc.json",
        ]
    )
    assert (args.part_size_mib, args.parts_in_flight, args.files_in_flight, args.ranges_per_file) == (6, 3, 2, 1)
    assert (args.max_attempts, args.retry_base_s, args.timeout_s, args.range_size_mib) == (9, 0.5, 2.5, 3)
    assert (args.leader_wait_s, args.leader_poll_s, args.progress_interval_s) == (7.0, 0.5, 0.0)
    assert (args.revision, args.failure_file, args.resource_config) == ("v1.0", "/tmp/m", "/tmp/rc.json")
    assert args.token_secret_arn == "arn:aws:secretsmanager:eu-west-1:1:secret:x"


def test_the_bucket_root_is_a_destination() -> None:
    assert (parse_args(["--repo-id=Org/Name", "--destination=s3://bkt"]).prefix) == ""
    assert (parse_args(["--repo-id=Name", "--destination=s3://bkt/"]).prefix) == ""


def refused(*argv: str) -> str:
    with pytest.raises(Failure) as caught:
        parse_args(list(argv))
    assert caught.value.code == EXIT_USAGE
    return caught.value.message


def test_every_problem_is_reported_at_once_with_the_value_given() -> None:
    message = refused(
        "--repo-id=bad id",
        "--revision=a b",
        "--destination=/local/dir",
        "--part-size-mib=5121",
        "--files-in-flight=0",
        "--ranges-per-file=0",
        "--range-size-mib=0",
        "--max-attempts=0",
        "--retry-base-s=-1",
        "--timeout-s=0",
        "--leader-wait-s=-1",
        "--leader-poll-s=-0.5",
    )
    assert message == (
        "bad arguments: --repo-id 'bad id' is not a repository id like Org/Name; "
        "--revision 'a b' is not a branch, tag or commit SHA; "
        "--destination '/local/dir' is not s3://<bucket>/<prefix>/; "
        "--part-size-mib 5121 is outside 5-5120; "
        "--files-in-flight must be at least 1; --ranges-per-file must be at least 1; "
        "--range-size-mib must be at least 1; --max-attempts must be at least 1; "
        "--retry-base-s must be positive; --timeout-s must be positive; "
        "--leader-wait-s must be positive; --leader-poll-s must be positive"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--revision="], "--revision '' is not a branch, tag or commit SHA"),
        (["--revision=" + "a" * 256], "is not a branch, tag or commit SHA"),
        (["--revision=a\x01b"], "is not a branch, tag or commit SHA"),
        (["--revision=a\tb"], "is not a branch, tag or commit SHA"),
        (["--part-size-mib=4"], "--part-size-mib 4 is outside 5-5120"),
        (["--parts-in-flight=0"], "--parts-in-flight must be at least 1"),
        (["--include=[not json"], "bad arguments: '[not json' is not a JSON array of patterns"),
        (['--include=["a", 1]'], """bad arguments: '["a", 1]' is not a JSON array of strings"""),
        (['--exclude=[{"a": 1}]'], """bad arguments: '[{"a": 1}]' is not a JSON array of strings"""),
    ],
)
def test_a_bad_value_is_refused_with_its_reason(argv: list[str], message: str) -> None:
    assert message in refused(*OK, *argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--revision=" + "a" * 255],
        ["--part-size-mib=5"],
        ["--part-size-mib=5120"],
        ["--retry-base-s=0", "--leader-wait-s=0", "--leader-poll-s=0"],
        ["--parts-in-flight=1", "--files-in-flight=1", "--ranges-per-file=1", "--range-size-mib=1", "--max-attempts=1"],
    ],
)
def test_values_at_the_limits_are_accepted(argv: list[str]) -> None:
    parse_args([*OK, *argv])


@pytest.mark.parametrize(
    ("repo_id", "ok"),
    [
        ("Qwen/Qwen3-8B", True),
        ("gpt2", True),
        ("a" * 96 + "/" + "b" * 96, True),
        ("a" * 97 + "/b", False),
        ("Org/Name/extra", False),
        ("-org/name", False),
        ("org/.name", False),
        ("org/na me", False),
    ],
)
def test_repository_ids(repo_id: str, ok: bool) -> None:
    argv = [f"--repo-id={repo_id}", "--destination=s3://bkt/p/"]
    if ok:
        assert parse_args(argv).repo_id == repo_id
    else:
        assert f"--repo-id {repo_id!r} is not a repository id like Org/Name" in refused(*argv)


@pytest.mark.parametrize(
    ("destination", "ok"),
    [
        ("s3://my.bucket-1/a/b/", True),
        ("s3://abc", True),
        ("s3://ab/p", False),  # bucket names are 3-63 characters
        ("s3://" + "a" * 64 + "/p", False),
        ("s3://My-Bucket/p", False),
        ("s3://-bucket/p", False),
        ("s3://bucket-/p", False),
        ("S3://bucket/p", False),
        ("https://bucket/p", False),
    ],
)
def test_destinations(destination: str, ok: bool) -> None:
    argv = ["--repo-id=Org/Name", f"--destination={destination}"]
    if ok:
        assert parse_args(argv).bucket == destination[5:].split("/")[0]
    else:
        assert f"--destination {destination!r} is not s3://<bucket>/<prefix>/" in refused(*argv)


def test_a_long_bad_value_is_cut_in_the_reason() -> None:
    message = refused("--repo-id=" + "x y" * 200, "--destination=s3://bkt/p/")
    assert f"--repo-id {('x y' * 200)[:200]!r} is not" in message


def test_a_missing_required_argument_is_a_usage_error() -> None:
    assert refused("--destination=s3://bkt/p/").startswith("bad arguments: the following arguments are required")


def test_the_s3_client_is_sized_for_the_parts_and_files_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    config = make_s3_client(Settings(parts_in_flight=5, files_in_flight=3)).meta.config
    assert config.max_pool_connections == 5 + 3 + 16
    assert config.retries == {"mode": "standard", "total_max_attempts": 6}  # botocore: max_attempts 5 retries
    assert (config.connect_timeout, config.read_timeout, config.tcp_keepalive) == (10, 120, True)
    assert config.s3 == {"payload_signing_enabled": False}
