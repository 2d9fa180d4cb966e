"""How the worker classifies and words a failed call: retry it or stop, and what the user reads.

An S3 error the worker retries when it should stop wastes the job's hours; one it stops on when a retry
would do fails a deployment; a reason without its code or HTTP status leaves the user guessing.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from hfstage.hub import _retry_after
from hfstage.transfer import IntegrityError, PermanentError, TransientError, describe_client_error, s3_error
from hfstage.worker import parse_token


def client_error(code: str | None, status: int | None, operation: str = "UploadPart") -> ClientError:
    response: dict = {}
    if code is not None:
        response["Error"] = {"Code": code, "Message": "..."}
    if status is not None:
        response["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(response, operation)


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("InternalError", 500, TransientError),
        ("ServiceUnavailable", 503, TransientError),
        ("SlowDown", 503, TransientError),
        ("Whatever", 500, TransientError),  # any 5xx
        ("Whatever", 501, TransientError),
        ("TooManyRequests", 429, TransientError),
        ("RequestTimeout", 400, TransientError),  # S3 answers 400 for these (S3 API error codes)
        ("RequestTimeTooSkewed", 403, TransientError),
        ("BadDigest", 400, TransientError),  # the part arrived damaged: send it again
        ("InvalidPart", 400, TransientError),
        ("Throttling", 400, TransientError),
        ("ThrottlingException", 400, TransientError),
        ("AccessDenied", 403, PermanentError),
        ("NoSuchBucket", 404, PermanentError),
        ("InvalidRequest", 400, PermanentError),
        ("Whatever", 499, PermanentError),
        ("Whatever", 428, PermanentError),
        ("Whatever", 430, PermanentError),
        ("NoSuchUpload", 404, IntegrityError),  # the upload is gone: the file starts again
    ],
)
def test_s3_errors_are_retried_or_stop_the_run_by_code_and_status(code: str, status: int, kind: type) -> None:
    error = s3_error(client_error(code, status), "UploadPart 3 of s3://bkt/models/w")
    assert type(error) is kind
    assert str(error).startswith(f"UploadPart 3 of s3://bkt/models/w: {code} (HTTP {status})")


def test_a_code_alone_or_a_status_alone_still_classifies() -> None:
    assert type(s3_error(client_error("SlowDown", None), "PutObject")) is TransientError
    assert type(s3_error(client_error(None, 503), "PutObject")) is TransientError
    assert type(s3_error(client_error(None, 403), "PutObject")) is PermanentError
    assert type(s3_error(client_error("AccessDenied", None), "PutObject")) is PermanentError
    assert type(s3_error(ClientError({}, "PutObject"), "PutObject")) is PermanentError


def test_an_upload_aborted_elsewhere_says_so() -> None:
    error = s3_error(client_error("NoSuchUpload", 404), "UploadPart 1 of s3://bkt/k")
    assert (
        str(error) == "UploadPart 1 of s3://bkt/k: NoSuchUpload (HTTP 404) (the multipart upload was aborted elsewhere)"
    )


@pytest.mark.parametrize(
    "error",
    [EndpointConnectionError(endpoint_url="https://s3"), ReadTimeoutError(endpoint_url="https://s3")],
)
def test_connection_errors_are_retried_and_named(error: Exception) -> None:
    classified = s3_error(error, "UploadPart 2 of s3://bkt/k")
    assert type(classified) is TransientError
    assert str(classified) == f"UploadPart 2 of s3://bkt/k: {type(error).__name__}"


@pytest.mark.parametrize(
    ("code", "status", "text"),
    [
        ("AccessDenied", 403, "ListParts: AccessDenied (HTTP 403)"),
        ("404", 404, "ListParts: 404"),  # HeadObject's code is its status: said once
        (None, 503, "ListParts: 503"),
        ("SlowDown", None, "ListParts: SlowDown"),
        (None, None, "ListParts: error"),
    ],
)
def test_a_client_error_is_described_by_code_and_status(code: str | None, status: int | None, text: str) -> None:
    assert describe_client_error(client_error(code, status, "ListParts"), "ListParts") == text


def test_any_other_error_is_described_by_its_type() -> None:
    assert describe_client_error(KeyError("x"), "reading the secret") == "reading the secret: KeyError"


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        ("{not json", "the secret looks like JSON but does not parse"),
        ('{"other": "x"}', "the secret is a JSON object without a 'token' or 'HF_TOKEN' string"),
        ('{"token": "  "}', "the secret is a JSON object without a 'token' or 'HF_TOKEN' string"),
        ('{"token": 5}', "the secret is a JSON object without a 'token' or 'HF_TOKEN' string"),
        ("   ", "the secret is empty"),
    ],
)
def test_an_unusable_token_secret_says_why(secret: str, reason: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_token(secret)
    assert str(raised.value) == reason


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("7", 7.0), ("0", 0.0), ("-3", 0.0), ("1.5", 1.5), ("Wed, 21 Oct 2015 07:28:00 GMT", None), (None, None)],
)
def test_retry_after_is_seconds_never_negative(value: str | None, seconds: float | None) -> None:
    import email.message

    headers = email.message.Message()
    if value is not None:
        headers["Retry-After"] = value
    assert _retry_after(headers) == seconds
    assert _retry_after(None) is None


def test_the_hub_client_never_shows_its_token() -> None:
    from hfstage.hub import HubClient

    assert repr(HubClient("https://hub.example", token="hf_secret")) == (
        "HubClient(endpoint='https://hub.example', token=set)"
    )
    assert repr(HubClient("https://hub.example/")) == "HubClient(endpoint='https://hub.example', token=none)"


def test_the_worker_sizes_its_own_s3_client_from_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    from hfstage.worker import make_s3_client_for, parse_args

    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    args = parse_args(["--repo-id=Org/Name", "--destination=s3://bkt/p/", "--parts-in-flight=3", "--files-in-flight=2"])
    assert make_s3_client_for(args).meta.config.max_pool_connections == 3 + 2 + 16


@pytest.mark.parametrize(
    ("code", "status"),
    # Each code alone (an error answer may carry either), and the status alone (a HEAD's bodiless 403).
    [("AccessDenied", None), ("403", None), ("Forbidden", None), (None, 403)],
)
def test_a_forbidden_manifest_that_the_listing_does_not_show_is_absent(s3_stub, code, status) -> None:
    """With s3:ListBucket granted for the prefix only, S3 answers 403 (not 404) for a missing key."""
    from hfstage.manifest import read_manifest

    client, stub = s3_stub
    prefix = "models/Org--Name/" + "a" * 40 + "/"
    stub.add_client_error("get_object", code or "", http_status_code=status or 400)
    stub.add_response(
        "list_objects_v2",
        {"Contents": [{"Key": prefix + ".hf-model-manifest.json.bak", "Size": 3}]},
        {"Bucket": "bkt", "Prefix": prefix + ".hf-model-manifest.json"},
    )
    assert read_manifest(client, "bkt", prefix) is None


def test_a_forbidden_manifest_that_the_listing_shows_is_an_error(s3_stub) -> None:
    from hfstage.manifest import read_manifest

    client, stub = s3_stub
    prefix = "models/Org--Name/" + "a" * 40 + "/"
    stub.add_client_error("get_object", "AccessDenied", http_status_code=403)
    stub.add_response("list_objects_v2", {"Contents": [{"Key": prefix + ".hf-model-manifest.json", "Size": 3}]})
    with pytest.raises(ClientError, match="AccessDenied"):
        read_manifest(client, "bkt", prefix)


@pytest.mark.parametrize(("code", "status"), [("InternalError", 500), ("SlowDown", 503), ("Whatever", 400)])
def test_any_other_manifest_error_is_raised_without_a_listing(s3_stub, code, status) -> None:
    from hfstage.manifest import read_manifest

    client, stub = s3_stub
    stub.add_client_error("get_object", code, http_status_code=status)
    with pytest.raises(ClientError, match=code):
        read_manifest(client, "bkt", "p/")


# -- the Hub's answers -------------------------------------------------------------------------------------

HINT = "give a token with access through hf_token_secret_arn"


def hub_error(status: int, code: str | None = None, token: str | None = None, retry_after: str | None = None):
    import email.message

    from hfstage.hub import HubClient

    headers = email.message.Message()
    if code is not None:
        headers["X-Error-Code"] = code
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return HubClient("https://hub.example", token=token)._error_for(status, headers, "downloading a.bin", "Org/M")


@pytest.mark.parametrize(
    ("status", "code", "token", "kind", "message"),
    [
        (500, None, None, "HubUnavailable", "downloading a.bin: the Hub answered HTTP 500"),
        (502, "GatedRepo", None, "HubUnavailable", "downloading a.bin: the Hub answered HTTP 502"),
        (429, None, None, "HubUnavailable", "downloading a.bin: the Hub answered HTTP 429"),
        (403, None, None, "GatedRepo", f"Org/M is gated or private: {HINT}"),
        (401, "GatedRepo", None, "GatedRepo", f"Org/M is gated or private: {HINT}"),
        (
            403,
            None,
            "hf_tok",
            "GatedRepo",
            "Org/M is gated or private and the given token has no access to it (HTTP 403): accept the model's "
            f"conditions on the Hub with that account, or {HINT}",
        ),
        (
            401,
            "GatedRepo",
            "hf_tok",
            "GatedRepo",
            "Org/M is gated or private and the given token has no access to it (HTTP 401): accept the model's "
            f"conditions on the Hub with that account, or {HINT}",
        ),
        (
            404,
            "RevisionNotFound",
            None,
            "RevisionNotFound",
            "downloading a.bin: no such revision (branch, tag or commit) in Org/M",
        ),
        (404, "EntryNotFound", None, "EntryNotFound", "downloading a.bin: the Hub has no such file in Org/M"),
        (
            401,
            None,
            None,
            "RepoNotFound",
            "Org/M was not found on https://hub.example, or it is gated or private: check the repository id, "
            f"or {HINT}",
        ),
        (401, None, "hf_tok", "GatedRepo", f"Org/M: the Hub rejected the token (HTTP 401): {HINT}"),
        (404, None, None, "RepoNotFound", "Org/M was not found on https://hub.example: check the repository id"),
        (
            400,
            "RepoNotFound",
            None,
            "RepoNotFound",
            "Org/M was not found on https://hub.example: check the repository id",
        ),
        (400, None, None, "HubError", "downloading a.bin: the Hub answered HTTP 400"),
        (499, None, None, "HubError", "downloading a.bin: the Hub answered HTTP 499"),
    ],
)
def test_each_hub_answer_is_an_error_a_person_can_act_on(status, code, token, kind, message) -> None:
    error = hub_error(status, code, token)
    assert type(error).__name__ == kind
    assert str(error) == message
    assert error.retryable is (kind == "HubUnavailable")


def test_a_busy_hub_says_when_to_come_back() -> None:
    assert hub_error(503, retry_after="12").retry_after == 12.0
    assert hub_error(429, retry_after="3").retry_after == 3.0
    assert hub_error(503).retry_after is None


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"sha": "a" * 40, "siblings": [{"rfilename": "a"}]},  # no size
        {"sha": "a" * 40, "siblings": [{"rfilename": "a", "size": 1}]},  # no blob id
        {"sha": "a" * 40, "siblings": [{"rfilename": "a", "size": "x", "blobId": "b"}]},
        {"sha": "a" * 40, "siblings": [{"rfilename": "a", "blobId": "b", "lfs": {"oid": "c"}}]},  # lfs without size
        {"sha": "a" * 40, "siblings": [{"rfilename": "a", "blobId": "b", "lfs": {"size": 1}}]},  # lfs without hash
        {"sha": "a" * 40, "siblings": ["a"]},
        [],
    ],
)
def test_a_revision_without_sizes_or_hashes_is_refused(body) -> None:
    from hfstage.hub import HubError, parse_revision

    with pytest.raises(HubError) as refused:
        parse_revision("Org/M", body)
    assert str(refused.value) == "resolving Org/M: the Hub's answer lacks file sizes or hashes"


@pytest.mark.parametrize("sha", ["a" * 39, "a" * 41, "A" * 40, "g" * 40, None, 5])
def test_a_revision_without_a_commit_sha_is_refused(sha) -> None:
    from hfstage.hub import HubError, parse_revision

    with pytest.raises(HubError) as refused:
        parse_revision("Org/M", {"sha": sha, "siblings": []})
    assert str(refused.value) == "resolving Org/M: the Hub's answer has no commit SHA"


def test_a_revision_lists_each_file_with_its_size_and_hashes_sorted_by_path() -> None:
    from hfstage.hub import HubFile, parse_revision

    body = {
        "sha": "0123456789abcdef" * 2 + "01234567",
        "siblings": [
            {"rfilename": "w.bin", "size": 99, "blobId": "b1", "lfs": {"size": 1234, "sha256": "s" * 64, "oid": "o"}},
            {"rfilename": "old.bin", "size": 5, "blobId": "b2", "lfs": {"size": 77, "oid": "o" * 64}},
            {"rfilename": "a.json", "size": 3, "blobId": "b3"},
            {"rfilename": "n.json", "size": 4, "blobId": "b4", "lfs": None},
        ],
    }
    revision = parse_revision("Org/M", body)
    assert revision.repo_id == "Org/M" and revision.sha == body["sha"]
    assert revision.files == (
        HubFile("a.json", 3, "b3"),
        HubFile("n.json", 4, "b4"),
        HubFile("old.bin", 77, "b2", "o" * 64),  # an older answer: the LFS oid is the SHA-256
        HubFile("w.bin", 1234, "b1", "s" * 64),
    )
    assert parse_revision("Org/M", {"sha": body["sha"]}).files == ()
