"""The engine-free core: the two-phase-commit protocol, its recovery plan, the checkpoint
coordinator and the source interface. Imports no pyspark: an engine implements these."""

from lakesink.core.checkpointing import GlobalCommitter, pre_commit_all
from lakesink.core.coordinator import (
    CheckpointCoordinator,
    CheckpointRecord,
    CheckpointStore,
    Lock,
    Pacing,
)
from lakesink.core.cut import Cut, CutMember, CutStore, CutTable
from lakesink.core.hook import StepHook, current_step_hook, step_hook
from lakesink.core.lock import ProcessLock
from lakesink.core.protocol import Clock, SystemClock, TransactionTimeout, TwoPhaseCommitSink
from lakesink.core.recovery import RecoveryPlan, plan
from lakesink.core.source import Batch, Quarantined, Source
from lakesink.core.state import (
    LoggedTransaction,
    PreCommit,
    SinkState,
    TransactionHolder,
    TransactionLog,
    TxnState,
)

__all__ = [
    "Batch",
    "CheckpointCoordinator",
    "CheckpointRecord",
    "CheckpointStore",
    "Clock",
    "Cut",
    "CutMember",
    "CutStore",
    "CutTable",
    "GlobalCommitter",
    "Lock",
    "LoggedTransaction",
    "Pacing",
    "PreCommit",
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
    "pre_commit_all",
    "step_hook",
]
