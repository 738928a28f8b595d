"""The SQL client's pure parts: statement splitting, materialized-table statements, properties."""
