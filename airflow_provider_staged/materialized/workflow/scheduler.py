"""FLIP-448: a pluggable workflow scheduler for the periodic refresh of materialized tables.

Pure interfaces (no Airflow import). An implementation is chosen by the configuration key
``workflow-scheduler.type`` and receives the options under ``workflow-scheduler.<type>.*`` with
that prefix pruned (``workflow-scheduler.airflow.endpoint`` -> ``endpoint``).
"""

from __future__ import annotations

import enum
import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from airflow_provider_staged.materialized.params import (
    DYNAMIC_OPTIONS,
    EXECUTION_CONFIG,
    IS_PERIODIC,
    REFRESH_DOWNSTREAM,
    SCHEDULE_TIME,
    STATIC_PARTITIONS,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier

WORKFLOW_SCHEDULER_PREFIX = "workflow-scheduler."
WORKFLOW_SCHEDULER_TYPE = WORKFLOW_SCHEDULER_PREFIX + "type"

# type -> "module:Class", imported only when chosen (the Airflow one pulls in its REST client).
WORKFLOW_SCHEDULERS: dict[str, str] = {
    "airflow": "airflow_provider_staged.materialized.workflow.airflow_scheduler:AirflowWorkflowScheduler",
}


class WorkflowException(Exception):
    """A failed workflow operation (create, suspend, resume, modify, delete, refresh)."""


class RefreshStatus(str, enum.Enum):
    """Refresh status of a materialized table's workflow, stored with the table."""

    INITIALIZING = "INITIALIZING"
    ACTIVATED = "ACTIVATED"
    SUSPENDED = "SUSPENDED"


class RefreshHandler(ABC):
    """Points to one refresh workflow in the scheduler service."""

    @abstractmethod
    def as_summary_string(self) -> str:
        """Human-readable summary, e.g. for DESCRIBE."""


H = TypeVar("H", bound=RefreshHandler)


class RefreshHandlerSerializer(ABC, Generic[H]):
    """Turns a scheduler's refresh handler into bytes for the catalog, and back."""

    @abstractmethod
    def serialize(self, handler: H) -> bytes: ...

    @abstractmethod
    def deserialize(self, data: bytes | str) -> H:
        """Raises :class:`WorkflowException` for data this serializer did not write."""


@dataclass(frozen=True)
class RefreshWorkflow:
    """Information needed by one operation on a refresh workflow."""


@dataclass(frozen=True)
class CreateRefreshWorkflow(RefreshWorkflow):
    """Information to create a refresh workflow."""


@dataclass(frozen=True)
class CreatePeriodicRefreshWorkflow(CreateRefreshWorkflow):
    """Create a workflow that refreshes ``identifier`` periodically.

    ``cron_expression`` overrides the schedule derived from the definition's freshness;
    ``dynamic_options`` and ``execution_config`` become the defaults of every refresh.
    """

    identifier: TableIdentifier
    definition_text: str
    cron_expression: str | None = None
    dynamic_options: Mapping[str, str] = field(default_factory=dict)
    execution_config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModifyRefreshWorkflow(RefreshWorkflow, Generic[H]):
    """Change an existing workflow located by ``refresh_handler``."""

    refresh_handler: H


@dataclass(frozen=True)
class SuspendRefreshWorkflow(ModifyRefreshWorkflow[H]):
    """Stop scheduling refreshes (runs already started finish)."""


@dataclass(frozen=True)
class ResumeRefreshWorkflow(ModifyRefreshWorkflow[H]):
    """Schedule refreshes again; non-empty maps replace the stored defaults of later refreshes."""

    dynamic_options: Mapping[str, str] = field(default_factory=dict)
    execution_config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModifyRefreshWorkflowCronExpr(ModifyRefreshWorkflow[H]):
    """Replace the schedule of the workflow with a five-field cron expression."""

    cron_expression: str


@dataclass(frozen=True)
class ModifyRefreshWorkflowDefinition(ModifyRefreshWorkflow[H]):
    """Replace the definition the workflow refreshes (``CREATE OR ALTER MATERIALIZED TABLE`` of an
    existing table, FLIP-492): later refreshes run its query, schedule and options. The caller has
    checked that the table's data allows it (:mod:`.query_change`)."""

    definition_text: str


@dataclass(frozen=True)
class DeleteRefreshWorkflow(RefreshWorkflow, Generic[H]):
    """Delete the workflow located by ``refresh_handler``."""

    refresh_handler: H


@dataclass(frozen=True)
class RefreshTrigger:
    """The refresh call of FLIP-448 (the SQL gateway's refresh REST body)."""

    is_periodic: bool = False
    schedule_time: str | None = None  # "yyyy-MM-dd HH:mm:ss", validated by the refresh itself
    dynamic_options: Mapping[str, str] = field(default_factory=dict)
    static_partitions: Mapping[str, str] = field(default_factory=dict)
    execution_config: Mapping[str, str] = field(default_factory=dict)
    # Not FLIP-448's: the tables downstream follow this one-time refresh's commit.
    refresh_downstream: bool = False

    def as_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            IS_PERIODIC: self.is_periodic,
            SCHEDULE_TIME: self.schedule_time,
            DYNAMIC_OPTIONS: dict(self.dynamic_options),
            STATIC_PARTITIONS: dict(self.static_partitions),
            EXECUTION_CONFIG: dict(self.execution_config),
        }
        if self.refresh_downstream:  # only when asked: the FLIP-448 body stays as it was
            conf[REFRESH_DOWNSTREAM] = True
        return conf


class WorkflowScheduler(ABC, Generic[H]):
    """Creates, modifies and deletes refresh workflows in one scheduler service.

    Implementations declare their options; :func:`create_workflow_scheduler` checks a
    configuration against them before calling :meth:`from_options`.
    """

    required_options: ClassVar[frozenset[str]] = frozenset()
    optional_options: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    @abstractmethod
    def from_options(cls, options: Mapping[str, str]) -> WorkflowScheduler[H]:
        """Build from pruned, key-checked options; raise WorkflowException for bad values."""

    @abstractmethod
    def open(self) -> None:
        """Prepare (connect, authenticate); raise WorkflowException on failure."""

    @abstractmethod
    def close(self) -> None:
        """Release what :meth:`open` acquired."""

    @abstractmethod
    def get_refresh_handler_serializer(self) -> RefreshHandlerSerializer[H]: ...

    @abstractmethod
    def create_refresh_workflow(self, workflow: CreateRefreshWorkflow) -> H:
        """Create the workflow and return the handler that locates it."""

    @abstractmethod
    def modify_refresh_workflow(self, workflow: ModifyRefreshWorkflow[H]) -> None:
        """Suspend, resume or re-schedule the workflow."""

    @abstractmethod
    def delete_refresh_workflow(self, workflow: DeleteRefreshWorkflow[H]) -> None:
        """Delete the workflow; deleting one that is already gone is not an error."""

    @abstractmethod
    def trigger_refresh(self, handler: H, trigger: RefreshTrigger) -> str:
        """Run one refresh now (the FLIP-448 refresh call); return the scheduler's run id."""

    def __enter__(self) -> WorkflowScheduler[H]:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def workflow_scheduler_options(config: Mapping[str, str], scheduler_type: str) -> dict[str, str]:
    """The options under ``workflow-scheduler.<type>.``, with that prefix pruned."""
    prefix = f"{WORKFLOW_SCHEDULER_PREFIX}{scheduler_type}."
    return {key[len(prefix):]: value for key, value in config.items() if key.startswith(prefix)}


def create_workflow_scheduler(config: Mapping[str, str]) -> WorkflowScheduler[Any]:
    """The scheduler named by ``workflow-scheduler.type``, built from its validated options.

    Keys outside ``workflow-scheduler.`` are ignored (the config may hold other settings).
    """
    scheduler_type = (config.get(WORKFLOW_SCHEDULER_TYPE) or "").strip().lower()
    known = ", ".join(sorted(WORKFLOW_SCHEDULERS))
    if not scheduler_type:
        raise WorkflowException(f"missing option {WORKFLOW_SCHEDULER_TYPE!r}; known types: {known}")
    if scheduler_type not in WORKFLOW_SCHEDULERS:
        raise WorkflowException(
            f"unknown {WORKFLOW_SCHEDULER_TYPE} {scheduler_type!r}; known types: {known}"
        )
    prefix = f"{WORKFLOW_SCHEDULER_PREFIX}{scheduler_type}."
    stray = sorted(
        key for key in config
        if key.startswith(WORKFLOW_SCHEDULER_PREFIX) and key != WORKFLOW_SCHEDULER_TYPE
        and not key.startswith(prefix)
    )
    if stray:
        raise WorkflowException(
            f"unknown option(s) {', '.join(stray)}: with {WORKFLOW_SCHEDULER_TYPE}={scheduler_type} "
            f"scheduler options must start with {prefix!r}"
        )
    module_name, class_name = WORKFLOW_SCHEDULERS[scheduler_type].split(":")
    implementation: type[WorkflowScheduler[Any]] = getattr(
        importlib.import_module(module_name), class_name
    )
    options = workflow_scheduler_options(config, scheduler_type)
    allowed = implementation.required_options | implementation.optional_options
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise WorkflowException(
            f"unknown option(s) {', '.join(prefix + key for key in unknown)}; "
            f"{scheduler_type} accepts: {', '.join(prefix + key for key in sorted(allowed))}"
        )
    missing = sorted(key for key in implementation.required_options if not options.get(key, "").strip())
    if missing:
        raise WorkflowException(
            f"missing required option(s) {', '.join(prefix + key for key in missing)} "
            f"for {WORKFLOW_SCHEDULER_TYPE}={scheduler_type}"
        )
    return implementation.from_options(options)
