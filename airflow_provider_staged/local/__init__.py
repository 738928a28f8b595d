"""Local services of the embedded default runtime (Hive Metastore on Derby)."""
