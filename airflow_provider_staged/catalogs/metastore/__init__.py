"""Hive Metastore access over Thrift (no JVM)."""
