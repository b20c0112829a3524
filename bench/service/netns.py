"""Hosts on one machine: Linux network namespaces joined by a bridge, each with its own address
and its own hostname, standing in for the machines of a deployment (bench/hosts.py and
tests/e2e/test_many_hosts.py).

    with HostLab() as lab:
        services = lab.add_host("services")          # 10.x.y.2
        process = services.start(["redis-server", "--bind", services.ip], env, log)
        lab.remove_host(services)                    # its processes killed, its link gone

Every address is inside the lab's own /24 (10.x.y.0/24, x and y random); the machine's end of
the bridge is 10.x.y.1, so this process reaches every host. Everything the lab made goes when
it closes. Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

__all__ = ["Host", "HostLab", "HostLabUnavailable", "host_lab_problem", "wait_for_port"]


class HostLabUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, no iproute2)."""


def host_lab_problem() -> str | None:
    """Why a HostLab cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (or CAP_NET_ADMIN)"
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, util-linux)"
    probe = f"ffprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*argv: str, namespace: str | None = None) -> None:
    command = ["ip", *(["-n", namespace] if namespace else []), *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise HostLabUnavailable(f"{' '.join(command)} failed: {done.stderr.strip()}")


@dataclass
class Host:
    """One namespace: its name, its hostname and address, and the processes started in it."""

    name: str
    namespace: str
    ip: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def argv(self, command: Sequence[str]) -> list[str]:
        """`command` run inside this host: its network, and a hostname of its own (worker names
        are "hostname:pid")."""
        return ["ip", "netns", "exec", self.namespace, "unshare", "--uts", "sh", "-c",
                f'hostname {self.name} && exec "$@"', "--", *command]

    def start(self, command: Sequence[str], env: Mapping[str, str], log: Path
              ) -> subprocess.Popen[bytes]:
        """`command` inside this host, in a session of its own, its output in `log`."""
        with log.open("ab") as output:
            process = subprocess.Popen(self.argv(command), env=dict(env), stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        return process

    def run(self, command: Sequence[str], env: Mapping[str, str], timeout_s: float = 300
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(command), env=dict(env), capture_output=True, text=True,
                              timeout=timeout_s)

    def pids(self) -> list[int]:
        """Every process whose network is this host's (`ip netns pids`)."""
        done = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True,
                              text=True, timeout=30)
        return [int(pid) for pid in done.stdout.split()]

    def kill(self) -> None:
        """Kill every process of this host at once, as a power cut would."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


class HostLab:
    """A bridge and the hosts on it; `close()` (or leaving the `with`) removes them all."""

    def __init__(self) -> None:
        problem = host_lab_problem()
        if problem is not None:
            raise HostLabUnavailable(problem)
        self.tag = uuid.uuid4().hex[:6]
        self.subnet = f"10.{random.randint(64, 250)}.{random.randint(1, 250)}"
        self.bridge = f"ffbr{self.tag}"
        self.gateway = f"{self.subnet}.1"
        self.hosts: list[Host] = []
        self._next = 2
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Host:
        index = self._next
        self._next += 1
        host = Host(name=name, namespace=f"ff{self.tag}-{name}", ip=f"{self.subnet}.{index}")
        outside, inside = f"ffv{self.tag}{index}a", f"ffv{self.tag}{index}b"
        _ip("netns", "add", host.namespace)
        self.hosts.append(host)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", host.namespace)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("addr", "add", f"{host.ip}/24", "dev", inside, namespace=host.namespace)
        _ip("link", "set", inside, "up", namespace=host.namespace)
        _ip("link", "set", "lo", "up", namespace=host.namespace)
        return host

    def remove_host(self, host: Host) -> None:
        """Kill its processes and delete its namespace (its veth pair goes with it)."""
        host.kill()
        subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=30)
        if host in self.hosts:
            self.hosts.remove(host)

    def close(self) -> None:
        for host in reversed(self.hosts):  # the services' host, made first, goes last
            self.remove_host(host)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)

    def __enter__(self) -> HostLab:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def wait_for_port(ip: str, port: int, timeout_s: float = 60) -> None:
    """Until something accepts TCP connections at `ip`:`port`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((ip, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens at {ip}:{port} after {timeout_s} s") from None
            time.sleep(0.2)
