"""Errors of staged table operations."""


class StagingError(Exception):
    """A staged table operation failed; the message says which table and why."""


class TableAlreadyExistsError(StagingError):
    """CREATE_TABLE_AS on a target that exists (or appeared before the commit)."""


class TableNotFoundError(StagingError):
    """REPLACE_TABLE_AS on a target that does not exist, or a missing database."""


class CommitConflictError(StagingError):
    """The attempt can no longer be committed (it was aborted, or another state forbids it)."""


class CatalogConflictError(StagingError):
    """Another writer changed the table between this writer's read and its write, and the
    catalog refused the write (compare-and-set): nothing was changed; read again and retry."""


class ServiceError(RuntimeError):
    """A service cannot be started or reached: a gateway, a local metastore or Airflow (the message
    says which and why)."""
