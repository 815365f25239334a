"""A model of how ZooKeeper (3.5-3.9) carries a session's touches to the leader, to check
the leader proof (``aiozklock._wire._leader``) against every phase of the servers' pings.

What it models, from ZooKeeper's source (3.8.0):

* the server the client talks to touches the session when a request arrives, and hands
  its touch table upstream only in its reply to its upstream's ping (``Learner.ping``);
* the leader pings each learner every ``tickTime/2`` (``Leader.lead``), an ObserverMaster
  its observers every ``tickTime/2`` on its own timer (``ObserverMaster.start``); the
  phases of those timers are the model's free parameters;
* an ObserverMaster puts its observers' touches in its own follower's table
  (``ObserverMaster.touch``): they reach the leader with that follower's next ping reply;
* a probe (a write) is forwarded hop by hop to the leader, committed there, and its commit
  comes back down the same streams as the pings (one queue per learner,
  ``LearnerHandler.queuePacket``); each link is a TCP stream with a fixed latency, so the
  order of sending is the order of arrival.

The client writes its probes as the session's clock does (``LeaderProof.due``), and after
each answer the model compares what the proof claims (``LeaderProof.proven``) with the
truth: the last instant the leader touched the session. A proof is sound if it never
claims a send time after that instant (the leader expires the session no earlier than
``timeout`` after its last touch).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from aiozklock._wire._leader import FRESH, LeaderProof

VALID = 0.9  # valid_until = proven + VALID x timeout (the clock's 1 - LOST_MARGIN)


@dataclass
class Outcome:
    """What one run found: ``overclaim`` is the most the proof claimed past the leader's
    last touch (positive: unsound); ``headroom`` the least time left before ``valid_until``
    when an answer arrived (negative: the proof could not keep up; the clock would drop
    the connection)."""

    overclaim: float = float("-inf")
    headroom: float = float("inf")
    answers: int = 0
    fresh_at: float | None = None  # the first answer after which a body may start


@dataclass
class _Server:
    touched: bool = False  # our session is in its touch table


@dataclass
class _Model:
    timeout: float
    ping: float  # every upstream pings every ``ping`` seconds (tickTime/2)
    phases: tuple[float, ...]  # hop i's first ping, hop 0 the client's server's upstream
    client_latency: float
    link_latency: float
    commit: float  # the leader's quorum commit, after a probe arrives there
    events: list[tuple[float, int, str, int]] = field(default_factory=list)
    order: itertools.count[int] = field(default_factory=itertools.count)

    def at(self, when: float, kind: str, arg: int = 0) -> None:
        heapq.heappush(self.events, (when, next(self.order), kind, arg))


def run(
    proof: LeaderProof,
    *,
    timeout: float,
    tick: float,
    hops: int,
    phases: tuple[float, ...],
    client_latency: float = 0.0005,
    link_latency: float = 0.0003,
    commit: float = 0.002,
    duration: float | None = None,
    pings: float | None = None,
    idle_until: float = 0.0,
) -> Outcome:
    """Run the model for ``duration`` (default 6 x ``timeout``) with ``hops`` servers
    between the client and the leader (1: a follower, or an observer of the leader; 2: an
    observer served by an ObserverMaster) and ``proof``, a fresh ``LeaderProof`` told what
    the client knows (``tick``, ``hops``, ``direct=False``). ``pings``: the client also
    pings its server this often (touches, no commit: candidates for ``A``); ``idle_until``:
    no holding needs the proof before then (no probe), and then one is granted: its create
    is the first write, the proof's further probes follow ``LeaderProof.due``."""
    model = _Model(timeout, tick / 2, phases, client_latency, link_latency, commit)
    servers = [_Server() for _ in range(hops)]  # 0: the client's; hops - 1 under the leader
    out = Outcome()
    down = hops * link_latency  # leader to the client's server
    leader_touch = client_latency + down  # the new session, created at the leader
    proof.attached(0.0, new_session=True)
    if not idle_until:
        proof.demanded(1, 0.0)  # a holding: probes run
    end = duration if duration is not None else 6 * timeout
    for hop, phase in enumerate(phases):
        model.at(phase, "ping", hop)
    model.at(idle_until, "probe")
    if pings is not None:
        model.at(pings / 3, "client_ping")
    sent: dict[int, float] = {}
    probes = itertools.count()
    while model.events:
        now, _, kind, arg = heapq.heappop(model.events)
        if now > end:
            break
        if kind == "client_ping":  # touches the client's server, answered by it alone
            assert pings is not None
            number = next(probes)
            sent[number] = now
            model.at(now + pings, "client_ping")
            model.at(now + client_latency, "ping_arrive", number)
        elif kind == "ping_arrive":
            servers[0].touched = True
            model.at(now + client_latency, "ping_answer", arg)
        elif kind == "ping_answer":
            proof.touched(sent[arg], now, timeout)
        elif kind == "probe":  # written by the client
            number = next(probes)
            sent[number] = now
            if not proof.demand:
                proof.demanded(1, now)  # the grant: its create is this first write, no probe
            else:
                proof.written(now)
            model.at(now + client_latency, "arrive", number)
        elif kind == "arrive":  # at the client's server: touched, forwarded up and committed
            servers[0].touched = True
            commit_at = now + down + commit
            model.at(commit_at + down + client_latency, "answer", arg)
        elif kind == "answer":
            out.headroom = min(out.headroom, proof.proven + VALID * timeout - now)
            # As ``SessionCore._on_frame`` reports a probe's reply: an answer, a commit.
            proof.touched(sent[arg], now, timeout)
            proof.committed(sent[arg], now, timeout)
            proof.answered(sent[arg], now, True, timeout)
            out.overclaim = max(out.overclaim, proof.proven - leader_touch)
            out.answers += 1
            if out.fresh_at is None and proof.proven + VALID * timeout - now >= FRESH * timeout:
                out.fresh_at = now
            urgent = proof.proven + VALID * timeout - now < FRESH * timeout
            due = proof.due(now, timeout, urgent)
            assert due is not None
            model.at(max(due, now), "probe")
        elif kind == "ping":  # hop ``arg``'s upstream pings server ``arg``
            model.at(now + model.ping, "ping", arg)
            model.at(now + link_latency, "snapshot", arg)
        elif kind == "snapshot":  # server ``arg`` replies with its table, and clears it
            touched, servers[arg].touched = servers[arg].touched, False
            if touched:
                model.at(now + link_latency, "touch", arg + 1)
        elif kind == "touch":  # the reply reached server ``arg`` (``hops``: the leader)
            if arg == hops:
                leader_touch = now
            else:
                servers[arg].touched = True
    return out


def worst(
    make: type[LeaderProof] | None = None,
    *,
    tick_known: float | None,
    config: bytes,
    timeout: float,
    tick: float,
    hops: int,
    steps: int = 12,
    **latencies: float,
) -> Outcome:
    """The worst of ``run`` over a grid of ``steps`` phases per hop: the proof told the
    tick ``tick_known`` (None: ``conf`` refused) and shown ``/zookeeper/config``
    ``config``, the servers pinging every ``tick/2``."""
    from aiozklock._wire._probe import server_kind

    total = Outcome()
    ping = tick / 2
    grid = [ping * (i + 0.37) / steps for i in range(steps)]
    for phases in itertools.product(grid, repeat=hops):
        proof = (make or LeaderProof)(0.0)
        server_kind(proof, config)
        proof.tick = tick_known
        out = run(proof, timeout=timeout, tick=tick, hops=hops, phases=phases, **latencies)
        total.overclaim = max(total.overclaim, out.overclaim)
        total.headroom = min(total.headroom, out.headroom)
        total.answers += out.answers
    return total
