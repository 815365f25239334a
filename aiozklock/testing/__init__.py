"""aiozklock's test kit: real ZooKeeper servers, a throwaway PostgreSQL, a fault-injecting
proxy, real session expiry, a raw observer connection, a history checker for lock safety,
and a randomized fault nemesis that uses them all (:func:`run_nemesis`, or
``python -m aiozklock nemesis``).

Server fixtures for pytest live in :mod:`aiozklock.testing.pytest_plugin`.
"""

from aiozklock._acl import digest_id as digest_id

from ._children import wait_for_children as wait_for_children
from ._connector import ZooKeeperConnector as ZooKeeperConnector
from ._cut_margin import CutMargin as CutMargin
from ._cut_margin import measure_cut as measure_cut
from ._expiry import expire_session as expire_session
from ._history import History as History
from ._history_records import AcquireAttempt as AcquireAttempt
from ._history_records import CriticalSection as CriticalSection
from ._history_records import Crowding as Crowding
from ._history_records import FencedRead as FencedRead
from ._history_records import FencedStore as FencedStore
from ._history_records import FencedWrite as FencedWrite
from ._history_records import Margin as Margin
from ._history_records import Pause as Pause
from ._history_records import StaleWrite as StaleWrite
from ._history_report import HistoryReport as HistoryReport
from ._internals import session_of as session_of
from ._nemesis_plan import FAULT_KINDS as FAULT_KINDS
from ._nemesis_plan import FaultGroup as FaultGroup
from ._nemesis_plan import FaultSpec as FaultSpec
from ._nemesis_plan import plan_faults as plan_faults
from ._nemesis_report import NemesisReport as NemesisReport
from ._nemesis_run import run_nemesis as run_nemesis
from ._nemesis_tally import FaultRecord as FaultRecord
from ._postgres import PostgresServer as PostgresServer
from ._postgres import PostgresStartError as PostgresStartError
from ._postgres import PostgresUnavailableForTests as PostgresUnavailableForTests
from ._postgres import find_postgres_bin as find_postgres_bin
from ._proxy import FaultProxy as FaultProxy
from ._proxy_records import ObservedHandshake as ObservedHandshake
from ._proxy_records import ObservedRequest as ObservedRequest
from ._proxy_records import Opcode as Opcode
from ._rawclient import RawZooKeeperConnection as RawZooKeeperConnection
from ._rawclient_records import NodeStat as NodeStat
from ._rawclient_records import RawConnectionClosed as RawConnectionClosed
from ._rawclient_records import RawSessionExpired as RawSessionExpired
from ._rawclient_records import RawWatchEvent as RawWatchEvent
from ._rawclient_records import RawZooKeeperError as RawZooKeeperError
from ._rawclient_records import WatchEventType as WatchEventType
from ._rawclient_records import ZooKeeperErrorCode as ZooKeeperErrorCode
from ._redis import RedisServer as RedisServer
from ._redis import RedisUnavailableForTests as RedisUnavailableForTests
from ._server import ZooKeeperCluster as ZooKeeperCluster
from ._server_install import ZooKeeperUnavailableForTests as ZooKeeperUnavailableForTests
from ._server_install import find_zookeeper_classpath as find_zookeeper_classpath
from ._server_install import four_letter_word as four_letter_word
from ._server_member import PortTaken as PortTaken
from ._server_member import ZooKeeperMember as ZooKeeperMember
from ._server_member import ZooKeeperStartError as ZooKeeperStartError
from ._tls import TLSFiles as TLSFiles

__all__ = (
    "session_of",
    "CutMargin",
    "measure_cut",
    "wait_for_children",
    "FAULT_KINDS",
    "AcquireAttempt",
    "CriticalSection",
    "Crowding",
    "FaultGroup",
    "FaultProxy",
    "FaultRecord",
    "FaultSpec",
    "FencedRead",
    "FencedStore",
    "FencedWrite",
    "History",
    "HistoryReport",
    "Margin",
    "NemesisReport",
    "Pause",
    "PortTaken",
    "PostgresServer",
    "PostgresStartError",
    "PostgresUnavailableForTests",
    "StaleWrite",
    "TLSFiles",
    "NodeStat",
    "ObservedHandshake",
    "ObservedRequest",
    "Opcode",
    "RawConnectionClosed",
    "RawSessionExpired",
    "RawWatchEvent",
    "RawZooKeeperConnection",
    "RawZooKeeperError",
    "RedisServer",
    "RedisUnavailableForTests",
    "WatchEventType",
    "ZooKeeperCluster",
    "ZooKeeperConnector",
    "ZooKeeperErrorCode",
    "ZooKeeperMember",
    "ZooKeeperStartError",
    "ZooKeeperUnavailableForTests",
    "digest_id",
    "expire_session",
    "find_postgres_bin",
    "find_zookeeper_classpath",
    "four_letter_word",
    "plan_faults",
    "run_nemesis",
)
