"""aiozklock: async-first distributed locks on Apache ZooKeeper.

async with aiozklock.connect("zk1:2181,zk2:2181") as zk:
    async with zk.lock("/locks/orders/157") as lock:  # body is cancelled if the lock is lost
        await store.write(data, fencing_token=lock.fencing_token)
"""

from typing import TYPE_CHECKING, Any

from aiozklock._acl import ACL as ACL
from aiozklock._acl import CREATOR_ALL_ACL as CREATOR_ALL_ACL
from aiozklock._acl import CREATOR_ALL_WORLD_READ_ACL as CREATOR_ALL_WORLD_READ_ACL
from aiozklock._acl import OPEN_ACL_UNSAFE as OPEN_ACL_UNSAFE
from aiozklock._acl import READ_ACL_UNSAFE as READ_ACL_UNSAFE
from aiozklock._acl import Perms as Perms
from aiozklock._client import ZooKeeperClient as ZooKeeperClient
from aiozklock._client import connect as connect
from aiozklock._exceptions import AiozklockError as AiozklockError
from aiozklock._exceptions import AuthenticationFailed as AuthenticationFailed
from aiozklock._exceptions import BadVersionError as BadVersionError
from aiozklock._exceptions import ClientClosed as ClientClosed
from aiozklock._exceptions import ConnectionLoss as ConnectionLoss
from aiozklock._exceptions import FenceMissing as FenceMissing
from aiozklock._exceptions import InvalidACLError as InvalidACLError
from aiozklock._exceptions import InvalidArgument as InvalidArgument
from aiozklock._exceptions import LayoutConflict as LayoutConflict
from aiozklock._exceptions import LeadershipLost as LeadershipLost
from aiozklock._exceptions import LockLost as LockLost
from aiozklock._exceptions import LockOrderViolation as LockOrderViolation
from aiozklock._exceptions import LockOrderWarning as LockOrderWarning
from aiozklock._exceptions import LockRevoked as LockRevoked
from aiozklock._exceptions import LockTimeout as LockTimeout
from aiozklock._exceptions import MaxLeasesMismatch as MaxLeasesMismatch
from aiozklock._exceptions import NoAuthError as NoAuthError
from aiozklock._exceptions import NodeExistsError as NodeExistsError
from aiozklock._exceptions import NoNodeError as NoNodeError
from aiozklock._exceptions import NotLockOwner as NotLockOwner
from aiozklock._exceptions import NotRevoked as NotRevoked
from aiozklock._exceptions import SessionExpired as SessionExpired
from aiozklock._exceptions import StaleFencingToken as StaleFencingToken
from aiozklock._exceptions import TTLNotSupported as TTLNotSupported
from aiozklock._exceptions import UsageError as UsageError
from aiozklock._exceptions import ZooKeeperError as ZooKeeperError
from aiozklock._exceptions import ZooKeeperUnavailable as ZooKeeperUnavailable
from aiozklock._recipes._core._contenders import Contender as Contender
from aiozklock._recipes._core._delay_record import RunningLockDelay as RunningLockDelay
from aiozklock._recipes._core._holding import LossPolicy as LossPolicy
from aiozklock._recipes._election import Election as Election
from aiozklock._recipes._lease import LeaseLock as LeaseLock
from aiozklock._recipes._lease import LeaseStatistics as LeaseStatistics
from aiozklock._recipes._lock import Lock as Lock
from aiozklock._recipes._lock import LockStatistics as LockStatistics
from aiozklock._recipes._multilock import MultiLock as MultiLock
from aiozklock._recipes._multilock import MultiLockStatistics as MultiLockStatistics
from aiozklock._recipes._nonfair import NonFairLock as NonFairLock
from aiozklock._recipes._nonfair import NonFairLockStatistics as NonFairLockStatistics
from aiozklock._recipes._rwlock import ReadLock as ReadLock
from aiozklock._recipes._rwlock import ReadLockStatistics as ReadLockStatistics
from aiozklock._recipes._rwlock import ReadWriteLock as ReadWriteLock
from aiozklock._recipes._rwlock import WriteLock as WriteLock
from aiozklock._recipes._semaphore import Semaphore as Semaphore
from aiozklock._recipes._semaphore import SemaphoreStatistics as SemaphoreStatistics
from aiozklock._settings import ConnectOptions as ConnectOptions
from aiozklock._wire._now import clock as clock
from aiozklock._wire._protocol import Stat as Stat
from aiozklock._wire._session import SessionState as SessionState
from aiozklock._wire._session import StateChange as StateChange

if TYPE_CHECKING:  # the doctor's types, loaded on first use (import aiozklock stays cheap)
    from aiozklock._doctor._model import Diagnosis as Diagnosis
    from aiozklock._doctor._model import Finding as Finding
    from aiozklock._doctor._model import FindingKind as FindingKind
    from aiozklock._doctor._model import Party as Party
    from aiozklock._doctor._model import QueueState as QueueState
    from aiozklock._doctor._model import Severity as Severity
    from aiozklock._doctor._model import Wait as Wait

_LAZY = frozenset(
    {"Diagnosis", "Finding", "FindingKind", "Party", "QueueState", "Severity", "Wait"}
)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from aiozklock._doctor import _model

        value = getattr(_model, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.2.0"

__all__ = (
    "ACL",
    "CREATOR_ALL_ACL",
    "CREATOR_ALL_WORLD_READ_ACL",
    "OPEN_ACL_UNSAFE",
    "READ_ACL_UNSAFE",
    "AiozklockError",
    "AuthenticationFailed",
    "BadVersionError",
    "ClientClosed",
    "ConnectOptions",
    "ConnectionLoss",
    "Contender",
    "Diagnosis",
    "Election",
    "FenceMissing",
    "Finding",
    "FindingKind",
    "InvalidACLError",
    "InvalidArgument",
    "LayoutConflict",
    "LeadershipLost",
    "LeaseLock",
    "LeaseStatistics",
    "Lock",
    "LockLost",
    "LockOrderViolation",
    "LockOrderWarning",
    "LockRevoked",
    "LockStatistics",
    "LockTimeout",
    "LossPolicy",
    "MaxLeasesMismatch",
    "MultiLock",
    "MultiLockStatistics",
    "NoAuthError",
    "NoNodeError",
    "NonFairLock",
    "NonFairLockStatistics",
    "NodeExistsError",
    "NotLockOwner",
    "NotRevoked",
    "Party",
    "Perms",
    "QueueState",
    "ReadLock",
    "ReadLockStatistics",
    "ReadWriteLock",
    "RunningLockDelay",
    "Semaphore",
    "SemaphoreStatistics",
    "SessionExpired",
    "SessionState",
    "Severity",
    "StaleFencingToken",
    "Stat",
    "StateChange",
    "TTLNotSupported",
    "UsageError",
    "Wait",
    "WriteLock",
    "ZooKeeperClient",
    "ZooKeeperError",
    "ZooKeeperUnavailable",
    "clock",
    "connect",
)
