"""Where staged things are and go: the S3 URIs the worker takes, and the names of what it writes.

Standard library only, and nothing else of hfstage: the app that synthesizes the staging job reads these at synth
(an archive's URI checked, the prefix the job role may write, the packed adapter's object) without loading the
worker or boto3.
"""

from __future__ import annotations

import hashlib
import re

ARCHIVE_NAME = "model.tar.gz"  # the one object of a packed revision (hfstage.pack)
PACK_SUFFIX = "-packed/"  # a packed revision's prefix: beside its unpacked one, ``<sha>-packed/``

# Whole-string, ASCII matches (fullmatch, re.ASCII): "$" alone would accept a trailing newline, "\w" any letter.
DESTINATION = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>.*))?", re.ASCII)
# The archive's key is written in object metadata (x-amz-meta-hf-repo-id), which S3 sends as HTTP headers:
# printable ASCII only (S3 User Guide, UsingMetadata.html: user-defined metadata must be US-ASCII).
SOURCE_URI = re.compile(
    r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>[!-~][ -~]{0,1000}\.tar\.gz)", re.ASCII
)


def parse_destination(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix/`` -> (bucket, prefix); ValueError saying what is allowed."""
    match = DESTINATION.fullmatch(uri)
    if not match:
        raise ValueError(f"{uri[:200]!r} is not s3://<bucket>/<prefix>/")
    return match.group("bucket"), match.group("prefix") or ""


def parse_source(uri: str) -> tuple[str, str]:
    """``s3://bucket/key.tar.gz`` -> (bucket, key); ValueError saying what is allowed."""
    match = SOURCE_URI.fullmatch(uri)
    if not match or "//" in match.group("key") or "*" in uri or "?" in uri:
        raise ValueError(
            f"{uri[:200]!r} is not s3://<bucket>/<key>.tar.gz "
            "(printable ASCII, no '*', '?' or '//', the key ending in .tar.gz)"
        )
    return match.group("bucket"), match.group("key")


def archive_prefix(destination_prefix: str, source_uri: str) -> str:
    """``models/`` + the archive's URI -> ``models/s3-tarball--<hash of URI>/``: where each of its ETags goes.

    The URI is hashed, not copied: a key of up to 1,024 bytes would leave no room under S3's key limit.
    """
    base = destination_prefix.strip("/")
    leaf = f"s3-tarball--{hashlib.sha256(source_uri.encode()).hexdigest()[:16]}/"
    return f"{base}/{leaf}" if base else leaf
