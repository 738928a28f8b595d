"""Where a table's version directories live (pure)."""


def default_root(database_dir: str, table: str) -> str:
    return f"{database_dir}/{table}"


def side_root(database_dir: str, table: str) -> str:
    """For a table whose data sits in ``default_root``: versions go beside it, not inside."""
    return f"{database_dir}/_staged/{table}"
