"""StorageOptions: the AWS variables read once, applied to Spark's S3A and to delta-rs."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesink.errors import ConfigurationError
from lakesink.storage.logstore import LOGSTORE_CLASS
from lakesink.storage.options import StorageOptions, deltars_uri

LOCAL_STORE = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:8333/",
    "AWS_ACCESS_KEY_ID": "key-id",
    "AWS_SECRET_ACCESS_KEY": "very-secret",
}


def test_from_env_reads_the_standard_variables_and_arguments_win() -> None:
    options = StorageOptions.from_env(
        {**LOCAL_STORE, "AWS_DEFAULT_REGION": "eu-west-1", "AWS_SESSION_TOKEN": " "}
    )
    assert options.endpoint == "http://127.0.0.1:8333"
    assert options.region == "eu-west-1"
    assert (options.access_key_id, options.secret_access_key) == ("key-id", "very-secret")
    assert options.session_token is None  # blank counts as unset
    assert options.path_style and options.allow_http

    env = {**LOCAL_STORE, "AWS_ENDPOINT_URL_S3": "https://s3.example:9000", "AWS_REGION": "r1"}
    assert StorageOptions.from_env(env).endpoint == "https://s3.example:9000"
    assert StorageOptions.from_env(env).region == "r1"
    overridden = StorageOptions.from_env(env, region="r2", path_style=False, endpoint=None)
    assert (overridden.region, overridden.path_style) == ("r2", False)
    assert overridden.endpoint == "https://s3.example:9000"  # None means "not given"
    assert not overridden.allow_http


def test_aws_s3_defaults() -> None:
    options = StorageOptions.from_env({})
    assert options == StorageOptions(path_style=False)
    assert options.region is None and not options.allow_http
    assert "spark.hadoop.fs.s3a.endpoint" not in options.spark_conf()
    assert "spark.hadoop.fs.s3a.aws.credentials.provider" not in options.spark_conf()
    assert StorageOptions(endpoint="http://h:1").region == "us-east-1"


def test_secrets_stay_out_of_repr() -> None:
    options = StorageOptions.from_env({**LOCAL_STORE, "AWS_SESSION_TOKEN": "token-value"})
    shown = f"{options!r} {options}"
    assert "very-secret" not in shown and "token-value" not in shown
    assert "key-id" in shown and "***" in shown
    assert hash(options) == hash(
        StorageOptions.from_env({**LOCAL_STORE, "AWS_SESSION_TOKEN": "token-value"})
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"endpoint": "127.0.0.1:8333"}, "http"),
        ({"endpoint": "http://h:1/bucket"}, "http"),
        ({"access_key_id": "k"}, "both"),
        ({"secret_access_key": "s"}, "both"),
        ({"session_token": "t"}, "session token"),
        ({"bucket": "b"}, "unknown"),
    ],
)
def test_settings_that_do_not_fit_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        StorageOptions.from_env({}, **settings)


def test_spark_conf() -> None:
    conf = StorageOptions.from_env(LOCAL_STORE).spark_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        ".SimpleAWSCredentialsProvider"
    )
    assert conf["spark.hadoop.fs.s3a.access.key"] == "key-id"
    assert conf["spark.hadoop.fs.s3a.secret.key"] == "very-secret"
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.delta.logStore.s3a.impl"] == LOGSTORE_CLASS
    assert conf["spark.delta.logStore.s3.impl"] == LOGSTORE_CLASS

    temporary = StorageOptions.from_env({**LOCAL_STORE, "AWS_SESSION_TOKEN": "t"}).spark_conf()
    assert temporary["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        ".TemporaryAWSCredentialsProvider"
    )
    assert temporary["spark.hadoop.fs.s3a.session.token"] == "t"


def test_spark_packages_match_pysparks_hadoop() -> None:
    import pyspark

    (package,) = StorageOptions.spark_packages()
    group, artifact, version = package.split(":")
    assert (group, artifact) == ("org.apache.hadoop", "hadoop-aws")
    jars = Path(pyspark.__file__).parent / "jars"
    assert (jars / f"hadoop-client-api-{version}.jar").is_file()


def test_deltars_options_and_uri() -> None:
    options = StorageOptions.from_env(LOCAL_STORE)
    for uri in ("s3a://b/t", "s3://b/t"):
        assert options.deltars_options(uri) == {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "key-id",
            "AWS_SECRET_ACCESS_KEY": "very-secret",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
            "AWS_CONDITIONAL_PUT": "etag",
        }
    assert options.deltars_options("/data/orders") == {}
    assert options.deltars_options("abfss://c@a.dfs.core.windows.net/t") == {}
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in StorageOptions().deltars_options("s3://b/t")

    assert deltars_uri("s3a://bucket/a/t") == "s3://bucket/a/t"
    assert options.deltars_uri("s3n://bucket/t") == "s3://bucket/t"
    for unchanged in ("s3://bucket/t", "/data/t", "gs://b/t", "abfss://c@a/t"):
        assert deltars_uri(unchanged) == unchanged
