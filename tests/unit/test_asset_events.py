"""The asset event of ``staged publish``: which asset, which key, and a refusal in one line."""

from __future__ import annotations

import pytest

from airflow_provider_staged.airflow.asset_events import announce_publish, event_key, target_asset_uri
from airflow_provider_staged.materialized.propagation import MAX_KEY_LENGTH, partition_key
from airflow_provider_staged.staging.errors import ServiceError
from airflow_provider_staged.staging.journal import AttemptRecord, AttemptState


def test_the_asset_is_the_one_the_operators_emit() -> None:
    assert target_asset_uri("Sales.Orders", "thrift://ms.example:9083") == "hive://ms.example:9083/sales/orders"
    jdbc = "jdbc://warehouse_pg/public.orders"
    assert target_asset_uri(jdbc, "thrift://ms.example:9083") == jdbc


def test_a_partition_is_keyed_as_a_refresh_keys_it_and_a_whole_table_is_not() -> None:
    spec = {"ds": "2024-01-01", "region": "eu"}
    assert event_key(spec) == partition_key(["ds", "region"], spec)
    assert event_key({}) is None
    assert event_key({"ds": "x" * (MAX_KEY_LENGTH + 1)}) is None  # longer than Airflow keeps


def test_an_airflow_that_does_not_answer_is_named_and_the_password_is_not() -> None:
    record = AttemptRecord("q1", "hive_partitions", "db.orders", "refresh", "/w/_v=q1",
                           state=AttemptState.COMMITTED, catalog={"partition_spec": {"ds": "2024-01-01"}})
    with pytest.raises(ServiceError) as refused:
        announce_publish(record, "thrift://127.0.0.1:9", "http://127.0.0.1:9", "admin", "s3cr3t-pw")
    message = str(refused.value)
    assert message.startswith("published attempt q1 of db.orders, but Airflow at http://127.0.0.1:9 did "
                              "not take its asset event (")
    assert "hive://127.0.0.1:9/db/orders do not know" in message
    assert "s3cr3t-pw" not in message and "\n" not in message
