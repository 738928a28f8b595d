"""S3 (``s3a://`` and ``s3://``) access for Python and Spark from one set of options.

The options come from the environment (the AWS SDKs' own variables) or from an Airflow ``aws``
connection (``airflow.hooks``); the secrets never reach a repr, a log line, an error or a
Spark conf that is printed: Spark gets them in its Hadoop configuration at run time (embedded)
or in the environment of ``spark-submit`` (Hadoop's default provider chain reads it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow import fs as pafs

S3_SCHEMES = ("s3a", "s3")
_TRUE = ("1", "true", "yes")


@dataclass(frozen=True)
class S3Options:
    """Where the S3 endpoint is and who we are there (secrets kept out of ``repr``)."""

    endpoint: str | None = None
    region: str | None = None
    # Buckets as path segments (``http://host/bucket/key``): what a self-hosted S3 needs.
    path_style: bool = False
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @property
    def has_credentials(self) -> bool:
        return bool(self.access_key and self.secret_key)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> S3Options:
        """The AWS SDKs' variables; ``STAGED_S3_PATH_STYLE`` (default: on with an endpoint)."""
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        path_style = env.get("STAGED_S3_PATH_STYLE")
        return cls(
            endpoint=endpoint,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            path_style=path_style.lower() in _TRUE if path_style else endpoint is not None,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
        )

    def environment(self) -> dict[str, str]:
        """The variables that give a child process (``spark-submit``) these options."""
        values = {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_REGION": self.region,
            "STAGED_S3_PATH_STYLE": "true" if self.path_style else "false",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_SESSION_TOKEN": self.session_token,
        }
        return {key: value for key, value in values.items() if value}

    def hadoop_conf(self, bucket: str | None = None, secrets: bool = False) -> dict[str, str]:
        """S3A's settings (per bucket when ``bucket`` is given); the keys only with ``secrets``."""
        prefix = f"fs.s3a.bucket.{bucket}." if bucket else "fs.s3a."
        conf = {prefix + "path.style.access": "true" if self.path_style else "false"}
        if self.endpoint:
            conf[prefix + "endpoint"] = self.endpoint
            conf[prefix + "connection.ssl.enabled"] = str(self.endpoint.startswith("https")).lower()
        if self.region:
            conf[prefix + "endpoint.region"] = self.region
        if secrets and self.has_credentials:
            conf[prefix + "access.key"] = self.access_key or ""
            conf[prefix + "secret.key"] = self.secret_key or ""
            if self.session_token:
                conf[prefix + "session.token"] = self.session_token
                conf[prefix + "aws.credentials.provider"] = (
                    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
                )
        return conf

    def filesystem(self) -> pafs.S3FileSystem:
        from pyarrow import fs as pafs

        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            session_token=self.session_token,
            endpoint_override=self.endpoint,
            region=self.region or "us-east-1",
            force_virtual_addressing=not self.path_style,
            # A missing credential must fail, not fall back to an anonymous request.
            anonymous=False,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3),
        )


# Spark reads ``s3://`` through S3A too (Hadoop has no other S3 filesystem any more).
SPARK_SCHEME_CONF = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
