"""The one task-log line of a committed refresh: table, partitions with rows, version, rows."""

from datetime import datetime

from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.refresh import commit_summary
from airflow_provider_staged.staging.manifest import DataFile, Manifest

DAILY = parse_definition("""
CREATE MATERIALIZED TABLE analytics.orders_daily PARTITIONED BY (ds, region)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY AS SELECT ds, region, count(*) AS n FROM raw.orders GROUP BY ds, region
""")
FIRED = datetime(2024, 1, 4)


def manifest(*files: tuple[str, int]) -> Manifest:
    return Manifest("/w/_v=a1", files=[DataFile(path, rows, 10) for path, rows in files])


def test_partial_spec_names_every_written_partition_with_its_rows() -> None:
    request = parse_refresh_request({"ds": "2024-01-03"}, DAILY, FIRED)
    written = manifest(("ds=2024-01-03/region=eu/part-0.parquet", 2),
                       ("ds=2024-01-03/region=eu/part-1.parquet", 1),
                       ("ds=2024-01-03/region=us/part-0.parquet", 4))
    assert commit_summary(DAILY, request, "a1", written) == (
        "Refresh committed (one-time, schedule time 2024-01-04 00:00:00): table "
        "analytics.orders_daily, partitions ds=2024-01-03: ds=2024-01-03/region=eu (3 rows), "
        "ds=2024-01-03/region=us (4 rows); version a1, 7 rows"
    )


def test_periodic_empty_and_whole_table_refreshes() -> None:
    periodic = parse_refresh_request({}, DAILY, FIRED)
    assert commit_summary(DAILY, periodic, "a2", manifest()).endswith(
        "partitions ds=2024-01-03: no rows: the partitions are now empty; version a2, 0 rows"
    )
    whole = parse_definition("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' HOUR AS SELECT 1 AS x")
    one = commit_summary(whole, parse_refresh_request({}, whole, FIRED), "a3", manifest(("part-0", 1)))
    assert one == ("Refresh committed (periodic, schedule time 2024-01-04 00:00:00): table default.t, "
                   "whole table; version a3, 1 row")


def test_a_value_with_a_newline_keeps_the_line_one_line() -> None:
    request = parse_refresh_request({"region": "two\nlines", "ds": "2024-01-03"}, DAILY, FIRED)
    written = manifest(("ds=2024-01-03/region=two%0Alines/part-0.parquet", 2))
    line = commit_summary(DAILY, request, "a4", written)
    assert "\n" not in line
    assert ("partitions ds=2024-01-03, region='two\\nlines': "
            "ds=2024-01-03/region='two\\nlines' (2 rows)") in line
