"""What a session needs for its warehouse, decided before Spark runs: the S3A settings derived from
`[tables] storage_options`, the jars' versions (bkaudit.spark.engines) and the secrets a run may record.

The version pairs are real releases: Delta's delta-spark_2.13 POMs on Maven Central name the spark-sql they
were built on (4.4.0 -> 4.2.0, 4.3.0 -> 4.1.0, 3.3.2 -> 3.5.3); pyspark 4.2.1 ships Hadoop 3.5.0.
"""

from __future__ import annotations

import json

from bkaudit import config
from bkaudit.spark import engines
from bkaudit.spark.session import warehouse_conf
from bkaudit.tables import location
from bkaudit.tables.location import Warehouse

MINIO = {"aws_endpoint_url": "http://minio:9000", "aws_access_key_id": "AK", "aws_secret_access_key": "SK",
         "aws_region": "eu-west-1", "aws_allow_http": "true"}


def test_s3a_settings_follow_the_delta_rs_options() -> None:
    assert location.hadoop_s3a(MINIO) == {
        "fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK", "fs.s3a.endpoint.region": "eu-west-1",
        "fs.s3a.endpoint": "http://minio:9000", "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.path.style.access": "true"}
    # AWS itself: region only, credentials left to S3A's chain (environment, instance roles)
    assert location.hadoop_s3a({"aws_region": "us-east-1"}) == {"fs.s3a.endpoint.region": "us-east-1"}
    # a session token switches S3A to temporary credentials; virtual hosts when asked for
    temp = location.hadoop_s3a({**MINIO, "aws_session_token": "T", "aws_virtual_hosted_style_request": "true",
                                "aws_endpoint_url": "https://s3.example.com"})
    assert temp["fs.s3a.session.token"] == "T"
    assert temp["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert (temp["fs.s3a.endpoint"], temp["fs.s3a.connection.ssl.enabled"],
            temp["fs.s3a.path.style.access"]) == ("https://s3.example.com", "true", "false")
    assert location.hadoop_s3a(None) == {}


def test_warehouse_conf_ships_the_options_to_executors() -> None:
    conf = warehouse_conf(Warehouse("s3a://bucket/wh", MINIO))
    assert json.loads(conf["spark.executorEnv.BKAUDIT_STORAGE_OPTIONS"]) == MINIO
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    gcs = warehouse_conf(Warehouse("gs://bucket/wh", MINIO))
    assert not [k for k in gcs if k.startswith("spark.hadoop.fs.s3a")]
    assert warehouse_conf("/tmp/wh") == {} and warehouse_conf(None) == {}


def test_delta_built_for_another_spark_is_one_line_naming_both() -> None:
    problem = engines.delta_problem("4.2.1", "4.3.0", configured=True)
    assert problem is not None and "\n" not in problem
    assert "Delta Lake 4.3.0 is built for Spark 4.1" in problem and "Spark 4.2.1" in problem
    assert "io.delta:delta-spark_2.13:4.4.x" in problem  # what fits
    assert engines.delta_problem("3.5.3", "4.4.0", configured=False) is not None
    assert engines.delta_problem("4.2.1", "4.4.0", configured=True) is None
    assert engines.delta_problem("4.2.1", "9.9.0", configured=True) is None  # unknown line: not judged
    # no Delta jar: fine (delta-rs reads) unless the session was configured for Delta
    assert engines.delta_problem("4.2.1", None, configured=False) is None
    missing = engines.delta_problem("4.2.1", None, configured=True)
    assert missing is not None and "no Delta jar" in missing and "Spark 4.2.1" in missing


def test_hadoop_aws_must_be_the_hadoop_of_spark() -> None:
    missing = engines.s3a_problem("3.5.0", None, present=False)
    assert missing is not None and "org.apache.hadoop:hadoop-aws:3.5.0" in missing
    other = engines.s3a_problem("3.5.0", "3.4.1", present=True)
    assert other is not None and "hadoop-aws 3.4.1" in other and "Hadoop 3.5.0" in other
    assert engines.s3a_problem("3.5.0", "3.5.0", present=True) is None
    assert engines.s3a_problem("3.5.0", None, present=True) is None  # a jar without its pom.properties


def test_recorded_configuration_masks_secrets_at_any_depth() -> None:
    settings = config.load(environ={}, overrides={
        "zk.connect": "zk:2181", "zk.auth_digest": "u:pw", "tables.storage_options": MINIO})
    recorded = settings.redacted()
    text = json.dumps(recorded)
    assert "SK" not in text and "u:pw" not in text
    assert recorded["tables"]["storage_options"]["aws_access_key_id"] == "AK"  # an id, not a secret
    assert recorded["zk"]["connect"] == "zk:2181"


def test_a_store_error_is_one_line_with_what_the_store_answered() -> None:
    from bkaudit.tables.read import first_line

    # delta-rs's errors as raised against moto checking signatures and against a port nobody listens on
    refused = OSError("Generic S3 error\n  \x1b[31m↳\x1b[0m Error performing list request\n"
                      "   \x1b[31m↳\x1b[0m 403 Forbidden\n    \x1b[31m↳\x1b[0m <?xml version=\"1.0\"?>\n"
                      "<Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you provided "
                      "does not exist in our records.</Message><BucketName>x</BucketName></Error>\n")
    assert first_line(refused) == ("Generic S3 error: InvalidAccessKeyId: The AWS Access Key Id you provided "
                                    "does not exist in our records.")
    dead = OSError("Kernel error -> Generic S3 error\n  \x1b[31m↳\x1b[0m Error performing GET "
                   "http://127.0.0.1:9/x\n   \x1b[31m↳\x1b[0m tcp connect error\n"
                   "    \x1b[31m↳\x1b[0m Connection refused (os error 111)\n")
    assert first_line(dead) == "Kernel error -> Generic S3 error: Connection refused (os error 111)"
    assert first_line(OSError("no log\nstack backtrace:\n   0: rust_begin_unwind")) == "no log"


def test_zookeeper_from_a_chosen_settings_file_not_the_template(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import click
    import pytest

    from bkaudit.cli_common import ZkTarget, load_settings

    monkeypatch.delenv("BKAUDIT_ZK", raising=False)
    monkeypatch.delenv("BKAUDIT_CONF", raising=False)
    chosen = tmp_path / "bkaudit.toml"
    chosen.write_text('[zk]\nconnect = "zk9:2181"\n')
    settings = load_settings(ZkTarget(config_path=str(chosen)), probe_zk=False)  # what spark-submit jobs pass
    assert settings["zk"].connect == "zk9:2181"
    with pytest.raises(click.UsageError, match="no ZooKeeper given"):
        load_settings(ZkTarget(), probe_zk=False)  # the shipped template is not a choice
    monkeypatch.setenv("BKAUDIT_CONF", str(chosen))  # chosen through the environment
    assert load_settings(ZkTarget(), probe_zk=False)["zk"].connect == "zk9:2181"
    monkeypatch.delenv("BKAUDIT_CONF")
    monkeypatch.setenv("BKAUDIT_ZK", "zk8:2181")
    assert load_settings(ZkTarget(), probe_zk=False)["zk"].connect == "zk8:2181"
