"""The "Materialized tables" page of the Airflow UI (an Airflow 3 plugin).

``rows`` and ``sources`` are pure (no Airflow import): the page's rows and the batched catalog
reads behind them. ``airflow_reads`` reads the Airflow metadatabase in a constant number of
queries, ``app`` is the FastAPI app the api-server mounts, ``plugin`` registers it.
"""
