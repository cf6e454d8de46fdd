# lakesink's public names, each written once: type checkers read them here, and
# lakesink/__init__.py hands each out from its module on first use.
from lakesink.core import CheckpointCoordinator as CheckpointCoordinator
from lakesink.core import SinkState as SinkState
from lakesink.core import TransactionHolder as TransactionHolder
from lakesink.core import TransactionTimeout as TransactionTimeout
from lakesink.core import TwoPhaseCommitSink as TwoPhaseCommitSink
from lakesink.core import TxnState as TxnState
from lakesink.delta.options import SinkOptions as SinkOptions
from lakesink.delta.sink import DeltaSink as DeltaSink
from lakesink.errors import AlreadyRunningError as AlreadyRunningError
from lakesink.errors import AuditFailedError as AuditFailedError
from lakesink.errors import CheckpointOrderError as CheckpointOrderError
from lakesink.errors import CommitFailedError as CommitFailedError
from lakesink.errors import CommitRoundError as CommitRoundError
from lakesink.errors import CommitStateUnknownError as CommitStateUnknownError
from lakesink.errors import ConfigurationError as ConfigurationError
from lakesink.errors import FormatVersionError as FormatVersionError
from lakesink.errors import LakesinkError as LakesinkError
from lakesink.errors import LeaseLostError as LeaseLostError
from lakesink.errors import MetricsExportError as MetricsExportError
from lakesink.errors import ProtocolError as ProtocolError
from lakesink.errors import ReservedColumnError as ReservedColumnError
from lakesink.errors import SchemaMismatchError as SchemaMismatchError
from lakesink.errors import StorageAccessError as StorageAccessError
from lakesink.errors import TableNotFoundError as TableNotFoundError
from lakesink.errors import UnknownCheckpointError as UnknownCheckpointError
from lakesink.errors import ValidationSuiteError as ValidationSuiteError
from lakesink.readers.deltars import arrow as arrow
from lakesink.readers.spark import committed as committed
from lakesink.spark.session import spark_session as spark_session
from lakesink.spark.settings import CommitRetry as CommitRetry
from lakesink.spark.validation import ValidationGate as ValidationGate
from lakesink.streaming import StreamingSink as StreamingSink
from lakesink.table import Checkpoint as Checkpoint
from lakesink.table import Table as Table

__version__: str
