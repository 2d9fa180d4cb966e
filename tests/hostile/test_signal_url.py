"""Hostile WaitHandle URLs for the staging handler's signal: only a CloudFormation wait-condition handle gets a PUT.

A ``WaitHandle`` comes from the resource's properties (on_event, is_complete) or from the EventBridge target's
input (on_job_state_change) and the on-failure record (on_signal_failure). Anything but the presigned URL a
``Ref`` of ``AWS::CloudFormation::WaitConditionHandle`` returns is refused with its reason before any request:
the tests route every https request of the handler's own opener to a local receiver, so a URL that got through
would show up there. Generated inputs are bounded (``max_examples``); ``TALLY`` counts the hostile inputs tried
and refused (printed at the end of the module with ``pytest -s``).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.provisional import domains

from tests.conftest import load_lambda
from tests.handlers.test_staging_handler import WAIT_HANDLE, SignalReceiver, properties

TALLY: Counter[str] = Counter()  # "<area> tried" / "<area> refused" (or "passed" for the real forms)
BOUNDED = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
HOST = urllib.parse.urlsplit(WAIT_HANDLE).netloc
KEY_AND_QUERY = WAIT_HANDLE.split(HOST, 1)[1]  # "/arn%3Aaws...?X-Amz-Algorithm=..."
SIGV4 = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261129T000000Z&X-Amz-SignedHeaders=host&X-Amz-Expires=86399"
    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261129%2F{region}%2Fs3%2Faws4_request&X-Amz-Signature=" + "ab" * 32
)
KEY = "/arn%3A{partition}%3Acloudformation%3A{region}%3A123456789012%3Astack/S/6f0c5c20-0000/6f0c5c21-0000/WaitHandle"


@pytest.fixture(scope="module")
def module():
    return load_lambda("staged_checkpoint", "lambda_staged_checkpoint_signal_url")


@pytest.fixture(scope="module", autouse=True)
def _report_tally():
    yield
    print("\nhostile inputs: " + ", ".join(f"{k}={v}" for k, v in sorted(TALLY.items())))


def refused(module, url, area: str) -> bool:
    problem = module.wait_handle_problem(url)
    TALLY[f"{area} tried"] += 1
    TALLY[f"{area} refused"] += problem is not None
    return problem is not None


def handle(host: str, *, region: str = "us-east-1", partition: str = "aws", query: str | None = None) -> str:
    key = KEY.format(partition=partition, region=region)
    return f"https://{host}{key}?{SIGV4.format(region=region) if query is None else query}"


# -- the real forms pass --------------------------------------------------------------------------------------

# (host, region, partition): S3's global, regional and legacy virtual-hosted forms, China and GovCloud.
REAL = [
    ("cloudformation-waitcondition-us-east-1.s3.amazonaws.com", "us-east-1", "aws"),  # the user guide's form
    ("cloudformation-waitcondition-eu-west-3.s3.eu-west-3.amazonaws.com", "eu-west-3", "aws"),
    ("cloudformation-waitcondition-us-west-2.s3-us-west-2.amazonaws.com", "us-west-2", "aws"),
    ("cloudformation-waitcondition-ap-southeast-5.s3.ap-southeast-5.amazonaws.com", "ap-southeast-5", "aws"),
    ("cloudformation-waitcondition-cn-north-1.s3.cn-north-1.amazonaws.com.cn", "cn-north-1", "aws-cn"),
    ("cloudformation-waitcondition-cn-northwest-1.s3.cn-northwest-1.amazonaws.com.cn", "cn-northwest-1", "aws-cn"),
    ("cloudformation-waitcondition-us-gov-west-1.s3.us-gov-west-1.amazonaws.com", "us-gov-west-1", "aws-us-gov"),
    ("cloudformation-waitcondition-us-east-1.s3.amazonaws.com:443", "us-east-1", "aws"),
]
SIGV2 = "Expires=1303976584&AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=ik1twT6hpS4cgNAw7wyOoRejVoo%3D"


@pytest.mark.parametrize(("host", "region", "partition"), REAL, ids=[h for h, _, _ in REAL])
def test_the_handles_cloudformation_returns_are_accepted(module, host, region, partition):
    url = handle(host, region=region, partition=partition)
    assert module.wait_handle_problem(url) is None
    assert module.wait_handle_problem(url + "&X-Amz-Security-Token=IQoJb3JpZ2luX2VjEJr%2F%2F%2Fw%3D") is None
    assert module.wait_handle_problem(handle(host, region=region, partition=partition, query=SIGV2)) is None
    TALLY["real forms passed"] += 3


REGIONS = ["us-east-1", "us-east-2", "eu-central-2", "ap-northeast-3", "il-central-1", "mx-central-1", "sa-east-1"]


@BOUNDED
@given(region=st.sampled_from(REGIONS), form=st.sampled_from(["", ".{}", "-{}"]), v2=st.booleans())
def test_generated_real_forms_are_accepted(module, region, form, v2):
    host = f"cloudformation-waitcondition-{region}.s3{form.format(region)}.amazonaws.com"
    assert module.wait_handle_problem(handle(host, region=region, query=SIGV2 if v2 else None)) is None
    TALLY["real forms passed"] += 1


# -- everything else is refused -------------------------------------------------------------------------------

HOSTILE = {
    "loopback": "http://127.0.0.1:8080/signal?X-Amz-Signature=abc",
    "loopback-https": handle("127.0.0.1"),
    "localhost": handle("localhost"),
    "metadata": handle("169.254.169.254"),
    "ipv6": handle("[::1]"),
    "file": "file:///etc/passwd",
    "file-host": "file://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/etc/passwd",
    "data": "data:text/plain,SUCCESS",
    "ftp": WAIT_HANDLE.replace("https://", "ftp://", 1),
    "http": WAIT_HANDLE.replace("https://", "http://", 1),
    "upper-scheme": WAIT_HANDLE.replace("https://", "HTTPS://", 1),
    "one-slash": WAIT_HANDLE.replace("https://", "https:/", 1),
    "no-scheme": WAIT_HANDLE.replace("https://", "//", 1),
    "userinfo": WAIT_HANDLE.replace("https://", "https://user:pass@", 1),
    "userinfo-host": WAIT_HANDLE.replace("https://", f"https://{HOST}@evil.example/", 1),
    "port": WAIT_HANDLE.replace(HOST, HOST + ":8443", 1),
    "port-empty": WAIT_HANDLE.replace(HOST, HOST + ":", 1),
    "port-443-then-user": WAIT_HANDLE.replace(HOST, HOST + ":443@evil.example", 1),
    "suffix": WAIT_HANDLE.replace(HOST, HOST + ".evil.example", 1),
    "trailing-dot": WAIT_HANDLE.replace(HOST, HOST + ".", 1),
    "prefix": WAIT_HANDLE.replace(HOST, "evil." + HOST, 1),
    "in-path": f"https://evil.example/{HOST}{KEY_AND_QUERY}",
    "percent-host": WAIT_HANDLE.replace(HOST, HOST.replace(".", "%2E", 1), 1),
    "upper-host": WAIT_HANDLE.replace(HOST, HOST.upper(), 1),
    "fullwidth-dot": WAIT_HANDLE.replace(HOST, HOST.replace(".", "\uff0e", 1), 1),
    "custom-resource-bucket": handle("cloudformation-custom-resource-response-useast1.s3.amazonaws.com"),
    "path-style": f"https://s3.amazonaws.com/cloudformation-waitcondition-us-east-1{KEY_AND_QUERY}",
    "dualstack": handle("cloudformation-waitcondition-us-east-1.s3.dualstack.us-east-1.amazonaws.com"),
    "fips": handle("cloudformation-waitcondition-us-east-1.s3-fips.us-east-1.amazonaws.com"),
    "accesspoint": handle("cloudformation-waitcondition-us-east-1.s3-accesspoint.us-east-1.amazonaws.com"),
    "website": handle("cloudformation-waitcondition-us-east-1.s3-website-us-east-1.amazonaws.com"),
    "other-bucket": handle("cloudformation-waitcondition-us-east-1-evil.s3.amazonaws.com"),
    "region-mismatch": handle("cloudformation-waitcondition-us-east-1.s3.eu-west-1.amazonaws.com"),
    "not-a-region": handle("cloudformation-waitcondition-test.s3.amazonaws.com"),
    "china-on-com": handle("cloudformation-waitcondition-cn-north-1.s3.cn-north-1.amazonaws.com"),
    "china-global": handle("cloudformation-waitcondition-cn-north-1.s3.amazonaws.com.cn", region="cn-north-1"),
    "china-legacy": handle(
        "cloudformation-waitcondition-cn-north-1.s3-cn-north-1.amazonaws.com.cn", region="cn-north-1"
    ),
    "com-cn-not-china": handle("cloudformation-waitcondition-us-east-1.s3.us-east-1.amazonaws.com.cn"),
    "no-key": handle(HOST).replace(KEY.format(partition="aws", region="us-east-1"), "/", 1),
    "no-query": WAIT_HANDLE.split("?", 1)[0],
    "no-signature": WAIT_HANDLE.split("&X-Amz-Signature=", 1)[0],
    "empty-signature": WAIT_HANDLE.split("&X-Amz-Signature=", 1)[0] + "&X-Amz-Signature=",
    "two-signatures": WAIT_HANDLE + "&X-Amz-Signature=" + "00" * 32,
    "other-algorithm": WAIT_HANDLE.replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256", 1),
    "v2-partial": handle(HOST, query="Signature=abc&Expires=1"),
    "fragment": WAIT_HANDLE + "#x",
    "newline": WAIT_HANDLE.replace(".s3.", ".s3.\n", 1),
    "tab": WAIT_HANDLE.replace("https://", "https://\t", 1),
    "space": " " + WAIT_HANDLE,
    "backslash": WAIT_HANDLE.replace(HOST + "/", HOST + "\\@evil.example/", 1),
    "nul": WAIT_HANDLE + "\x00",
    "angle-wrapped": f"<URL:{WAIT_HANDLE}>",
    "huge": WAIT_HANDLE + "&pad=" + "a" * 10_000,
    "empty": "",
    "none": None,
    "number": 443,
    "object": {"Ref": "CheckpointWaitHandle"},
}


@pytest.mark.parametrize("url", list(HOSTILE.values()), ids=list(HOSTILE))
def test_every_other_url_is_refused_with_a_reason(module, url):
    assert refused(module, url, "explicit")
    with pytest.raises(module.StagingError, match=r"^refusing to signal the wait condition: the WaitHandle \w"):
        module.require_wait_handle(url)


REASONS = {
    "file": "does not start with https:// (it starts 'file'); only https is allowed",
    "userinfo": "carries user information before its host",
    "userinfo-host": "carries user information before its host",
    "port": "names the port '8443'; only the default port 443 is allowed",
    "suffix": f"has the host '{HOST}.evil.example', not cloudformation-waitcondition-<region>.s3[.<region>].amazonaws",
    "region-mismatch": "the bucket's region us-east-1 is not the endpoint's eu-west-1",
    "china-on-com": "cn-north-1 is a China region, whose hosts end in .amazonaws.com.cn",
    "com-cn-not-china": "us-east-1 is no China region",
    "china-global": "China's S3 hosts are regional, <bucket>.s3.cn-north-1.amazonaws.com.cn",
    "no-signature": "is not presigned (no X-Amz-Signature",
    "two-signatures": "repeats the query parameter 'X-Amz-Signature'",
    "newline": "holds characters a URL may not",
    "none": "is empty",
}


@pytest.mark.parametrize("case", list(REASONS))
def test_each_refusal_says_what_is_wrong(module, case):
    with pytest.raises(module.StagingError) as error:
        module.require_wait_handle(HOSTILE[case])
    assert REASONS[case] in str(error.value)


def test_a_refusal_never_quotes_the_signature(module):
    for url in (WAIT_HANDLE.replace(HOST, "evil.example", 1), WAIT_HANDLE.replace("https", "http", 1)):
        with pytest.raises(module.StagingError) as error:
            module.require_wait_handle(url)
        assert "0123456789abcdef" not in str(error.value) and "AKIA" not in str(error.value)


@BOUNDED
@given(host=domains() | st.ip_addresses().map(str))
def test_generated_hosts_are_refused(module, host):
    assert refused(module, handle(host), "generated hosts")


LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


@BOUNDED
@given(label=LABEL, where=st.sampled_from(["{label}.{host}", "{host}.{label}", "{host}{label}", "{label}{host}"]))
def test_lookalikes_of_a_real_host_are_refused(module, label, where):
    assert refused(module, handle(where.format(label=label, host=HOST)), "lookalike hosts")


@BOUNDED
@given(scheme=st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,10}", fullmatch=True).filter(lambda s: s != "https"))
def test_generated_schemes_are_refused(module, scheme):
    assert refused(module, scheme + WAIT_HANDLE.removeprefix("https"), "generated schemes")


@BOUNDED
@given(port=st.integers(0, 99_999).filter(lambda p: p != 443).map(str) | st.sampled_from(["0443", "+443", "443 "]))
def test_generated_ports_are_refused(module, port):
    assert refused(module, WAIT_HANDLE.replace(HOST, f"{HOST}:{port}", 1), "generated ports")


@BOUNDED
@given(user=st.text(st.sampled_from("abcXYZ019-._~%!$&'()*+,;=:"), max_size=12))
def test_generated_user_information_is_refused(module, user):
    assert refused(module, WAIT_HANDLE.replace("https://", f"https://{user}@", 1), "generated userinfo")


@BOUNDED
@given(dropped=st.sets(st.sampled_from(sorted(["X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date",
                                               "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"])),
                       min_size=1))  # fmt: skip
def test_a_handle_missing_any_signature_parameter_is_refused(module, dropped):
    parts = urllib.parse.urlsplit(WAIT_HANDLE)
    query = "&".join(p for p in parts.query.split("&") if p.split("=", 1)[0] not in dropped)
    assert refused(module, parts._replace(query=query).geturl(), "dropped signature parameters")


@BOUNDED
@given(
    at=st.integers(0, len(WAIT_HANDLE)),
    char=st.characters(categories=("Cc", "Cf", "Zs", "Zl", "Zp")) | st.sampled_from('\\ "<>^`{|}\u00e9\u0430'),
)
def test_a_character_no_url_holds_anywhere_is_refused(module, at, char):
    assert refused(module, WAIT_HANDLE[:at] + char + WAIT_HANDLE[at:], "injected characters")


# -- every path that signals refuses before any request -----------------------------------------------------

ENTRY_POINT_CASES = ["loopback", "loopback-https", "file", "http", "userinfo-host", "port", "suffix", "no-signature"]


class _NoCalls:
    """A boto3 client that must not be used: a bad handle is refused before AWS is asked anything."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, operation: str):
        raise AssertionError(f"{self.name}.{operation} called for a refused WaitHandle")


@pytest.fixture
def isolated(module):
    """The handler with no usable AWS client and every https request of its opener going to a receiver."""
    receiver = SignalReceiver().attach(module)
    saved = dict(module._clients)
    module._clients.clear()
    for name in ("sagemaker", "s3", "secretsmanager", "cloudformation", "service-quotas"):
        module._clients[name] = _NoCalls(name)
    yield receiver
    module._clients.clear()
    module._clients.update(saved)
    module.SIGNAL_OPENER = module.signal_opener()
    receiver.close()


def _state_change(url) -> dict:
    detail = {"ProcessingJobName": "hfstage-6eba4753-0123456789-abcdef0123", "ProcessingJobStatus": "Failed"}
    return {"WaitHandle": url, "JobNamePrefix": "hfstage-6eba4753-0123456789-", "Event": {"detail": detail}}


def _entry_points(module, url):
    # The Hub is a closed port: were the handle not refused first, on_event would fail on the Hub instead.
    props = properties(HubEndpoint="http://127.0.0.1:9", WaitHandle=url)
    yield (
        "on_event Create",
        lambda: module.on_event({"RequestType": "Create", "RequestId": "r", "ResourceProperties": props}),
    )
    update = {
        **{"RequestType": "Update", "RequestId": "r", "ResourceProperties": props, "StackId": "arn:stack"},
        **{"PhysicalResourceId": "s3://b/models/acme--tiny-llm/" + "a" * 40 + "/", "OldResourceProperties": props},
    }
    yield "on_event Update", lambda: module.on_event(update)
    yield "signal (is_complete)", lambda: module.signal(url, success=False, reason="job failed", unique_id="j")
    yield "on_job_state_change", lambda: module.on_job_state_change(_state_change(url))
    record = {"requestPayload": _state_change(url), "responsePayload": {"errorType": "E", "errorMessage": "m"}}
    yield "on_signal_failure", lambda: module.on_signal_failure(record)


@pytest.mark.parametrize("case", ENTRY_POINT_CASES)
def test_every_entry_point_refuses_before_any_request(module, isolated, case):
    url = HOSTILE[case]
    for where, call in _entry_points(module, url):
        if where == "on_event Update":
            module._clients["cloudformation"] = _NotRollingBack()
        with pytest.raises(module.StagingError, match="refusing to signal the wait condition"):
            call()
        TALLY["entry points tried"] += 1
        TALLY["entry points refused"] += 1
        assert isolated.requests == [], where
        module._clients["cloudformation"] = _NoCalls("cloudformation")


class _NotRollingBack:
    def describe_stacks(self, StackName: str) -> dict:
        return {"Stacks": [{"StackName": StackName, "StackStatus": "UPDATE_IN_PROGRESS"}]}


def test_the_event_bridge_target_refuses_a_missing_handle(module, isolated):
    event = _state_change("")
    del event["WaitHandle"]
    with pytest.raises(module.StagingError, match="the WaitHandle is empty"):
        module.on_job_state_change(event)


def test_a_real_handle_is_signalled_once_to_its_own_host_and_key(module, isolated):
    module.signal(WAIT_HANDLE, success=True, reason="staged", unique_id="u", data="sha")
    assert isolated.requests == [(HOST, KEY_AND_QUERY)]
    assert [(s["Status"], s["UniqueId"]) for s in isolated.signals] == [("SUCCESS", "u")]


# -- redirects ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "location",
    ["file:///etc/passwd", "http://127.0.0.1:1/", "data:text/plain,x", WAIT_HANDLE.replace("us-east-1", "eu-west-1")],
    ids=["file", "http", "data", "another-handle"],
)
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_from_the_handle_is_never_followed_nor_retried(module, isolated, status, location):
    isolated.answer, isolated.location = status, location
    with pytest.raises(module.StagingError, match=rf"it answered {status} \(a redirect, which a signal never follows"):
        module.signal(WAIT_HANDLE, success=True, reason="staged", unique_id="u")
    assert len(isolated.requests) == 1  # one PUT, to the handle: not to the Location, and not again
    TALLY["redirects tried"] += 1
    TALLY["redirects refused"] += 1


def test_the_signal_opener_speaks_https_only_and_follows_no_redirect(module):
    opener = module.signal_opener()
    assert set(opener.handle_open) == {"https", "unknown"}
    assert set(opener.handle_error.get("http", {})) == {"default"}  # no http_error_30x handler
    for url in ("file:///etc/passwd", "http://127.0.0.1:1/", "data:,x", "ftp://127.0.0.1/"):
        with pytest.raises(urllib.error.URLError, match="unknown url type"):
            opener.open(url, timeout=1)
    assert set(module.SIGNAL_OPENER.handle_open) == {"https", "unknown"}
