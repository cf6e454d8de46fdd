"""The engine-free core: the two-phase-commit protocol, its recovery plan, the checkpoint
coordinator and the source interface. Imports no pyspark: an engine implements these."""

from lakesink.core.coordinator import (
    CheckpointCoordinator,
    CheckpointRecord,
    CheckpointStore,
    Lock,
    Pacing,
)
from lakesink.core.cut import Cut, CutMember, CutStore, CutTable, record_cut
from lakesink.core.lock import ProcessLock
from lakesink.core.protocol import Clock, SystemClock, TransactionTimeout, TwoPhaseCommitSink
from lakesink.core.recovery import RecoveryPlan, plan
from lakesink.core.source import Batch, Quarantined, Source
from lakesink.core.state import (
    STEP_HOOK_ENV,
    LoggedTransaction,
    SinkState,
    StepHook,
    TransactionHolder,
    TransactionLog,
    TxnState,
    current_step_hook,
    step_hook,
    step_hook_from_env,
)

__all__ = [
    "STEP_HOOK_ENV",
    "Batch",
    "CheckpointCoordinator",
    "CheckpointRecord",
    "CheckpointStore",
    "Clock",
    "Cut",
    "CutMember",
    "CutStore",
    "CutTable",
    "Lock",
    "LoggedTransaction",
    "Pacing",
    "ProcessLock",
    "Quarantined",
    "RecoveryPlan",
    "SinkState",
    "Source",
    "StepHook",
    "SystemClock",
    "TransactionHolder",
    "TransactionLog",
    "TransactionTimeout",
    "TwoPhaseCommitSink",
    "TxnState",
    "current_step_hook",
    "plan",
    "record_cut",
    "step_hook",
    "step_hook_from_env",
]
