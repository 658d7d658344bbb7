"""A Redis primary, a replica and three sentinels on loopback, each a real `redis-server` process of our own
(docs/failover.md): what the failover tests kill and watch."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support.redis_server import _answers, _free_port, _server_binary
from tests.support.tcp_proxy import FreezableProxy

MASTER_NAME = "claudeq-test"


class Node:
    """One redis-server process on a free loopback port, started with `args` (a config file for a sentinel)."""

    def __init__(self, directory: Path, args: list[str], port: int, sentinel: bool = False) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.dir = directory
        self.args = args
        self.sentinel = sentinel
        self.proc = self._start()

    def _start(self, extra: list[str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.dir / "server.log", "ab") as log:  # the child keeps its own descriptor
            command = [_server_binary(), *self.args, *(extra or [])]
            proc = subprocess.Popen(command, stdout=log, stderr=log, cwd=self.dir)
        deadline = time.monotonic() + 30
        while not _answers(self.url):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(
                    f"redis-server {self.args[:2]} did not start: {(self.dir / 'server.log').read_text()}"
                )
            time.sleep(0.05)
        return proc

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, with whatever it had not replicated."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its port and its data but answers nobody (a partition, as seen from outside)."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Start the process again on its port (after `kill`): the sentinels make a returning old primary a replica."""
        self.proc = self._start()

    def rejoin(self, primary_port: int) -> None:
        """Start a killed node again as a replica of `primary_port` that is never promoted (replica-priority 0).
        Nodes here keep no data on disk, so it comes back empty: as a primary it would serve nothing, and promoted
        before its first sync completes it would make the group forget what it held (Redis's advice for primaries
        without persistence). It is what the group needs to write again under `min-replicas-to-write`."""
        self.proc = self._start(["--replicaof", "127.0.0.1", str(primary_port), "--replica-priority", "0"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class SentinelGroup:
    """A primary, a replica and three sentinels monitoring them as MASTER_NAME; `down_after_ms` is how long a
    primary must be unreachable before the sentinels agree it is down and promote the replica."""

    def __init__(self, down_after_ms: int = 1000, min_replicas_to_write: int = 0, partitionable: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="claudeq-sentinel-"))
        self.down_after_ms = down_after_ms
        common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"]
        guard = ["--min-replicas-to-write", str(min_replicas_to_write), "--min-replicas-max-lag", "2"]
        self.nodes: list[Node] = []
        primary_port = _free_port()
        self.primary = self._node("primary", ["--port", str(primary_port), *common, *guard], primary_port)
        # `partitionable`: the replica and the sentinels reach the primary only through a proxy that `partition()`
        # freezes, while a client that connects to `primary.port` itself still reaches it (the old primary of a
        # network partition, cut off from the rest but not from every producer).
        self.proxy = FreezableProxy("127.0.0.1", primary_port) if partitionable else None
        self.monitored_port = self.proxy.port if self.proxy is not None else primary_port
        replica_port = _free_port()
        self.replica = self._node(
            "replica",
            ["--port", str(replica_port), *common, *guard, "--replicaof", "127.0.0.1", str(self.monitored_port)],
            replica_port,
        )
        self._wait_replica_in_sync()
        self.sentinels = [self._sentinel(i, self.monitored_port) for i in range(3)]
        self._wait(lambda: all(self._sentinel_knows_replica(s) for s in self.sentinels), "sentinels to see the replica")

    def _node(self, name: str, args: list[str], port: int, sentinel: bool = False) -> Node:
        directory = self.root / name
        directory.mkdir()
        node = Node(directory, args, port, sentinel)
        self.nodes.append(node)
        return node

    def _sentinel(self, index: int, primary_port: int) -> Node:
        port = _free_port()
        directory = self.root / f"sentinel-{index}"
        directory.mkdir()
        conf = directory / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}\n"
            f"sentinel failover-timeout {MASTER_NAME} 5000\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        node = Node(directory, [str(conf), "--sentinel"], port, sentinel=True)
        self.nodes.append(node)
        return node

    @property
    def sentinels_setting(self) -> str:
        """The `CLAUDEQ_REDIS_SENTINELS` value for this group."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    def primary_port(self) -> int | None:
        """The primary's port as the sentinels' majority names it now (None: they do not agree)."""
        seen: dict[int, int] = {}
        for sentinel in self.sentinels:
            try:
                host_port = sentinel.client().execute_command("SENTINEL", "get-master-addr-by-name", MASTER_NAME)
            except redis.RedisError:
                continue
            if host_port:
                port = int(host_port[1])
                seen[port] = seen.get(port, 0) + 1
        best = max(seen.items(), key=lambda item: item[1], default=None)
        return best[0] if best and best[1] >= 2 else None

    def wait_failover(self, old_port: int, timeout_s: float = 30) -> float:
        """Block until the sentinels name a primary other than `old_port` and it accepts writes; -> seconds taken."""
        started = time.monotonic()

        def promoted() -> bool:
            port = self.primary_port()
            if port is None or port == old_port:
                return False
            try:
                return bool(redis.Redis(port=port, socket_timeout=1).info("replication")["role"] == "master")
            except redis.RedisError:
                return False

        self._wait(promoted, "the sentinels to promote the replica", timeout_s)
        return time.monotonic() - started

    def _wait_replica_in_sync(self) -> None:
        def synced() -> bool:
            info = self.replica.client().info("replication")
            return bool(info.get("master_link_status") == "up")

        self._wait(synced, "the replica to sync")

    def _sentinel_knows_replica(self, sentinel: Node) -> bool:
        try:
            replicas = sentinel.client().execute_command("SENTINEL", "replicas", MASTER_NAME)
        except redis.RedisError:
            return False
        return bool(replicas)

    @staticmethod
    def _wait(condition: object, what: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if callable(condition) and condition():
                return
            time.sleep(0.1)
        raise TimeoutError(f"timed out waiting for {what}")

    def partition(self) -> None:
        """Cut the primary off from the replica and the sentinels (not from direct clients)."""
        assert self.proxy is not None, "SentinelGroup(partitionable=True)"
        self.proxy.freeze()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self.proxy is not None:
            self.proxy.close()
        shutil.rmtree(self.root, ignore_errors=True)
