"""``Custom::StagedCheckpoint`` with ``Pack``: a Hub adapter planned, packed by the worker and verified as one archive.

The same fixtures as test_staging_handler: moto's S3 over HTTP, the fake Hub, a Stubber for SageMaker, a local
wait-handle receiver. The archive is packed by the worker itself (hfstage.pack), run in this process.
"""

from __future__ import annotations

import pytest
from botocore.stub import ANY

from hfstage import pack
from hfstage.manifest import MANIFEST_NAME
from hfstage.worker import main as stage
from tests.fakes.fixtures import BUCKET, fake_hub, s3  # noqa: F401
from tests.handlers.test_staging_handler import (  # noqa: F401
    EXPECTED_JOB_KEYS,
    PREFIX,
    REPO,
    event,
    handler,
    job_description,
    properties,
    receiver,
    state_change,
)

INCLUDE = ["config.json", "*.safetensors"]


def pack_properties(receiver=None, **overrides) -> dict:  # noqa: F811
    return properties(receiver, **{"Pack": "true", "Include": INCLUDE, "Exclude": [], **overrides})


def packed_uri(hub) -> tuple[str, str]:
    sha = hub.repos[REPO].sha
    return sha, f"s3://{BUCKET}/models/acme--tiny-llm/{sha}-packed/"


def pack_by_hand(s3_env) -> None:
    client, _ = s3_env.worker_client()
    argv = ["--repo-id", REPO, "--revision", "main", "--destination", f"s3://{BUCKET}/models/", "--pack-as-tarball"]
    argv += [a for p in INCLUDE for a in ("--include", p)]
    assert stage([*argv, "--progress-interval-s", "0"], s3_client=client) == 0


def test_an_unpacked_adapter_starts_one_job_that_packs(handler, s3, fake_hub, receiver):  # noqa: F811
    sha, uri = packed_uri(fake_hub)
    captured = {}
    handler.test_stubber.add_response(
        "create_processing_job", {"ProcessingJobArn": "arn:job"}, {k: ANY for k in EXPECTED_JOB_KEYS}
    )
    handler.test_stubber.client.meta.events.register_first(
        "provide-client-params.sagemaker.CreateProcessingJob", lambda params, **_: captured.update(params)
    )
    result = handler.on_event(event("Create", pack_properties(receiver)))
    assert result["PhysicalResourceId"] == uri and result["Data"]["Revision"] == sha
    arguments = captured["AppSpecification"]["ContainerArguments"]
    assert arguments[arguments.index("--revision") + 1] == sha and "--pack-as-tarball" in arguments
    assert captured["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 1  # one archive, one host
    assert receiver.signals == []


def test_a_packed_adapter_starts_no_job_and_an_unchanged_update_reverifies_it(handler, s3, fake_hub, receiver):  # noqa: F811
    pack_by_hand(s3)
    sha, uri = packed_uri(fake_hub)
    result = handler.on_event(event("Create", pack_properties(receiver)))  # the stubber refuses any job
    assert result["PhysicalResourceId"] == uri and result["Data"]["JobName"] == ""
    assert result["Data"]["ManifestUri"] == uri + MANIFEST_NAME
    assert [s["Status"] for s in receiver.signals] == ["SUCCESS"]
    # An update that changes nothing staged answers from the physical ID: the revision is the SHA, not <sha>-packed.
    props = pack_properties(receiver)
    answer = handler.on_event(
        event("Update", {**props, "MaxInstances": "8"}, PhysicalResourceId=uri, OldResourceProperties=props)
    )
    assert answer["PhysicalResourceId"] == uri and answer["Data"]["Revision"] == sha
    assert answer["Data"]["Files"] == "1"  # the one archive object, verified by HEAD


def test_other_patterns_are_another_archive(handler, s3, fake_hub, receiver):  # noqa: F811
    pack_by_hand(s3)
    handler.test_stubber.add_response(
        "create_processing_job", {"ProcessingJobArn": "arn:job"}, {k: ANY for k in EXPECTED_JOB_KEYS}
    )
    result = handler.on_event(event("Create", pack_properties(receiver, Include=["config.json"])))
    assert result["Data"]["JobName"].startswith(PREFIX)


def test_the_job_completed_verifies_the_archive(handler, s3, fake_hub, receiver):  # noqa: F811
    pack_by_hand(s3)
    sha, uri = packed_uri(fake_hub)
    handler.test_stubber.add_response("describe_processing_job", job_description(f"{PREFIX}abc", "Completed", uri, sha))
    assert handler.on_job_state_change(state_change(receiver, f"{PREFIX}abc"))["success"] is True
    s3.client.delete_object(Bucket=BUCKET, Key=f"models/acme--tiny-llm/{sha}-packed/model.tar.gz")
    handler.test_stubber.add_response("describe_processing_job", job_description(f"{PREFIX}abd", "Completed", uri, sha))
    assert handler.on_job_state_change(state_change(receiver, f"{PREFIX}abd"))["success"] is False
    assert "model.tar.gz" in receiver.signals[-1]["Reason"]


def test_too_much_to_pack_fails_before_any_job(handler, fake_hub, monkeypatch):  # noqa: F811
    monkeypatch.setattr(pack, "MAX_PACK_BYTES", 1024)
    with pytest.raises(Exception, match="over the 1024 an adapter archive may pack"):
        handler.on_event(event("Create", pack_properties()))


def test_the_adapter_config_is_checked_against_the_base_before_any_job(handler, s3, fake_hub):  # noqa: F811
    config = (
        b'{"peft_type": "LORA", "r": 64, "lora_alpha": 16, "base_model_name_or_path": "Org/Other",'
        b' "target_modules": ["q_proj"]}'
    )
    fake_hub.add_repo("acme/sql-lora", {"adapter_config.json": config, "adapter_model.safetensors": b"w" * 64})
    props = pack_properties(RepoId="acme/sql-lora", Include=[], AdapterBase="acme/tiny-llm", MaxLoraRank="16")
    with pytest.raises(Exception) as info:  # the stubber refuses any job
        handler.on_event(event("Create", props))
    message = str(info.value)
    assert "base_model_name_or_path='Org/Other': trained on another model than this deployment's" in message
    assert "r=64: above the engine's max_lora_rank 16" in message
    assert s3.list_keys("models/") == []


def test_a_fitting_adapter_config_passes_and_a_missing_one_is_named(handler, fake_hub):  # noqa: F811
    config = (
        b'{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "base_model_name_or_path": "acme/tiny-llm",'
        b' "target_modules": "all"}'
    )
    fake_hub.add_repo("acme/sql-lora", {"adapter_config.json": config, "adapter_model.safetensors": b"w" * 64})
    handler.test_stubber.add_response(
        "create_processing_job", {"ProcessingJobArn": "arn:job"}, {k: ANY for k in EXPECTED_JOB_KEYS}
    )
    props = pack_properties(RepoId="acme/sql-lora", Include=[], AdapterBase="acme/tiny-llm", MaxLoraRank="16")
    assert handler.on_event(event("Create", props))["Data"]["JobName"].startswith(PREFIX)
    with pytest.raises(Exception, match=r"no adapter_config\.json among the files to pack"):
        handler.on_event(event("Create", {**props, "Include": ["*.safetensors"]}))


def test_lowering_max_lora_rank_rechecks_a_packed_adapter(handler, s3, fake_hub, receiver):  # noqa: F811
    config = b'{"peft_type": "LORA", "r": 16, "lora_alpha": 16, "target_modules": ["q_proj"]}'
    fake_hub.add_repo("acme/sql-lora", {"adapter_config.json": config, "adapter_model.safetensors": b"w" * 64})
    client, _ = s3.worker_client()
    argv = ["--repo-id", "acme/sql-lora", "--destination", f"s3://{BUCKET}/models/", "--pack-as-tarball"]
    assert stage([*argv, "--progress-interval-s", "0"], s3_client=client) == 0
    old = pack_properties(receiver, RepoId="acme/sql-lora", Include=[], MaxLoraRank="16")
    first = handler.on_event(event("Create", old))  # staged and fitting: no job
    assert first["Data"]["JobName"] == ""
    new = {**old, "MaxLoraRank": "8"}
    with pytest.raises(Exception, match="r=16: above the engine's max_lora_rank 8"):
        handler.on_event(
            event("Update", new, PhysicalResourceId=first["PhysicalResourceId"], OldResourceProperties=old)
        )
