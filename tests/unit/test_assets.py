"""A table's Asset and its OpenLineage dataset are one name: the ``hive`` asset URI scheme that the
provider registers with Airflow (normalizer and OpenLineage converter), through Airflow's own
``Asset`` and the OpenLineage provider's ``translate_airflow_asset``."""

from __future__ import annotations

import pytest
from airflow.providers.openlineage.utils.utils import translate_airflow_asset
from airflow.sdk import Asset

from airflow_provider_staged.airflow.assets import table_asset
from airflow_provider_staged.lineage.datasets import DatasetName, hive_dataset
from airflow_provider_staged.staging.identifiers import TableIdentifier


def test_airflow_normalizes_a_hive_asset_uri_with_the_registered_handler() -> None:
    assert Asset(uri="hive://Meta.Example/Sales/Orders").uri == "hive://meta.example:9083/sales/orders"
    assert Asset(uri="hive://10.0.0.7:9999/sales/orders/").uri == "hive://10.0.0.7:9999/sales/orders"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("hive:///sales/orders", r"asset URI 'hive:/sales/orders': hive:// needs the metastore host"),
        ("hive://meta/sales", r"'hive://meta/sales': expected hive://<host>:<port>/<database>/<table>"),
        ("hive://meta/sales/orders/x", r"expected hive://<host>:<port>/<database>/<table>"),
        ("hive://meta/sales/or-ders", r"invalid table name 'or-ders'"),
    ],
)
def test_a_bad_hive_asset_uri_is_refused_naming_it(uri: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Asset(uri=uri)


def test_the_asset_of_a_table_is_its_openlineage_dataset() -> None:
    identifier = TableIdentifier.parse("Analytics.Daily_Orders")
    asset = table_asset(identifier, "thrift://Meta.Example:9083")
    assert asset.name == asset.uri == "hive://meta.example:9083/analytics/daily_orders"
    dataset = translate_airflow_asset(asset, None)
    expected = hive_dataset("thrift://Meta.Example:9083", "analytics.daily_orders")
    assert DatasetName(dataset.namespace, dataset.name) == expected
    assert asset.uri == f"{expected.namespace}/{expected.name.replace('.', '/')}"


def test_the_operator_outlet_is_named_after_the_connection_metastore(staged_default_connection: str) -> None:
    from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator
    from airflow_provider_staged.airflow.operators.targets import target_dataset

    operator = StagedCreateTableAsOperator(task_id="t", target="analytics.daily_orders", sql="SELECT 1 AS x")
    (outlet,) = operator.outlets
    assert outlet.uri == "hive://metastore.example:9083/analytics/daily_orders"
    dataset = translate_airflow_asset(outlet, None)
    expected = target_dataset("analytics.daily_orders", staged_default_connection)
    assert DatasetName(dataset.namespace, dataset.name) == expected


def test_without_the_connection_the_dag_file_fails_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator

    monkeypatch.delenv("AIRFLOW_CONN_STAGED_DEFAULT", raising=False)
    monkeypatch.setenv("STAGED_HOME", str(tmp_path))  # no local metastore there either
    with pytest.raises(RuntimeError, match="no connection 'staged_default' and no local metastore"):
        StagedCreateTableAsOperator(task_id="t", target="analytics.daily_orders", sql="SELECT 1 AS x")
