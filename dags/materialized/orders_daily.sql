-- Daily order counts and revenue per day; each daily run refreshes yesterday's partition.
CREATE MATERIALIZED TABLE analytics.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM raw.orders GROUP BY ds;
