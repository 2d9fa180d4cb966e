"""Where the worker's Hub token comes from: Secrets Manager (in the secret's own region), else $HF_TOKEN; and
what the user reads when the secret cannot be used (never the secret's value)."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from hfstage.worker import EXIT_USAGE, Failure, read_token
from tests.fakes.fixtures import S3Env, boto_session, s3  # noqa: F401

ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hf-AbCdEf"


class Secrets:
    """A Secrets Manager client answering one GetSecretValue (or raising)."""

    def __init__(self, answer: dict | Exception) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def get_secret_value(self, SecretId: str) -> dict:
        self.asked.append(SecretId)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "token"),
    [
        ({"SecretString": "hf_plain"}, "hf_plain"),
        ({"SecretString": json.dumps({"HF_TOKEN": "hf_json"})}, "hf_json"),
        ({"SecretString": json.dumps({"token": " hf_first ", "HF_TOKEN": "hf_second"})}, "hf_first"),
        ({"SecretBinary": b"hf_binary\n"}, "hf_binary"),
        ({"SecretString": "hf_string", "SecretBinary": b"hf_binary"}, "hf_string"),
        ({"SecretBinary": b"hf_\xffx"}, "hf_\ufffdx"),  # not UTF-8: read anyway (the Hub will refuse it)
    ],
)
def test_the_token_comes_from_the_secret(answer: dict, token: str) -> None:
    secrets = Secrets(answer)
    assert read_token(ARN, secrets) == token
    assert secrets.asked == [ARN]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({}, "the secret is empty"),
        ({"SecretString": ""}, "the secret is empty"),
        ({"SecretBinary": b"  "}, "the secret is empty"),
        ({"SecretString": "{oops"}, "the secret looks like JSON but does not parse"),
    ],
)
def test_an_unusable_secret_is_an_argument_error(answer: dict, reason: str) -> None:
    with pytest.raises(Failure) as failed:
        read_token(ARN, Secrets(answer))
    assert failed.value.code == EXIT_USAGE
    assert failed.value.message == f"the Hub token secret {ARN} is unusable: {reason}"


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            ClientError(
                {"Error": {"Code": "AccessDeniedException"}, "ResponseMetadata": {"HTTPStatusCode": 400}},
                "GetSecretValue",
            ),
            "AccessDeniedException (HTTP 400)",
        ),
        (NoCredentialsError(), "NoCredentialsError"),
    ],
)
def test_a_secret_that_cannot_be_read_says_what_to_check(error: Exception, said: str) -> None:
    with pytest.raises(Failure) as failed:
        read_token(ARN, Secrets(error))
    assert failed.value.code == EXIT_USAGE
    assert failed.value.message == (
        f"cannot read the Hub token secret {ARN}: {said}: check hf_token_secret_arn and the job role's "
        "secretsmanager:GetSecretValue permission"
    )


def test_without_a_secret_the_environment_token_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert read_token(None) == "hf_env" and read_token("") == "hf_env"
    monkeypatch.setenv("HF_TOKEN", "")
    assert read_token(None) is None
    monkeypatch.delenv("HF_TOKEN")
    assert read_token(None) is None


def test_the_secret_is_read_in_its_own_region(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The job runs in the stack's region; the secret's ARN names the region to ask (here not the default)."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    there = boto_session().client("secretsmanager", region_name="eu-west-1")
    arn = there.create_secret(Name="hf-token", SecretString="hf_in_eu_west_1")["ARN"]
    assert ":eu-west-1:" in arn
    assert read_token(arn) == "hf_in_eu_west_1"


def test_a_secret_name_instead_of_an_arn_uses_the_default_region(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    boto_session().client("secretsmanager", region_name="us-east-1").create_secret(Name="by-name", SecretString="hf_n")
    assert read_token("by-name") == "hf_n"
