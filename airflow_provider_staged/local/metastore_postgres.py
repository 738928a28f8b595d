"""The Hive Metastore on PostgreSQL: the at-scale topology (docker/ and the native at-scale test).

The pyspark wheel ships Hive 2.3's metastore but not Hive's schematool scripts, and Hive's own
``TxnDbUtil.prepDb`` (what ``hive.in.test`` runs on the embedded Derby) speaks Derby only. So:

- DataNucleus creates the metastore's own tables when the server first starts
  (``datanucleus.schema.autoCreateAll``, set by :func:`metastore_command`);
- :func:`create_txn_tables` creates the transaction tables that the lock API
  (``metastore/locks.py``) needs, idempotently;
- the database password reaches the server in a ``hive-site.xml`` that only its owner can read,
  never on a command line.

``python -m airflow_provider_staged.local.metastore_postgres init-schema | serve`` runs these
steps from the environment (``STAGED_METASTORE_DB``: a libpq URI without password;
``STAGED_METASTORE_DB_PASSWORD_FILE``): the ``metastore-schema`` and ``metastore`` services of
``docker/docker-compose.yml``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.engine.session import DEFAULT_JDBC_JAR
from airflow_provider_staged.local.metastore import metastore_command, start_metastore

DB_ENV = "STAGED_METASTORE_DB"
PASSWORD_FILE_ENV = "STAGED_METASTORE_DB_PASSWORD_FILE"

# The tables and columns that Hive 2.3's TxnHandler reads and writes (those of its TxnDbUtil), in
# PostgreSQL types. Unquoted names, as in TxnHandler's queries: PostgreSQL folds both to lower case.
TXN_TABLES: dict[str, str] = {
    "txns": "txn_id bigint PRIMARY KEY, txn_state char(1) NOT NULL, txn_started bigint NOT NULL, "
    "txn_last_heartbeat bigint NOT NULL, txn_user varchar(128) NOT NULL, txn_host varchar(128) NOT NULL",
    "txn_components": "tc_txnid bigint REFERENCES txns (txn_id), tc_database varchar(128) NOT NULL, "
    "tc_table varchar(128), tc_partition varchar(767), tc_operation_type char(1) NOT NULL",
    "completed_txn_components": "ctc_txnid bigint, ctc_database varchar(128) NOT NULL, "
    "ctc_table varchar(128), ctc_partition varchar(767)",
    "next_txn_id": "ntxn_next bigint NOT NULL",
    "hive_locks": "hl_lock_ext_id bigint NOT NULL, hl_lock_int_id bigint NOT NULL, hl_txnid bigint, "
    "hl_db varchar(128) NOT NULL, hl_table varchar(128), hl_partition varchar(767), "
    "hl_lock_state char(1) NOT NULL, hl_lock_type char(1) NOT NULL, hl_last_heartbeat bigint NOT NULL, "
    "hl_acquired_at bigint, hl_user varchar(128) NOT NULL, hl_host varchar(128) NOT NULL, "
    "hl_heartbeat_count integer, hl_agent_info varchar(128), hl_blockedby_ext_id bigint, "
    "hl_blockedby_int_id bigint, PRIMARY KEY (hl_lock_ext_id, hl_lock_int_id)",
    "next_lock_id": "nl_next bigint NOT NULL",
    "compaction_queue": "cq_id bigint PRIMARY KEY, cq_database varchar(128) NOT NULL, "
    "cq_table varchar(128) NOT NULL, cq_partition varchar(767), cq_state char(1) NOT NULL, "
    "cq_type char(1) NOT NULL, cq_tblproperties varchar(2048), cq_worker_id varchar(128), "
    "cq_start bigint, cq_run_as varchar(128), cq_highest_txn_id bigint, cq_meta_info bytea, "
    "cq_hadoop_job_id varchar(32)",
    "next_compaction_queue_id": "ncq_next bigint NOT NULL",
    "completed_compactions": "cc_id bigint PRIMARY KEY, cc_database varchar(128) NOT NULL, "
    "cc_table varchar(128) NOT NULL, cc_partition varchar(767), cc_state char(1) NOT NULL, "
    "cc_type char(1) NOT NULL, cc_tblproperties varchar(2048), cc_worker_id varchar(128), "
    "cc_start bigint, cc_end bigint, cc_run_as varchar(128), cc_highest_txn_id bigint, "
    "cc_meta_info bytea, cc_hadoop_job_id varchar(32)",
    "aux_table": "mt_key1 varchar(128) NOT NULL, mt_key2 bigint NOT NULL, mt_comment varchar(255), "
    "PRIMARY KEY (mt_key1, mt_key2)",
    "write_set": "ws_database varchar(128) NOT NULL, ws_table varchar(128) NOT NULL, "
    "ws_partition varchar(767), ws_txnid bigint NOT NULL, ws_commit_id bigint NOT NULL, "
    "ws_operation_type char(1) NOT NULL",
}
# One-row id counters, starting at 1.
COUNTERS = {"next_txn_id": "ntxn_next", "next_lock_id": "nl_next", "next_compaction_queue_id": "ncq_next"}


@dataclass(frozen=True)
class MetastoreDatabase:
    """The PostgreSQL database that backs the metastore."""

    host: str
    port: int
    database: str
    user: str
    password: str = field(repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> MetastoreDatabase:
        """From ``STAGED_METASTORE_DB`` and the password in ``STAGED_METASTORE_DB_PASSWORD_FILE``."""
        if not env.get(DB_ENV):
            raise SystemExit(f"{DB_ENV} is not set: e.g. postgresql://hive@postgres:5432/metastore")
        params = conninfo_to_dict(env[DB_ENV])
        password_file = env.get(PASSWORD_FILE_ENV)
        password = Path(password_file).read_text().strip() if password_file else params.get("password")
        return cls(
            host=str(params.get("host") or "127.0.0.1"),
            port=int(params.get("port") or 5432),
            database=str(params.get("dbname") or "metastore"),
            user=str(params.get("user") or "hive"),
            password=str(password or ""),
        )

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    def conninfo(self) -> str:
        return make_conninfo(
            host=self.host, port=self.port, dbname=self.database, user=self.user, password=self.password
        )


def create_txn_tables(database: MetastoreDatabase) -> list[str]:
    """Create the transaction tables that are missing; return the names of those created."""
    with psycopg.connect(database.conninfo()) as db:
        existing = {
            row[0]
            for row in db.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        }
        created = [name for name in TXN_TABLES if name not in existing]
        for name in created:
            db.execute(f"CREATE TABLE {name} ({TXN_TABLES[name]})")
        if "hive_locks" in created:
            db.execute("CREATE INDEX hl_txnid_index ON hive_locks (hl_txnid)")
        for table, column in COUNTERS.items():
            db.execute(f"INSERT INTO {table} ({column}) SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM {table})")
    return created


def postgres_jdbc_jar() -> Path:
    """Debian's PostgreSQL JDBC driver (``STAGED_JDBC_JAR`` overrides), which the metastore loads."""
    jar = Path(os.environ.get("STAGED_JDBC_JAR", DEFAULT_JDBC_JAR))
    if not jar.is_file():
        raise FileNotFoundError(f"{jar} not found: install the Debian package libpostgresql-jdbc-java")
    return jar


def server_settings(database: MetastoreDatabase, home: Path) -> tuple[dict[str, str], list[Path]]:
    """The server's database settings and classpath; writes ``home/conf/hive-site.xml`` (mode 0600)
    with the password, so that it is on no command line."""
    conf_dir = home / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    site = conf_dir / "hive-site.xml"
    site.touch(mode=0o600)
    site.chmod(0o600)
    site.write_text(
        "<configuration><property><name>javax.jdo.option.ConnectionPassword</name>"
        f"<value>{escape(database.password)}</value></property></configuration>\n"
    )
    settings = {
        "javax.jdo.option.ConnectionURL": database.jdbc_url,
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": database.user,
    }
    return settings, [conf_dir, postgres_jdbc_jar()]


def start_postgres_metastore(
    database: MetastoreDatabase, home: Path, port: int | None = None, stock: bool = False
) -> MetastoreInfo:
    """Create the transaction tables if needed and start the metastore in the background
    (state, logs and the warehouse under ``home``, as :func:`start_metastore`); ``stock``: with
    Hive's defaults (see :func:`metastore_command`)."""
    home = home.resolve()
    create_txn_tables(database)
    settings, classpath = server_settings(database, home)
    return start_metastore(home, port, settings, classpath, stock=stock)


def main(argv: Sequence[str] | None = None) -> None:
    """``init-schema`` (create the transaction tables) or ``serve`` (run the server in the foreground)."""
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_staged.local.metastore_postgres")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("init-schema", help="create the transaction tables the lock API needs")
    serve = commands.add_parser("serve", help="run the Thrift server in the foreground")
    serve.add_argument("--port", type=int, default=9083)
    serve.add_argument(
        "--host", choices=("127.0.0.1", "0.0.0.0"), default="127.0.0.1",
        help="listen on loopback only, or on every interface (Hive 2.3 binds no single address)",
    )
    serve.add_argument("--warehouse", type=Path, required=True)
    serve.add_argument("--home", type=Path, default=Path("/var/lib/staged-metastore"))
    args = parser.parse_args(argv)
    database = MetastoreDatabase.from_env()
    if args.command == "init-schema":
        created = create_txn_tables(database)
        print(f"transaction tables created: {', '.join(created) or 'none (all present)'}")
        return
    home = args.home.resolve()
    settings, classpath = server_settings(database, home)
    loopback = args.host == "127.0.0.1"
    command = metastore_command(args.port, home, args.warehouse, settings, classpath, loopback)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
