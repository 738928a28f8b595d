"""The staging API (FLIP-305): staged tables committed or aborted by a job-status hook."""

from airflow_provider_staged.staging.api import (
    JobStatusHook,
    StagedTable,
    StagingContext,
    StagingJobStatusHook,
    StagingPurpose,
    SupportsStaging,
)
from airflow_provider_staged.staging.errors import (
    StagingError,
    TableAlreadyExistsError,
    TableNotFoundError,
)

__all__ = [
    "JobStatusHook",
    "StagedTable",
    "StagingContext",
    "StagingError",
    "StagingJobStatusHook",
    "StagingPurpose",
    "SupportsStaging",
    "TableAlreadyExistsError",
    "TableNotFoundError",
]
