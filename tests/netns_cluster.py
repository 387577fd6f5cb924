"""Several machines on this one, for the multi-node tests: each machine a network, UTS and mount
namespace of its own (its own interfaces, addresses, hostname, ``/etc/hosts`` and ssh client
configuration; the rest of the file system shared, as a cluster's shared file system is), joined
by Linux bridges that live in a namespace of their own (the switch). On them: a real sshd per
node (what ``mpirun -H`` and ``horovodrun -H`` reach other hosts with) and a real Slurm: one
slurmctld on the head node and one slurmd per compute node (Debian's slurm-wlm is built with
``MULTIPLE_SLURMD``), from ``tests/slurm_cluster.py``.

Addresses are RFC 2544's benchmarking range (198.18.0.0/15), and only inside the namespaces
made here: no traffic leaves them. Names are unique per process (pytest's workers), every wait is
bounded, and ``down()`` leaves nothing: it kills every process in the namespaces (orphaned
slurmstepd and orted outlive their daemons), then deletes the namespaces, which removes their
interfaces. Root only; ``missing()`` says why not where it cannot run.

Faults: ``link(node, up=False)`` takes a node's switch port down (its link down for good, or a
flap), ``slow(node, rate)`` limits its link's rate (``tc``'s tbf; this kernel has no ``netem``, so
delay and loss are not made here), ``kill_node`` kills everything on a node (its slurmd and
slurmstepd too, as a power loss would).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time

from slurm_cluster import SlurmCluster

# One /24 per network: a node's first interface (eth0) on the first, its second (eth1) on the
# second. The head is .254, node K is .K.
SUBNETS = ("198.18.0", "198.18.1")
HEAD = "head"
TOOLS = ("ip", "nsenter", "unshare", "tc", "sshd", "ssh", "ssh-keygen")


def missing() -> str | None:
    """Why this machine cannot make the cluster, or None."""
    if os.geteuid() != 0:
        return "namespaces, bridges and daemons need root"
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return (f"{', '.join(absent)} missing (iproute2, util-linux, openssh-server): "
                "bash scripts/install_test_deps.sh")
    return None


def _run(args, timeout=30, check=True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode:
        raise RuntimeError(f"{' '.join(map(str, args))}: {proc.stderr.strip() or proc.stdout}")
    return proc


class Machines:
    """``nodes`` compute nodes (node1..nodeN) and a head node, each with ``interfaces``
    network interfaces (eth0, eth1) on as many bridges."""
    made = 0  # clusters made by this process: their names differ

    def __init__(self, root: str, nodes: int = 2, interfaces: int = 1):
        self.root = root
        Machines.made += 1
        self.prefix = f"tms{os.getpid()}c{Machines.made}"
        self.nodes = [f"node{i}" for i in range(1, nodes + 1)]
        self.interfaces = interfaces
        self.switch = f"{self.prefix}-sw"
        self._holders: dict[str, subprocess.Popen] = {}
        self._sshd: dict[str, subprocess.Popen] = {}

    # --- names and addresses --------------------------------------------------------------
    def netns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def addr(self, name: str, interface: int = 0) -> str:
        host = 254 if name == HEAD else int(name[4:])
        return f"{SUBNETS[interface]}.{host}"

    def _port(self, name: str, interface: int) -> str:  # the switch's side of a node's link
        return f"p{254 if name == HEAD else name[4:]}e{interface}"

    @property
    def machines(self) -> list[str]:
        return [HEAD, *self.nodes]

    # --- up and down ----------------------------------------------------------------------
    def up(self) -> Machines:
        try:
            self._networks()
            self._files()
            for name in self.machines:
                self._hold(name)
            for name in self.nodes:
                self._start_sshd(name)
        except BaseException:
            self.down()
            raise
        return self

    def _networks(self) -> None:
        _run(["ip", "netns", "add", self.switch])
        for i in range(self.interfaces):
            _run(["ip", "-n", self.switch, "link", "add", f"br{i}", "type", "bridge"])
            _run(["ip", "-n", self.switch, "link", "set", f"br{i}", "up"])
        for name in self.machines:
            ns = self.netns(name)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            for i in range(self.interfaces):
                port = self._port(name, i)
                _run(["ip", "link", "add", f"eth{i}", "netns", ns, "type", "veth", "peer", "name",
                      port, "netns", self.switch])
                _run(["ip", "-n", self.switch, "link", "set", port, "master", f"br{i}", "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.addr(name, i)}/24", "dev", f"eth{i}"])
                _run(["ip", "-n", ns, "link", "set", f"eth{i}", "up"])

    def _files(self) -> None:
        """Each machine's /etc/hosts (every name at its first interface's address) and the ssh
        client configuration a site gives its nodes (its key, no host-key prompts), bound over
        /etc in its own mount namespace; an sshd configuration and keys in the scratch folder."""
        ssh = os.path.join(self.root, "ssh")
        os.makedirs(ssh, mode=0o700, exist_ok=True)
        with open(os.path.join(self.root, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n")
            f.writelines(f"{self.addr(n)} {n}\n" for n in self.machines)
        for key in ("host_key", "id_ed25519"):
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(ssh, key)])
        shutil.copy(os.path.join(ssh, "id_ed25519.pub"), os.path.join(ssh, "authorized_keys"))
        with open(os.path.join(ssh, "ssh_config"), "w") as f:
            f.write(f"Host *\n  IdentityFile {ssh}/id_ed25519\n  StrictHostKeyChecking no\n"
                    "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n  BatchMode yes\n")
        with open(os.path.join(ssh, "sshd_config"), "w") as f:
            f.write(f"Port 22\nHostKey {ssh}/host_key\nAuthorizedKeysFile {ssh}/authorized_keys\n"
                    "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n"
                    "StrictModes no\nPidFile none\n")

    def _hold(self, name: str) -> None:
        """A process that holds the machine's UTS and mount namespaces (the network one is
        named): its hostname, its /etc/hosts, its ssh client configuration, and a /run of its
        own (sshd's privilege-separation folder)."""
        hosts, ssh = os.path.join(self.root, "hosts"), os.path.join(self.root, "ssh")
        script = (f"hostname {name} && mount --bind {hosts} /etc/hosts && "
                  f"mount --bind {ssh}/ssh_config /etc/ssh/ssh_config && "
                  "mount -t tmpfs tmpfs /run && mkdir /run/sshd && echo ready && "
                  "exec sleep infinity")
        holder = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.netns(name)}", "unshare", "--uts", "--mount",
             "--propagation", "private", "sh", "-c", script],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self._holders[name] = holder
        line = holder.stdout.readline().strip()  # bounded: the script ends or says ready
        if line != "ready":
            raise RuntimeError(f"machine {name} did not come up: {line}{holder.stdout.read()}")

    def _start_sshd(self, name: str) -> None:
        log = open(os.path.join(self.root, f"sshd-{name}.log"), "w")
        config = os.path.join(self.root, "ssh", "sshd_config")
        self._sshd[name] = self.popen(name, ["/usr/sbin/sshd", "-D", "-e", "-f", config],
                                      stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.run(HEAD, ["ssh", name, "true"], timeout=20, check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"sshd on {name} does not answer: {open(log.name).read()[-1000:]}")

    def pids(self, *names: str) -> list[int]:
        """Every process on the machines ``names`` (default: all of them and the switch)."""
        found = []
        for name in names or [*self.machines, "sw"]:
            proc = _run(["ip", "netns", "pids", self.netns(name)], check=False)
            found += [int(p) for p in proc.stdout.split()]
        return found

    def down(self) -> None:
        """Kills everything in the namespaces (twice: a dying slurmd's step daemons), then
        deletes them; raises if anything is left."""
        for _ in range(2):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        for p in [*self._holders.values(), *self._sshd.values()]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        for name in [*self.machines, "sw"]:
            _run(["ip", "netns", "del", self.netns(name)], check=False)
        left = [n for n in _run(["ip", "netns", "list"]).stdout.split()
                if n.startswith(self.prefix)]
        if left:
            raise RuntimeError(f"namespaces left behind: {left}")

    # --- commands on a machine ------------------------------------------------------------
    def wrap(self, name: str, args, cwd: str | None = None) -> list[str]:
        """``args`` as a command run on machine ``name`` (in ``cwd``, default this one's)."""
        return ["nsenter", "-t", str(self._holders[name].pid), "--net", "--uts", "--mount",
                f"--wd={cwd or os.getcwd()}", "--", *map(str, args)]

    def run(self, name: str, args, timeout: float = 60, check: bool = False, cwd=None,
            **kw) -> subprocess.CompletedProcess:
        return _run(self.wrap(name, args, cwd), timeout=timeout, check=check, **kw)

    def popen(self, name: str, args, cwd=None, **kw) -> subprocess.Popen:
        return subprocess.Popen(self.wrap(name, args, cwd), start_new_session=True, **kw)

    # --- faults ---------------------------------------------------------------------------
    def link(self, name: str, up: bool, interface: int | None = None) -> None:
        """A node's switch ports (all, or one interface's) up or down: from the node's side its
        link has no carrier, as when a cable or a switch port fails."""
        for i in range(self.interfaces) if interface is None else [interface]:
            _run(["ip", "-n", self.switch, "link", "set", self._port(name, i),
                  "up" if up else "down"])

    def slow(self, name: str, rate: str | None, interface: int = 0) -> None:
        """Limits what node ``name`` sends on an interface to ``rate`` (tc's tbf, e.g.
        "20mbit"); None takes the limit off."""
        dev = f"eth{interface}"
        if rate is None:
            _run(["ip", "netns", "exec", self.netns(name), "tc", "qdisc", "del", "dev", dev,
                  "root"], check=False)
            return
        _run(["ip", "netns", "exec", self.netns(name), "tc", "qdisc", "replace", "dev", dev,
              "root", "tbf", "rate", rate, "burst", "64kb", "latency", "200ms"])

    def kill_node(self, name: str) -> None:
        """Node ``name`` lost as a power loss loses it: its link goes dark first (no process of
        it closes a connection), then everything running on it is killed. Its namespaces and
        files stay: ``link(name, True)`` and ``NetnsSlurm.restart_slurmd`` boot it again."""
        self.link(name, up=False)
        holder = self._holders[name].pid
        for pid in self.pids(name):
            if pid != holder:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def boot(self, name: str) -> None:
        """Node ``name`` back after ``kill_node``: its link up and its sshd started (Slurm's
        slurmd: ``NetnsSlurm.restart_slurmd``)."""
        self.link(name, up=True)
        self._start_sshd(name)

    def tx_bytes(self, name: str, interface: int) -> int:
        """Bytes node ``name`` has sent on an interface."""
        out = _run(["ip", "-n", self.netns(name), "-j", "-s", "link", "show", f"eth{interface}"])
        return int(json.loads(out.stdout)[0]["stats64"]["tx"]["bytes"])


class NetnsSlurm(SlurmCluster):
    """The Slurm of ``Machines``: slurmctld on the head, a slurmd per node at the node's
    address, each node with its own spool, pid, log and ``TmpFS`` (a shared /tmp made every
    PMIx step fail with "File exists"); commands (sbatch, squeue, scontrol) run on the head."""

    def __init__(self, machines: Machines, slurmd_timeout: int = 120):
        super().__init__(os.path.join(machines.root, "slurm"), cpus=os.cpu_count())
        self.machines = machines
        self.host = HEAD
        self.slurmd_timeout = slurmd_timeout

    def command(self, args, node: str | None = None, cwd: str | None = None) -> list[str]:
        return self.machines.wrap(node or HEAD, args, cwd)

    def conf_lines(self) -> list[str]:
        m, d = self.machines, self.root
        for n in m.nodes:
            for sub in ("tmp", "spool"):
                os.makedirs(os.path.join(d, n, sub), exist_ok=True)
        return [
            f"SlurmctldHost={HEAD}({m.addr(HEAD)})",
            "SlurmctldPort=6817", "SlurmdPort=6818",
            f"SlurmdSpoolDir={d}/%n/spool", f"SlurmdPidFile={d}/%n/slurmd.pid",
            f"SlurmdLogFile={d}/%n/slurmd.log", f"TmpFS={d}/%n/tmp",
            # Two busy cores can keep a node's slurmd from answering for a while: a node is
            # declared down only after this (Slurm's default is 300 s).
            f"SlurmdTimeout={self.slurmd_timeout}",
            *(f"NodeName={n} NodeAddr={m.addr(n)} CPUs={self.cpus} RealMemory=8000 "
              "State=UNKNOWN" for n in m.nodes),
        ]

    def slurmds(self) -> list[tuple[str, list[str]]]:
        return [(n, ["slurmd", "-D", "-f", self.conf, "-N", n]) for n in self.machines.nodes]

    def restart_slurmd(self, node: str) -> None:
        """Node ``node``'s slurmd started again, as after a reboot (its spool as it was)."""
        self._procs = [p for p in self._procs if p.poll() is None]  # the killed one
        self._start(self.command(["slurmd", "-D", "-f", self.conf, "-N", node], node),
                    f"slurmd-{node}.out")
