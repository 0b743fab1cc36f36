"""The composition root: builds the store, the services and the HTTP site, and owns every task.

Only this module and :mod:`dynaq.cli` know concrete classes. Start-up order:
store → catalog/services (load config, count messages) → metrics → HTTP →
config sync loop. Shutdown is the reverse, and graceful: ``/health`` turns 503
so balancers stop sending, the HTTP site stops accepting and waits for
requests in flight (up to ``http.shutdown_timeout_s``), background tasks are
cancelled and awaited, metrics are flushed, and the store's writer commits
what it holds before the files close.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from dynaq.api.app import build_app
from dynaq.api.drain import drain
from dynaq.api.keys import FORWARDER
from dynaq.api.stream_copies import COPIES, QUORUM_TIMEOUT
from dynaq.api.stream_proxy import StreamForwarder
from dynaq.api.tls import peer_ssl_context, server_ssl_context
from dynaq.api.topic_history import HISTORY, HistoryKeeper
from dynaq.clock import Clock, SystemClock
from dynaq.cluster.stream_link import HttpAuthorityLink
from dynaq.config import Config
from dynaq.core.access import access_policy
from dynaq.core.ids import IdGenerator
from dynaq.core.membership import Member, MembershipView
from dynaq.node.aws import build_sqs
from dynaq.node.builders import (
    advertised_http,
    build_membership,
    build_metrics,
    build_peer_auth,
    build_store,
    build_writer_slots,
    check_ring_store,
    gossip_enabled,
    migrate,
)
from dynaq.node.claims import listen
from dynaq.node.peer_links import PeerLinks
from dynaq.node.streams import build_stream_ring, build_streams
from dynaq.node.workers import (
    WorkerRole,
    wait_for_other_workers,
    worker_config,
    worker_dedup_lock,
    worker_of,
    worker_scrape,
)
from dynaq.services.batches import BatchService
from dynaq.services.batches.hooks import batch_acks, batch_failures, completion_publisher
from dynaq.services.catalog import Catalog
from dynaq.services.id_floor import IdFloor
from dynaq.services.processors import ProcessorRegistry
from dynaq.services.queues import Limits, QueueService
from dynaq.services.topics import TopicService
from dynaq.storage.base import Store
from dynaq.storage.embedded import LmdbStore
from dynaq.streams.replicas import Followers
from dynaq.tasks import cancel_and_wait, every

if TYPE_CHECKING:
    from dynaq.outbox.relay import OutboxRelay

log = logging.getLogger(__name__)


class Node:
    """One dynaq node: store, services, HTTP API and background tasks."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        worker: WorkerRole | None = None,
    ) -> None:
        # A worker of a node of several (dynaq.node.workers): a ring member on
        # loopback sharing the node's port and store.
        self.worker = worker
        # What a worker answers as: its node, at the node's address.
        of = worker_of(config, worker, advertised_http(config, config.http.port))
        if worker is not None:
            config = worker_config(config, worker)
        check_ring_store(config, store_given=store is not None)
        # Before anything opens: a node others can reach refuses to run without
        # tokens (unless told it may); the TLS files must load.
        self.access = access_policy(config.auth, config.http.host)
        self.ssl = server_ssl_context(config.http)
        self.config = config
        self.clock = clock or SystemClock()
        self.peer_auth = build_peer_auth(config, self.clock)
        self.store = store or (
            build_store(config)
            if worker is None
            else build_store(
                config,
                version_tag=worker.index,
                version_tags=worker.count,
                writer_address=worker.writer_address or None,
                count_messages=worker.count > 1,
            )
        )
        self.metrics = build_metrics(config, self.clock)
        self.state = "starting"
        h = config.http
        # A node's workers reach each other on loopback in plain HTTP (signed as
        # ever): the node's certificate need not name 127.0.0.1.
        scheme = "https" if self.ssl is not None and worker is None else "http"
        me = Member(config.node.name, advertised_http(config, h.port), scheme)
        self.view = MembershipView(me)
        # SWIM ring when gossip is on (or seeds are set), else a ring of one.
        self.membership = build_membership(config, self.view)
        # A cluster node draws ids with a writer slot leased through the store;
        # losing it (cut off longer than the lease) means stop: see WriterSlots.
        self.stop_requested = asyncio.Event()
        self.writer_slots = build_writer_slots(
            config, self.store, self.clock, self.membership, self._slot_lost
        )
        self.catalog = Catalog(
            self.store,
            self.clock,
            config.queues,
            cache_ttl_s=config.sync.interval_s,
            # A node's workers share one store and must look like one node: each
            # lookup reads the record (microseconds in LMDB) instead of trusting a
            # cache another worker's change has made stale.
            read_through=worker is not None and worker.count > 1,
        )
        self.queues = QueueService(
            self.store,
            self.catalog,
            self.view,
            self.clock,
            IdGenerator(self.clock, writer=0),
            self.metrics,
            Limits(h.max_message_bytes, h.max_batch, h.max_receive_bytes),
            idle_rescan_s=config.queues.idle_rescan_s,
            dedup_window_s=config.queues.dedup_window_s,
            task_retention_s=config.queues.task_retention_s,
            sole_writer=store is None and isinstance(self.store, LmdbStore) and worker is None,
            dedup_lock=worker_dedup_lock(config, worker),
            shared_store=worker is not None and worker.count > 1,
        )
        self.topics = TopicService(
            self.store,
            self.catalog,
            self.queues.writer,
            self.clock.wall_ms,
            arn_prefix=f"arn:aws:sns:{config.aws.region}:000000000000:",
        )
        b = config.batches
        self.batches = BatchService(
            self.store,
            self.clock,
            self.view,
            self.metrics,
            max_items=b.max_items_per_request,
            open_max_age_s=b.open_max_age_s,
            closed_max_age_s=b.closed_max_age_s,
            reap_interval_s=b.reap_interval_s,
        )
        # Deleting a message that carries a batch item id acks the item.
        self.queues.add_delete_listener(batch_acks(self.batches))
        self.queues.dead_letters.failure_listeners.append(batch_failures(self.batches))
        if b.completion_topic:
            self.batches.on_completion(
                completion_publisher(self.store, self.topics, b.completion_topic, self.batches)
            )
        self.streams = build_streams(config, self.clock, 0 if worker is None else worker.index)
        self.app = build_app(
            catalog=self.catalog,
            queues=self.queues,
            topics=self.topics,
            view=self.view,
            state=lambda: self.state,
            max_request_bytes=h.max_request_bytes,
            batches=self.batches,
            body_timeout_s=h.body_timeout_s,
            access=self.access,
            peer_verifier=None if self.peer_auth is None else self.peer_auth[1],
            streams=self.streams,
            metrics=self.metrics,
            sqs=build_sqs(config, self.access, self.clock),
            processors=ProcessorRegistry(self.store, self.clock, self.metrics),
            worker_scrape=worker_scrape(
                self.worker, self.view, None if self.peer_auth is None else self.peer_auth[0]
            ),
            worker_of=of,
        )
        if isinstance(self.store, LmdbStore):
            metrics = self.metrics
            self.store.on_commit = lambda seconds: metrics.observe(
                "store_commit_duration_seconds", seconds
            )
        # In a cluster, writes made here are hinted (signed) to the owners of their slices.
        self.peer_ssl = peer_ssl_context(h) if gossip_enabled(config) else None
        self.peers: PeerLinks | None = None
        if gossip_enabled(config) and self.peer_auth is not None:
            self.peers = PeerLinks(
                self.peer_auth[0], self.view, self.clock, self.peer_ssl, self.queues, self.catalog
            )
        # A node's workers answer as one node: an empty slice asks the others.
        self.queues.ring_receive_nowait = worker is not None
        self.queues.ring_poll.fill_from_others = worker is not None
        # In a ring each stream is served by one node, recorded in the store; the
        # others forward its requests there.
        self.stream_forwarder: StreamForwarder | None = None
        self.stream_link: HttpAuthorityLink | None = None
        self.stream_followers: Followers | None = None
        if gossip_enabled(config):
            signer = None if self.peer_auth is None else self.peer_auth[0]
            ring = build_stream_ring(
                config,
                self.store,
                self.view,
                self.clock,
                self.streams,
                signer,
                self.peer_ssl,
                worker=worker is not None,
            )
            self.stream_forwarder, self.stream_link = ring.forwarder, ring.link
            self.stream_followers = ring.followers
            self.app[FORWARDER], self.app[COPIES] = ring.forwarder, ring.copies
            self.app[QUORUM_TIMEOUT] = config.streams.quorum_timeout_s
        # Topics with history keep what is published in a stream, on its authority.
        keeper = HistoryKeeper(
            self.streams,
            self.clock,
            self.stream_forwarder,
            self.stream_link,
            self.app.get(COPIES),
            config.streams.quorum_timeout_s,
        )
        self.app[HISTORY] = keeper
        self.topics.history = keeper.keep
        # The outbox relay is imported only when configured: it needs asyncpg.
        self.outbox: OutboxRelay | None = None
        if config.outbox.enabled:
            from dynaq.outbox.relay import OutboxRelay

            self.outbox = OutboxRelay(
                config.outbox,
                self.topics,
                self.view,
                self.metrics,
                max_message_bytes=h.max_message_bytes,
                max_batch=h.max_batch,
                clock=self.clock,
            )
        self.id_floor: IdFloor | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.port: int = h.port

    def _slot_lost(self) -> None:
        """Another node holds this node's writer slot: draw no id from now on (it
        could equal that node's), and stop."""
        self.queues.writer.ids.revoke()
        self.stop_requested.set()

    async def start(self) -> None:
        """Open the store, load state, take a writer slot, serve HTTP, join the ring."""
        await self.store.open()
        await migrate(self.store)
        slot = 0 if self.writer_slots is None else await self.writer_slots.acquire()
        ids = IdGenerator(self.clock, writer=slot)
        # Before the first id: continue after the slot's persisted high-water
        # mark, so a clock stepped back never redraws (and overwrites) an id.
        self.id_floor = IdFloor(self.store, self.clock, ids)
        await self.id_floor.start()
        self.queues.set_ids(ids, self.id_floor.refresh)
        await self.queues.start()
        await self.batches.start()
        await self.streams.open()
        if self.stream_forwarder is not None:
            await self.stream_forwarder.authority.claim_local(self.streams.names())
        await self.metrics.start()
        if self.peers is not None:
            await self.peers.start()
        self._runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=logging.getLogger("aiohttp.access"),
            shutdown_timeout=self.config.http.shutdown_timeout_s,
            keepalive_timeout=self.config.http.keepalive_timeout_s,
        )
        await self._runner.setup()
        h = self.config.http
        # A node's workers all listen on its port: the kernel spreads connections.
        site = web.TCPSite(
            self._runner,
            h.host,
            h.port,
            backlog=1024,
            ssl_context=self.ssl,
            reuse_port=self.worker is not None,
        )
        if self.worker is None:
            await listen(site, h.host, h.port)
            addrs = self._runner.addresses
            if addrs:
                self.port = int(addrs[0][1])
        else:
            # The worker's own address, for the other workers' node-to-node requests;
            # the node's port is listened on once the worker knows the ring (below).
            peer_port = self.worker.peer_ports[self.worker.index]
            peer = web.TCPSite(self._runner, "127.0.0.1", peer_port)
            await listen(peer, "127.0.0.1", peer_port)
            self.port = h.port
        me = self.view.me
        self.view.me = Member(me.name, advertised_http(self.config, self.port), me.scheme)
        self.view.replace([self.view.me])
        if not self.queues.park_at_stop:
            # Before the gossip join: the first member of a ring (or worker of a node)
            # back up takes what its last member parked, and the join hands the
            # entries of the lanes others serve to them (slice_handoff). Parked state
            # exists only after the whole ring stopped gracefully; members starting
            # together may each take a copy, and each keeps its own lanes' entries.
            await self.queues.restore_parked()
        # After the HTTP site is up (the address goes out as gossip metadata),
        # before "serving" (so /health stays 503 until this node knows the ring).
        await self.membership.start()
        self.queues.receiver.in_ring = True
        if self.outbox is not None:
            # After the ring join: leadership follows the ring's view of the table.
            await self.outbox.start()
        # Config changes made through other nodes arrive within one interval.
        sync = every(
            self.config.sync.interval_s, self.catalog.reload, clock=self.clock, what="config sync"
        )
        self._tasks.append(asyncio.create_task(sync, name="config-sync"))
        if self.stream_followers is not None:
            # Copies of the streams other nodes serve, kept by listening to them.
            copies = self.stream_followers.run()
            self._tasks.append(asyncio.create_task(copies, name="stream-copies"))
        self.state = "serving"
        if self.worker is not None:
            # Only now on the node's port, once every worker serves: no client
            # reaches a worker that does not know the ring (it would serve the whole
            # keyspace as if alone), nor a node whose lanes a joining worker holds.
            await wait_for_other_workers(self.worker, self.clock)
            await listen(site, h.host, h.port)
        log.info(
            "node serving",
            extra={
                "port": self.port,
                "backend": self.config.storage.backend,
                "tls": self.ssl is not None,
                "event_loop": type(asyncio.get_running_loop()).__module__.partition(".")[0],
                # How many, never which: token names and secrets stay out of logs.
                "client_tokens": 0 if self.access is None else len(self.access.tokens),
            },
        )

    async def stop(self) -> None:
        """Drain and stop; safe to call twice."""
        if self.state == "stopped":
            return
        self.state = "draining"
        log.info("node draining")
        self.queues.drain()
        if len(self.view.members) == 1:
            # Alone, or the last member of its ring (or worker of its node) to stop.
            self.queues.park_at_stop = True
        if self.peers is not None:
            await self.peers.hand_over()
        # Leave before the HTTP drain: peers take over this slice at once
        # instead of after failure detection (duplicates possible, no loss).
        await self.membership.stop()
        # Stream listeners follow forever: end them so the HTTP drain does not wait.
        self.streams.stop_listeners()
        if self.stream_forwarder is not None:  # and the listens it relays to others
            self.stream_forwarder.stop_relays()
        if self._runner is not None:
            await drain(self._runner, self.clock, self.config.http.shutdown_timeout_s)
            self._runner = None
        if self.stream_forwarder is not None:
            await self.stream_forwarder.close()
        if self.outbox is not None:
            await self.outbox.stop()
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks.clear()
        if self.stream_link is not None:
            await self.stream_link.close()
        if self.peers is not None:
            await self.peers.stop()
        if self.writer_slots is not None:
            await self.writer_slots.stop()
        await self.batches.stop()
        await self.streams.close()
        await self.queues.stop()
        if self.id_floor is not None:
            await self.id_floor.stop()
        await self.metrics.stop()
        await self.store.close()
        self.state = "stopped"
        log.info("node stopped")
