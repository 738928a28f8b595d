"""Materialized tables (FLIP-435/448): definitions parsed from DDL files become refresh DAGs."""
