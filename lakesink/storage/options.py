"""Object-storage settings, given once and applied to Spark (S3A) and delta-rs alike.

The standard AWS environment variables are enough, as for every AWS tool::

    AWS_ENDPOINT_URL=http://127.0.0.1:8333   # only for an S3-compatible store
    AWS_ACCESS_KEY_ID=...  AWS_SECRET_ACCESS_KEY=...  AWS_REGION=...

``StorageOptions.from_env()`` reads them; its arguments override them. ``spark_conf()``,
``spark_packages()`` (or, for a local session, ``spark_class_path()``) and ``spark_jars()`` are
what a Spark session needs for ``s3a://`` (and ``s3://``) tables, lakesink's
conditional-create log store included; ``deltars_options()``
and ``deltars_uri()`` are what delta-rs needs for the same objects. Secrets never appear in
``repr`` or the log.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lakesink.errors import ConfigurationError
from lakesink.storage.logstore import LOGSTORE_CLASS, hadoop_version, logstore_jar, s3a_jars

__all__ = [
    "DEFAULT_ENDPOINT_REGION",
    "S3_SCHEMES",
    "StorageOptions",
    "deltars_uri",
]

# The schemes Spark reaches S3 by: s3a is Hadoop's connector, s3 is mapped onto it.
S3_SCHEMES = ("s3a", "s3", "s3n")
# SigV4 signs with a region even where the store ignores it (SeaweedFS, MinIO, s3proxy), and
# S3A cannot guess one from a custom endpoint's host name.
DEFAULT_ENDPOINT_REGION = "us-east-1"

_ENDPOINT = re.compile(r"^https?://[^/\s]+/?$")
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
_SECRET_SHOWN_AS = "***"


def deltars_uri(uri: str) -> str:
    """The spelling delta-rs wants for ``uri``: ``s3://`` for Spark's ``s3a://`` (and
    ``s3n://``); any other scheme, and a local path, unchanged."""
    match = _URI.match(str(uri))
    if match and match.group(1).lower() in ("s3a", "s3n"):
        return f"s3://{match.group(2)}"
    return str(uri)


def _is_s3(uri: str) -> bool:
    match = _URI.match(str(uri))
    return bool(match) and cast("re.Match[str]", match).group(1).lower() in S3_SCHEMES


@dataclass(frozen=True, kw_only=True)
class StorageOptions:
    """Where and how to reach object storage, for Spark and delta-rs alike.

    Attributes:
        endpoint: ``http(s)://host[:port]`` of an S3-compatible store; None for AWS S3.
        region: The bucket's region. Default: ``us-east-1`` when an endpoint is given (the
            store ignores it, signing needs one), else the AWS SDKs' own lookup.
        access_key_id: Static credentials; None leaves them to the SDKs' default chains
            (environment, profile, instance or pod role).
        secret_access_key: The secret of ``access_key_id``. Hidden from ``repr``.
        session_token: For temporary credentials. Hidden from ``repr``.
        path_style: Address buckets as ``endpoint/bucket/key`` rather than
            ``bucket.endpoint/key``. Default: True when an endpoint is given.
    """

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool | None = None

    def __post_init__(self) -> None:
        if self.endpoint is not None:
            endpoint = self.endpoint.strip()
            if not _ENDPOINT.match(endpoint):
                raise ConfigurationError(
                    f"storage endpoint {self.endpoint!r} is not http(s)://host[:port]; give "
                    "the S3 endpoint URL, e.g. AWS_ENDPOINT_URL=http://127.0.0.1:8333"
                )
            object.__setattr__(self, "endpoint", endpoint.rstrip("/"))
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ConfigurationError(
                "give both an access key id and a secret access key (AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY), or neither to use the default credential chain"
            )
        if self.session_token is not None and self.access_key_id is None:
            raise ConfigurationError(
                "a session token (AWS_SESSION_TOKEN) needs its access key id and secret"
            )
        if self.path_style is None:
            object.__setattr__(self, "path_style", self.endpoint is not None)
        if self.region is None and self.endpoint is not None:
            object.__setattr__(self, "region", DEFAULT_ENDPOINT_REGION)

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.repr}
        for secret in ("secret_access_key", "session_token"):
            if getattr(self, secret) is not None:
                shown[secret] = _SECRET_SHOWN_AS
        inner = ", ".join(f"{key}={value!r}" for key, value in shown.items())
        return f"StorageOptions({inner})"

    @property
    def allow_http(self) -> bool:
        """Whether the endpoint is plain HTTP (a local test store), so TLS is off."""
        return self.endpoint is not None and self.endpoint.startswith("http://")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> StorageOptions:
        """The settings in the standard AWS environment variables, ``overrides`` winning.

        Reads ``AWS_ENDPOINT_URL_S3`` (else ``AWS_ENDPOINT_URL``), ``AWS_ACCESS_KEY_ID``,
        ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` and ``AWS_REGION`` (else
        ``AWS_DEFAULT_REGION``); empty ones count as unset.

        Args:
            environ: Where to read the variables. Default: ``os.environ``.
            **overrides: Field values (``endpoint=...``, ``region=...``); None counts as
                not given.

        Raises:
            ConfigurationError: An unknown field, or settings that do not fit together.
        """
        env = os.environ if environ is None else environ

        def read(*names: str) -> str | None:
            for name in names:
                value = env.get(name, "").strip()
                if value:
                    return value
            return None

        values: dict[str, Any] = {
            "endpoint": read("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            "region": read("AWS_REGION", "AWS_DEFAULT_REGION"),
            "access_key_id": read("AWS_ACCESS_KEY_ID"),
            "secret_access_key": read("AWS_SECRET_ACCESS_KEY"),
            "session_token": read("AWS_SESSION_TOKEN"),
        }
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigurationError(f"unknown storage option(s): {', '.join(unknown)}")
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**values)

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for ``s3a://`` and ``s3://`` with these options.

        S3A's endpoint, region, credentials and addressing; ``s3://`` mapped onto S3A; and
        lakesink's log store (``LOGSTORE_CLASS``) for both schemes, so a Delta commit is a
        conditional create that a concurrent writer cannot silently replace. The session
        also needs ``spark_packages()`` (or ``spark_class_path()``) and ``spark_jars()``.
        """
        conf = {
            "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            # FileContext (Structured Streaming's checkpoint files) has its own mapping.
            "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
            "spark.hadoop.fs.s3a.path.style.access": str(bool(self.path_style)).lower(),
            "spark.delta.logStore.s3a.impl": LOGSTORE_CLASS,
            "spark.delta.logStore.s3.impl": LOGSTORE_CLASS,
        }
        if self.endpoint is not None:
            conf["spark.hadoop.fs.s3a.endpoint"] = self.endpoint
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(not self.allow_http).lower()
        if self.region is not None:
            conf["spark.hadoop.fs.s3a.endpoint.region"] = self.region
        if self.access_key_id is not None:
            provider = (
                "TemporaryAWSCredentialsProvider"
                if self.session_token
                else ("SimpleAWSCredentialsProvider")
            )
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
                f"org.apache.hadoop.fs.s3a.{provider}"
            )
            conf["spark.hadoop.fs.s3a.access.key"] = self.access_key_id
            conf["spark.hadoop.fs.s3a.secret.key"] = str(self.secret_access_key)
            if self.session_token:
                conf["spark.hadoop.fs.s3a.session.token"] = self.session_token
        return conf

    @staticmethod
    def spark_packages() -> list[str]:
        """Maven coordinates Spark needs for S3A: ``hadoop-aws`` of pyspark's own Hadoop
        version (it brings the AWS SDK v2 bundle it was built with)."""
        return [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"]

    @staticmethod
    def spark_class_path() -> list[str]:
        """For a session whose executors run on this machine: ``hadoop-aws`` with the AWS SDK
        as files for the JVM's class path (fetched once; see ``logstore.s3a_jars``), in
        place of ``spark_packages()``. The log store still goes in ``spark_jars()``: it needs
        Delta's classes, which Spark loads apart from the class path.

        Raises:
            ConfigurationError: They cannot be fetched.
        """
        return [str(jar) for jar in s3a_jars()]

    @staticmethod
    def spark_jars() -> list[str]:
        """Local jars Spark needs: lakesink's log store, built from source on first use.

        Raises:
            ConfigurationError: It cannot be built (no ``javac``; see ``logstore_jar``).
        """
        return [str(logstore_jar())]

    def deltars_options(self, uri: str) -> dict[str, str]:
        """delta-rs ``storage_options`` for ``uri``; empty for a local path or a non-S3 URI.

        Commits stay conditional puts (``If-None-Match: *``, ``AWS_CONDITIONAL_PUT=etag``,
        delta-rs 1.x's own default said out loud); ``AWS_S3_ALLOW_UNSAFE_RENAME`` is never
        set.
        """
        if not _is_s3(uri):
            return {}
        options = {"AWS_CONDITIONAL_PUT": "etag"}
        if self.endpoint is not None:
            options["AWS_ENDPOINT_URL"] = self.endpoint
            options["AWS_ALLOW_HTTP"] = str(self.allow_http).lower()
        if self.region is not None:
            options["AWS_REGION"] = self.region
        if self.access_key_id is not None:
            options["AWS_ACCESS_KEY_ID"] = self.access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = str(self.secret_access_key)
            if self.session_token:
                options["AWS_SESSION_TOKEN"] = self.session_token
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not self.path_style).lower()
        return options

    @staticmethod
    def deltars_uri(uri: str) -> str:
        """``deltars_uri(uri)``: the ``s3://`` spelling delta-rs wants for an ``s3a://`` URI."""
        return deltars_uri(uri)
