"""The asynchronous client's pure parts: S3 locations in every form SageMaker's DestinationS3Uri allows."""

from __future__ import annotations

import pytest

from endpoint_client.async_invocations import new_inference_id, s3_location


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://b/k/x.out", ("b", "k/x.out")),
        ("https://my.bucket.s3.us-east-1.amazonaws.com/a/b.out", ("my.bucket", "a/b.out")),
        ("https://s3.us-east-1.amazonaws.com/bkt/a/b.out", ("bkt", "a/b.out")),
        ("https://bkt.s3-us-west-2.amazonaws.com/k", ("bkt", "k")),
        ("https://a.s3.b.s3.us-east-1.amazonaws.com/k", ("a.s3.b", "k")),
    ],
)
def test_every_s3_form_names_its_bucket_and_key(uri, expected):
    assert s3_location(uri) == expected


@pytest.mark.parametrize("uri", ["s3://b", "s3:///k", "https://example.com/x", "ftp://b/k", "", "https://s3.x.com/b"])
def test_what_is_not_an_object_location_is_refused(uri):
    with pytest.raises(ValueError, match="is not an S3 object location"):
        s3_location(uri)


def test_an_inference_id_is_unique_and_at_most_64_characters():
    first, second = new_inference_id("smoke-test-"), new_inference_id("smoke-test-")
    assert first != second and first.startswith("smoke-test-") and len(first) <= 64
    assert len(new_inference_id("x" * 32)) == 64
    with pytest.raises(ValueError, match="64 characters"):
        new_inference_id("x" * 33)
