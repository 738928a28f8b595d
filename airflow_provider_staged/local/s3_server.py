"""A local S3-compatible server (S3Proxy, from jvm/pom.xml's ``s3-server`` profile) on loopback.

For trying an ``s3a://`` warehouse on one machine, for the tests and for the benchmarks: a real
S3 HTTP API with its own keys, in memory (``transient``: only keys, as on S3) or over a local
directory (``filesystem``: data that outgrows the heap). Its keys are written only into its
0600 properties file and returned as :class:`S3Options`, never printed.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_staged.engine.session import jvm_dir
from airflow_provider_staged.local.processes import free_port, start_background, stop_pid, wait_for_port
from airflow_provider_staged.storage.s3 import S3Options


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    pid: int
    options: S3Options = field(repr=False)

    def create_bucket(self, prefix: str) -> str:
        """A new bucket ``<prefix>-<random>``."""
        from pyarrow import fs as pafs

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        filesystem = pafs.S3FileSystem(
            access_key=self.options.access_key,
            secret_key=self.options.secret_key,
            endpoint_override=self.endpoint,
            region="us-east-1",
            allow_bucket_creation=True,
        )
        filesystem.create_dir(name)
        return name


def s3proxy_jar() -> Path:
    jars = sorted((jvm_dir() / "s3-server").glob("s3proxy-*.jar"))
    if not jars:
        where = jvm_dir() / "s3-server"
        raise RuntimeError(f"no S3Proxy jar in {where}: run scripts/setup.sh with STAGED_SETUP_TESTS=1")
    return jars[-1]


def start_s3_server(home: Path, in_memory: bool = True, heap: str = "768m") -> S3Server:
    """Start S3Proxy on a free loopback port with fresh keys; stop it with :func:`stop_s3_server`."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    options = S3Options(
        endpoint=endpoint,
        region="us-east-1",
        path_style=True,
        access_key="staged-" + secrets.token_hex(4),
        secret_key=secrets.token_urlsafe(24),
    )
    if in_memory:
        # Only keys, as on S3 (a directory-backed store lists emptied prefixes, S3 never does).
        store = "jclouds.provider=transient\n"
    else:
        (home / "data").mkdir(exist_ok=True)
        store = f"jclouds.provider=filesystem-nio2\njclouds.filesystem.basedir={home / 'data'}\n"
    properties = home / "s3proxy.properties"
    properties.touch(mode=0o600)
    properties.write_text(
        f"s3proxy.endpoint={endpoint}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={options.access_key}\n"
        f"s3proxy.credential={options.secret_key}\n" + store
    )
    log_file = home / "s3proxy.log"
    pid = start_background(
        ["java", f"-Xmx{heap}", "-jar", str(s3proxy_jar()), "--properties", str(properties)],
        home / "s3proxy.pid",
        log_file,
    )
    try:
        wait_for_port(port, pid, timeout=60, log_file=log_file)
    except BaseException:
        stop_pid(pid)
        raise
    return S3Server(endpoint, pid, options)


def stop_s3_server(server: S3Server) -> None:
    stop_pid(server.pid)
