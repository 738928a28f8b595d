"""Atomic Spark table builds and materialized tables for Apache Airflow."""

__version__ = "0.1.0"
