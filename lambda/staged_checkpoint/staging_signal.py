"""The deployment's wait condition: which presigned URLs a WaitHandle may be, and the opener that PUTs to one."""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from typing import Any

from staging_base import StagingError

# What a WaitHandle may be: the presigned URL a Ref of AWS::CloudFormation::WaitConditionHandle returns, a PUT
# into CloudFormation's bucket cloudformation-waitcondition-<region>, dashes kept (CloudFormation User Guide:
# "Create wait conditions in a CloudFormation template", using-cfn-waitcondition.html, whose example is
# https://cloudformation-waitcondition-<...>.s3.amazonaws.com/arn%3Aaws%3Acloudformation%3A...?...Signature=...;
# "Access CloudFormation using an interface endpoint", vpc-interface-endpoints.html, for the bucket per region).
# Handles in use come in S3's virtual-hosted global (s3.), regional (s3.<region>.) and legacy (s3-<region>.) forms
# (S3 User Guide, "Virtual hosting of buckets"); China's endpoint domain is amazonaws.com.cn with regional
# endpoints only (docs.amazonaws.cn, "Beijing Region Endpoints"). Dual-stack, FIPS, access-point, website and
# path-style hosts are neither documented nor seen for a handle, so they are refused.
_REGION = r"[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}"


WAIT_HANDLE_HOST = re.compile(
    rf"cloudformation-waitcondition-(?P<region>{_REGION})\.s3(?:[.-](?P<endpoint>{_REGION}))?\.amazonaws\.com(?P<cn>\.cn)?"
)


WAIT_HANDLE_HOST_FORM = "cloudformation-waitcondition-<region>.s3[.<region>].amazonaws.com[.cn]"


# Presigned with Signature Version 4 (S3 API Reference, "Authenticating Requests: Using Query Parameters") or, in
# older handles and the user guide's example, version 2 (AWSAccessKeyId, Expires, Signature).
SIGV4_PARAMETERS = frozenset(
    {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"}
)


# RFC 3986's characters, nothing else: no space, control character, backslash or non-ASCII letter on which two
# URL parsers could disagree (urlsplit drops tabs and newlines, urllib's Request unquotes the host).
SIGV2_PARAMETERS = frozenset({"AWSAccessKeyId", "Expires", "Signature"})
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")


WAIT_HANDLE_MAX = 8192


def wait_handle_problem(url: Any) -> str | None:
    """Why ``url`` is not a CloudFormation wait-condition handle URL; None when it is one."""
    if not isinstance(url, str) or not url:
        return "is empty" if url in (None, "") else f"is a {type(url).__name__}, not a URL"
    if len(url) > WAIT_HANDLE_MAX:
        return f"is {len(url)} characters long (at most {WAIT_HANDLE_MAX})"
    if not _URL_CHARACTERS.fullmatch(url):
        return "holds characters a URL may not (space, control, backslash or non-ASCII)"
    if not url.startswith("https://"):
        return f"does not start with https:// (it starts {url.split(':', 1)[0][:20]!r}); only https is allowed"
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        return "carries user information before its host"
    host, colon, port = parts.netloc.partition(":")
    if colon and port != "443":
        return f"names the port {port[:10]!r}; only the default port 443 is allowed"
    match = WAIT_HANDLE_HOST.fullmatch(host)
    if match is None:
        return f"has the host {host[:100]!r}, not {WAIT_HANDLE_HOST_FORM}"
    region, endpoint = match["region"], match["endpoint"]
    if endpoint is not None and endpoint != region:
        return f"has the host {host!r}: the bucket's region {region} is not the endpoint's {endpoint}"
    if bool(match["cn"]) != region.startswith("cn-"):
        where = (
            "a China region, whose hosts end in .amazonaws.com.cn" if region.startswith("cn-") else "no China region"
        )
        return f"has the host {host!r}: {region} is {where}"
    if match["cn"] and not host.endswith(f".s3.{region}.amazonaws.com.cn"):
        return f"has the host {host!r}: China's S3 hosts are regional, <bucket>.s3.{region}.amazonaws.com.cn"
    if parts.fragment or "#" in url:
        return "has a fragment"
    if len(parts.path) < 2:
        return "has no object key"
    try:
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return "has a malformed query"
    names = [name for name, _ in query]
    values = dict(query)
    for required in (SIGV4_PARAMETERS, SIGV2_PARAMETERS):
        if required <= values.keys():
            break
    else:
        return "is not presigned (no X-Amz-Signature with its X-Amz-* parameters, nor a version 2 Signature)"
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        return f"repeats the query parameter {repeated[0][:40]!r}"
    if any(not values[name] for name in required):
        return "has an empty signature parameter"
    if required is SIGV4_PARAMETERS and values["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256":
        return f"is signed with {values['X-Amz-Algorithm'][:40]!r}, not AWS4-HMAC-SHA256"
    return None


def require_wait_handle(url: Any) -> str:
    """``url`` when it is a wait-condition handle URL, else StagingError saying why (never its signature)."""
    problem = wait_handle_problem(url)
    if problem is not None:
        raise StagingError(
            f"refusing to signal the wait condition: the WaitHandle {problem}. It must be the presigned URL that "
            f"CloudFormation returns for an AWS::CloudFormation::WaitConditionHandle: https://{WAIT_HANDLE_HOST_FORM}/"
            "<key>?X-Amz-Signature=..."
        )
    return url


def signal_opener(https: urllib.request.HTTPSHandler | None = None) -> urllib.request.OpenerDirector:
    """An opener with https only and no redirect handler: a 3xx fails as an HTTPError, never goes elsewhere.

    ``urlopen``'s default opener also holds file:, ftp:, data: and http: handlers and follows redirects.
    """
    opener = urllib.request.OpenerDirector()
    for handler in (
        https or urllib.request.HTTPSHandler(),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener
