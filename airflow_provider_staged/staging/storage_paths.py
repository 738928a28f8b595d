"""Where a table's version directories and a submitted job's files live (pure)."""


def default_root(database_dir: str, table: str) -> str:
    return f"{database_dir}/{table}"


def side_root(database_dir: str, table: str) -> str:
    """For a table whose data sits in ``default_root``: versions go beside it, not inside."""
    return f"{database_dir}/_staged/{table}"


# Where the spark-submit engine ships a job's spec and manifest: beside the data, not on a
# worker's disk, so a driver on any host reads and writes them.
JOBS_DIR = "_staged_jobs"
