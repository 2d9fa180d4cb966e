"""A model.tar.gz through CloudFormation's sequences (tests/harness): create, unrelated update, new archive,
update rolled back, delete, redeploy. The fake SageMaker runs the real worker with the job's own arguments."""

from __future__ import annotations

import io
import tarfile

import pytest

from hfstage.manifest import MANIFEST_NAME
from tests.fakes.fixtures import BUCKET, fake_hub, s3  # noqa: F401 - fixtures the driver uses
from tests.handlers import test_failure_paths as paths
from tests.handlers.test_failure_paths import StagingDriver, assert_well_behaved
from tests.harness import stuck

clock, deployed, driver, fake_sagemaker = paths.clock, paths.deployed, paths.driver, paths.fake_sagemaker
STAGING = [pytest.param(StagingDriver, id="staged_checkpoint")]
KEY = "training/job-{n}/output/model.tar.gz"


def put_archive(driver, n: int, files: dict[str, bytes]) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"model/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    driver.s3.client.put_object(Bucket=BUCKET, Key=KEY.format(n=n), Body=buffer.getvalue())
    return f"s3://{BUCKET}/{KEY.format(n=n)}"


FILES = {"config.json": b'{"model_type": "llama", "num_hidden_layers": 2}', "model.safetensors": b"w" * 70_000}


def archive_properties(driver, uri: str, step: int, **overrides):
    # The construct gives every change of properties its own job-name prefix (a hash of them): so does this.
    return driver.properties(RepoId="", SourceS3Uri=uri, JobNamePrefix=f"hfstage-0123456789-{step:010d}-", **overrides)


@pytest.mark.parametrize("driver", STAGING, indirect=True)
def test_create_unrelated_update_new_archive_delete_redeploy(driver):
    first = put_archive(driver, 1, FILES)
    cfn = driver.cloudformation()
    created = cfn.create(archive_properties(driver, first, 1))
    assert created.ok, created.reason
    prefix = created.data["Prefix"]
    assert prefix.startswith("models/s3-tarball--") and created.physical_id == f"s3://{BUCKET}/{prefix}"
    assert driver.s3.body(prefix + "config.json") == FILES["config.json"]  # unpacked from the one top folder
    assert driver.s3.body(prefix + MANIFEST_NAME)
    jobs = driver.jobs.created

    updated = cfn.update(archive_properties(driver, first, 2, InstanceType="ml.m5.4xlarge"))
    assert updated.ok and updated.physical_id == created.physical_id and driver.jobs.created == jobs

    second = put_archive(driver, 2, {**FILES, "config.json": b'{"model_type": "llama", "num_hidden_layers": 3}'})
    replaced = cfn.update(archive_properties(driver, second, 3))
    assert replaced.ok and replaced.physical_id != created.physical_id, replaced.reason
    assert replaced.cleanup is not None and replaced.cleanup.ok
    assert driver.jobs.created == jobs + 1

    # An in-place update that fails later is rolled back from the physical ID: no job, no HEAD of the archive.
    driver.jobs.script = stuck
    patterns = cfn.update(archive_properties(driver, second, 4, Exclude=["original/*", "extra.txt"]))
    assert patterns.ok and patterns.physical_id == replaced.physical_id
    assert driver.running() == [patterns.data["JobName"]]  # other patterns: the archive is unpacked again
    rolled_back = cfn.rollback()
    assert rolled_back.ok and rolled_back.physical_id == replaced.physical_id, rolled_back.reason
    assert driver.running() == []  # the failed update's job is stopped

    deleted = cfn.delete()
    assert deleted.ok
    assert driver.s3.list_keys(prefix)  # the staged objects are kept for the next deploy
    assert_well_behaved(cfn, created, updated, replaced, patterns, rolled_back, deleted)

    before = driver.jobs.created
    again = driver.cloudformation()
    redeployed = again.create(archive_properties(driver, second, 3))
    assert redeployed.ok and redeployed.data["JobName"] == "" and driver.jobs.created == before
