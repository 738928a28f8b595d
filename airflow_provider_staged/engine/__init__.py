"""Where Spark runs: an in-process session (embedded) or spark-submit to a cluster."""
