"""A real one-node Slurm cluster on this machine, for the tests: munged, slurmctld and slurmd
from Debian's packages (scripts/install_test_deps.sh), each started in the foreground with its
own key, socket, configuration, state and ports in a scratch directory, and stopped after.
Nothing in /etc or /run is touched; commands reach the cluster through ``SLURM_CONF``.

The node offers this machine's CPUs and no GPU: the project's sbatch files ask for GPUs, which
the tests override with ``--gpus-per-node=0``, as the README tells users of a CPU node to.
"""
from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import time

from serving.connection import free_ports

# A job in these states has not ended (SIGNALING: Slurm is sending a --signal warning; REQUEUED:
# on its way back to PENDING).
UNFINISHED = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING", "REQUEUED",
              "UNKNOWN")
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "scancel", "sinfo")


def missing() -> list[str]:
    return [d for d in DAEMONS if shutil.which(d) is None]


class SlurmCluster:
    def __init__(self, root: str, cpus: int | None = None):
        self.root = root
        self.host = socket.gethostname()
        self.cpus = cpus or os.cpu_count()
        self.conf = os.path.join(root, "slurm.conf")
        self.munge_socket = os.path.join(root, "munge", "munge.socket")
        self._procs: list[subprocess.Popen] = []

    # --- environment for commands --------------------------------------------------------
    def env(self, **extra) -> dict:
        """This process's environment with the cluster's configuration, and no Slurm job or
        launcher variables of an enclosing one."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "PMIX_", "PMI_", "OMPI_", "HOROVOD_"))}
        env.update(SLURM_CONF=self.conf, PYTHONUNBUFFERED="1", **extra)
        return env

    def command(self, args, node: str | None = None, cwd: str | None = None) -> list[str]:
        """``args`` as a command run on ``node`` (the controller's host by default): here, on
        this one machine."""
        return list(args)

    def run(self, args, timeout=300, **kw) -> subprocess.CompletedProcess:
        env = self.env(**kw.pop("env", {}))
        return subprocess.run(self.command(args, cwd=kw.get("cwd")), capture_output=True,
                              text=True, timeout=timeout, env=env, **kw)

    # --- start and stop ------------------------------------------------------------------
    def conf_lines(self) -> list[str]:
        """Where the controller and the nodes are, and each slurmd's files."""
        ctld_port, d_port = free_ports(2)
        d = self.root
        return [
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={d_port}",
            f"SlurmdSpoolDir={d}/spool",
            f"SlurmdPidFile={d}/slurmd.pid",
            f"SlurmdLogFile={d}/slurmd.log",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=8000 "
            "State=UNKNOWN",
        ]

    def slurmds(self) -> list[tuple[str, list[str]]]:
        """(node, its slurmd's command line) for each node."""
        return [(self.host, ["slurmd", "-D", "-f", self.conf, "-N", self.host])]

    def _write_conf(self) -> None:
        d = self.root
        lines = [
            "ClusterName=tests",
            # Job ids of their own: Slurm's PMIx plugin makes /tmp/spmix_appdir_UID_JOB.STEP,
            # which two clusters on one machine (the suite's workers, two suites side by side)
            # both numbering from 1 would share, and the second job fails to launch.
            f"FirstJobId={random.randrange(1000, 60_000_000)}",
            *self.conf_lines(),
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "KillWait=30",
            "JobAcctGatherType=jobacct_gather/none",
            "PreemptType=preempt/partition_prio",
            "PreemptMode=REQUEUE",
            "SwitchType=switch/none",
            f"StateSaveLocation={d}/state",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmctldLogFile={d}/slurmctld.log",
            # Two tasks of more than one CPU each still fit on a 2-CPU node.
            "PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:4 PriorityTier=1 PreemptMode=REQUEUE GraceTime=60",
            # A job here takes the node from the cpu partition's: preemption as a shared
            # cluster's, SIGTERM, GraceTime, then the preempted job requeued.
            "PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 "
            "PreemptMode=OFF",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _start(self, args, log_name) -> None:
        log = open(os.path.join(self.root, log_name), "w")
        self._procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env(), start_new_session=True))

    def start(self, timeout: float = 60) -> SlurmCluster:
        for sub in ("munge", "state", "spool"):
            os.makedirs(os.path.join(self.root, sub), mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o755)
        key = os.path.join(self.root, "munge", "munge.key")
        subprocess.run(["mungekey", "--create", "--force", f"--keyfile={key}"], check=True,
                       capture_output=True)
        self._start(["munged", "--foreground", "--force", f"--key-file={key}",
                     f"--socket={self.munge_socket}",
                     f"--pid-file={self.root}/munge/munged.pid",
                     f"--log-file={self.root}/munge/munged.log",
                     f"--seed-file={self.root}/munge/munged.seed"], "munged.out")
        self._wait(lambda: os.path.exists(self.munge_socket), timeout, "munged")
        self._write_conf()
        self._start(self.command(["slurmctld", "-D", "-i", "-f", self.conf]), "slurmctld.out")
        for node, args in self.slurmds():
            self._start(self.command(args, node), f"slurmd-{node}.out")
        self._wait(self._idle, timeout, "the nodes to be idle")
        return self

    def _idle(self) -> bool:
        proc = self.run(["sinfo", "--noheader", "-o", "%t"], timeout=30)
        return proc.returncode == 0 and set(proc.stdout.split()) == {"idle"}

    def _wait(self, ready, timeout, what) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(p.poll() is not None for p in self._procs):
                break
            if ready():
                return
            time.sleep(0.5)
        logs = ""
        for path in sorted(glob.glob(os.path.join(self.root, "*.out"))
                           + glob.glob(os.path.join(self.root, "**", "*.log"), recursive=True)):
            logs += f"\n--- {path}\n" + open(path).read()[-2000:]
        self.stop()
        raise RuntimeError(f"the test Slurm cluster did not come up (waiting for {what}):{logs}")

    def stop(self) -> None:
        # Jobs first, while slurmd can still end their steps: a failed test leaves its job
        # running, and slurmstepd, in a session of its own, outlives the daemons.
        if self._procs and all(p.poll() is None for p in self._procs):
            with contextlib.suppress(OSError, subprocess.SubprocessError):  # daemons go anyway
                self.run(["scancel", "--full", "--partition=cpu,urgent"], timeout=30)
                deadline = time.time() + 30
                while time.time() < deadline:
                    queue = self.run(["squeue", "--noheader", "-o", "%i"], timeout=30)
                    if queue.returncode or not queue.stdout.strip():
                        break
                    time.sleep(0.5)
        for p in reversed(self._procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self._procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self._procs.clear()

    # --- jobs ----------------------------------------------------------------------------
    def sbatch(self, args, env=None, cwd=None) -> str:
        """Submits a batch job; returns its id."""
        proc = self.run(["sbatch", "--parsable", *args], env=env or {}, cwd=cwd, timeout=60)
        if proc.returncode:
            raise RuntimeError(f"sbatch failed: {proc.stderr.strip()}")
        return proc.stdout.strip().split(";")[0]

    def _job_field(self, job: str, name: str, missing: str) -> str:
        proc = self.run(["scontrol", "show", "job", job], timeout=30)
        for field in proc.stdout.split():
            if field.startswith(f"{name}="):
                return field.split("=", 1)[1]
        return missing

    def job_state(self, job: str) -> str:
        return self._job_field(job, "JobState", "UNKNOWN")

    def job_exit_code(self, job: str) -> str:
        return self._job_field(job, "ExitCode", "?")

    def wait(self, job: str, timeout: float = 600) -> str:
        """Waits for a job to end; returns its final state (COMPLETED, FAILED, ...)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.job_state(job)
            if state not in UNFINISHED:
                return state
            time.sleep(1)
        self.run(["scancel", job], timeout=30)
        raise TimeoutError(f"job {job} still {self.job_state(job)} after {timeout} s")
