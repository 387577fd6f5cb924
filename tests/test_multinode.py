"""Two nodes on one machine (tests/netns_cluster.py): each model trains as one job over two nodes
under srun (its sbatch file), ``mpirun -H`` and ``horovodrun -H`` (MPI and Gloo), with the losses
of one host's two processes; and the faults a cluster's network has, each ending within its
bound: a node cut off, a node killed, a rank killed on another node, a link that flaps, a slow
link, a results directory that is not shared. Each drill prints what it measured (``-s``); the
figures are in docs/reliability.md.

The first test runs in ``make test``; the drills, about 20-60 s each, in ``make test-slow``."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, TINY, run_cli
from netns_cluster import Machines, NetnsSlurm
from netns_cluster import missing as cluster_missing
from slurm_cluster import missing as slurm_missing

from common.runtime.dllogger import read_records, step_logs

_why = cluster_missing() or (f"Slurm is not installed ({', '.join(slurm_missing())} missing): "
                             "bash scripts/install_test_deps.sh" if slurm_missing() else None)
pytestmark = [
    pytest.mark.skipif(_why is not None, reason=f"no cluster of namespaces here: {_why}"),
    pytest.mark.one_stack("pip", "the launchers, Slurm and the network are the same under both "
                                 "stacks; Horovod's own behaviour is tested on both "
                                 "(tests/test_horovod.py)"),
]
RN50_TINY = [*TINY, "--batch_size", "4", "--iter_unit", "batch", "--mode", "train", "--seed", "1"]
TWO_NODES = ["--gpus-per-node=0", "--nodes=2", "--ntasks-per-node=1"]
HANG = 10  # --hang_timeout of the drills: its heartbeat is 1 s
END_GRACE = 10  # scripts/launch.sh's default


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two compute nodes and a head, two interfaces each, with sshd and Slurm: up in seconds,
    and nothing of it left after (namespaces, interfaces, daemons, step daemons)."""
    started = time.monotonic()
    machines = Machines(str(tmp_path_factory.mktemp("cluster")), nodes=2, interfaces=2).up()
    try:
        slurm = NetnsSlurm(machines).start()
    except BaseException:
        machines.down()
        raise
    print(f"\n[cluster] two nodes with sshd and Slurm up in {time.monotonic() - started:.1f} s")
    yield machines, slurm
    try:
        for node in machines.nodes:
            machines.link(node, up=True)
        slurm.stop()
    finally:
        machines.down()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert machines.prefix not in left


def _final(results):
    records = read_records(os.path.join(results, "log.json"))
    return [r["data"] for r in records if r.get("step") == []][-1], records


@pytest.fixture(scope="module")
def one_host(tmp_path_factory):
    """RN50_TINY's 4 steps by two processes on one host (mpirun -np 2, train.sh's default)."""
    results = str(tmp_path_factory.mktemp("one_host") / "r")
    proc = run_cli(["bash", os.path.join(ROOT, "resnet50v1.5", "scripts", "train.sh"), "fp32",
                    "2", "noxla", *RN50_TINY, "--num_iter", "4"],
                   env={"DATA_DIR": "", "RESULTS_DIR": results, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _final(results)[0]


def _sbatch(slurm, args, env, out, wait=True):
    job = slurm.sbatch([*TWO_NODES, "-o", out, os.path.join(ROOT, "resnet50v1.5", "scripts",
                                                            "slurm.sbatch"), "fp32", "noxla",
                        *args], env={"PYTHON": sys.executable, "DATA_DIR": "", **env}, cwd=ROOT)
    if not wait:
        return job
    state = slurm.wait(job, timeout=300)
    assert state == "COMPLETED", f"job {job} {state}:\n{open(out).read()[-4000:]}"
    return job


def test_one_job_over_two_nodes_trains_as_two_processes_on_one_host(cluster, one_host,
                                                                    tmp_path):
    """srun --mpi=pmix over two nodes, one task each: ranks 0 and 1, local rank 0 on each node,
    cross ranks 0 and 1; the sbatch file's job logs once (rank 0) and ends with the loss that two
    processes on one host reach."""
    machines, slurm = cluster
    proc = slurm.run(["srun", *TWO_NODES[1:], "--mpi=pmix", sys.executable, "-m",
                      "common.ranks"], cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(re.findall(r"rank (\d)/2 local (\d) cross (\d)/2 on (node\d)", proc.stdout)) == [
        ("0", "0", "0", "node1"), ("1", "0", "1", "node2")]
    results, out = str(tmp_path / "r"), str(tmp_path / "job.out")
    _sbatch(slurm, [*RN50_TINY, "--num_iter", "4"], {"RESULTS_DIR": results}, out)
    assert open(out).read().count("processes: 2, batch 4 per process, global batch 8") == 1
    summary, records = _final(results)
    assert summary["world_size"] == 2 and summary["final_step"] == 4
    assert summary["final_loss"] == one_host["final_loss"]


# --- the launchers across two nodes: `make test-slow` ---------------------------------------
def _launch(machines, results, launcher, args, env=None, node="node1"):
    """scripts/launch.sh on ``node`` over both nodes (HOSTS); returns the process, its output."""
    out = open(os.path.join(os.path.dirname(results), f"{launcher}.out"), "w")
    proc = machines.popen(node, ["bash", os.path.join(ROOT, "scripts", "launch.sh"),
                                 os.path.join(ROOT, "resnet50v1.5", "main.py"), "fp32", "1",
                                 "noxla", *args, "--results_dir", results],
                          cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                          env={**os.environ, "PYTHON": sys.executable, "LAUNCHER": launcher,
                               "HOSTS": "node1:1,node2:1", **(env or {})})
    return proc, out.name


@pytest.mark.slow
@pytest.mark.parametrize("launcher, controller", [("mpirun", None), ("horovodrun", None),
                                                  ("horovodrun", "gloo")])
def test_mpirun_and_horovodrun_across_two_nodes(cluster, one_host, tmp_path, launcher,
                                                controller):
    machines, _ = cluster
    results = str(tmp_path / "r")
    proc, out = _launch(machines, results, launcher, [*RN50_TINY, "--num_iter", "4"],
                        {"CONTROLLER": controller} if controller else None)
    assert proc.wait(timeout=300) == 0, open(out).read()[-4000:]
    summary, _ = _final(results)
    assert summary["world_size"] == 2 and summary["final_loss"] == one_host["final_loss"]


@pytest.mark.slow
def test_the_interface_between_nodes_carries_the_job(cluster, one_host, tmp_path):
    """NET_IFACE=eth1 on nodes with two interfaces: Open MPI's transports between the ranks use
    eth1; eth0 carries ssh alone."""
    machines, _ = cluster
    before = [machines.tx_bytes("node2", i) for i in (0, 1)]
    results = str(tmp_path / "r")
    proc, out = _launch(machines, results, "mpirun", [*RN50_TINY, "--num_iter", "4"],
                        {"NET_IFACE": "eth1"})
    assert proc.wait(timeout=300) == 0, open(out).read()[-4000:]
    sent = [machines.tx_bytes("node2", i) - before[i] for i in (0, 1)]
    print(f"\n[iface] node2 sent {sent[0]:,} bytes on eth0, {sent[1]:,} on eth1")
    assert sent[1] > 1_000_000 and sent[0] < 50_000, sent
    assert _final(results)[0]["final_loss"] == one_host["final_loss"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["ssd320", "transformerxl"])
def test_the_other_models_over_two_nodes(cluster, tmp_path, model, request):
    """SSD320 (DALI's shards, the two-rank evaluation) and Transformer-XL (the global batch over
    two tasks) as one job over two nodes, with one host's losses."""
    _, slurm = cluster
    data = request.getfixturevalue("shapes_records" if model == "ssd320" else "corpus")
    args = {"ssd320": ["--arch", "resnet_tiny", "--image_size", "64"],
            "transformerxl": [*TINY, "--batch_size", "4"]}[model]
    args = [*args, "--seed", "3", "--display_every", "1"]
    env = {"DATA_DIR": data, "NUM_ITER": "2", "BATCH_SIZE": "2"} if model == "ssd320" else \
        {"DATA_DIR": data, "NUM_ITER": "3"}
    nodes, one = str(tmp_path / "nodes"), str(tmp_path / "one")
    job = slurm.sbatch([*TWO_NODES, "-o", str(tmp_path / "job.out"),
                        os.path.join(ROOT, model, "scripts", "slurm.sbatch"), "fp32", "noxla",
                        *args], env={"PYTHON": sys.executable, "RESULTS_DIR": nodes, **env},
                       cwd=ROOT)
    state = slurm.wait(job, timeout=400)
    assert state == "COMPLETED", (tmp_path / "job.out").read_text()[-4000:]
    proc = run_cli(["bash", os.path.join(ROOT, model, "scripts", "train.sh"), "fp32", "2",
                    "noxla", *args], env={"PYTHON": sys.executable, "RESULTS_DIR": one, **env},
                   timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (a, _), (b, _) = _final(nodes), _final(one)
    assert a["world_size"] == b["world_size"] == 2
    assert a["final_loss"] == b["final_loss"]


# --- faults: `make test-slow` ----------------------------------------------------------------
LONG = [*RN50_TINY, "--num_iter", "100000", "--display_every", "1", "--save_checkpoint_steps",
        "5", "--hang_timeout", str(HANG)]


def _wait_for(path, text, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in open(path).read():
            return
        time.sleep(0.3)
    raise AssertionError(f"no {text!r} in {timeout} s:\n" + open(path).read()[-3000:])


def _batch_ended(slurm, job, node="node1", timeout=120) -> float:
    """Seconds until the job's batch shell has ended and ``node`` is free again."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        state = slurm.job_state(job)
        idle = slurm.run(["sinfo", "-h", "-n", node, "-o", "%t"]).stdout.strip()
        if state != "RUNNING" and idle == "idle":
            return time.monotonic() - started
        time.sleep(0.3)
    raise AssertionError(f"job {job} still {slurm.job_state(job)} after {timeout} s")


def _checkpoints(results):
    ckpts = os.listdir(os.path.join(results, "checkpoints"))
    assert not [c for c in ckpts if "tmp" in c], ckpts
    return sorted(int(c[5:-6]) for c in ckpts if c.startswith("ckpt-") and c.endswith(".index"))


def _one_error_line(text, pattern):
    lines = [ln for ln in text.splitlines() if "main.py: error" in ln]
    assert len(lines) == 1 and re.search(pattern, lines[0]), text[-3000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["srun", "mpirun", "horovodrun-gloo"])
def test_a_node_cut_off_ends_the_job_past_the_hang_timeout(cluster, tmp_path, launcher):
    """node2's link goes down for good while both ranks train: the ranks' watch names the
    stuck collective at --hang_timeout, and the launcher, which cannot reach node2, is ended by
    launch.sh END_GRACE seconds later (srun waited for Slurm's node timeout, mpirun and its
    remote daemon for TCP's); the healthy node is free, the last checkpoint whole."""
    machines, slurm = cluster
    bound = HANG + 3 + END_GRACE + 6
    job, out, results = _start(cluster, tmp_path, launcher, LONG)
    _wait_for(out, "step 12/")
    machines.link("node2", up=False)
    try:
        took = _ended(cluster, launcher, job)
    finally:
        machines.link("node2", up=True)
    text = open(out).read()
    print(f"\n[cut off] {launcher}: the job ended {took:.1f} s after the cut (bound {bound} s)")
    assert took < bound, text[-3000:]
    _one_error_line(text, r"\(rank 0\): no training step finished on rank 0 for \d+ s "
                          r"\(--hang_timeout 10\): every rank answers but none finishes a step")
    if launcher == "horovodrun-gloo":  # it ends the job at rank 0's exit, with a traceback
        assert "RuntimeError: Horovod detected that one or more processes exited" in text
        assert "<stderr>:Traceback" not in text  # none of the ranks'
    else:
        assert "launch.sh: rank 0 ended the job (its line above), but" in text, text[-3000:]
        assert "Traceback" not in text
    assert _checkpoints(results)
    # Under srun the job's record stays COMPLETING on node2 until Slurm resends its
    # termination there (about 100 s after the link is back) or declares node2 down: the next
    # job that needs node2 waits for that.


def _start(cluster, tmp_path, launcher, args):
    """A long run over both nodes under ``launcher`` (srun: the sbatch file; mpirun,
    horovodrun-gloo: launch.sh from node1): (job id or process, its output, results)."""
    machines, slurm = cluster
    results = str(tmp_path / "r")
    if launcher == "srun":
        out = str(tmp_path / "job.out")
        return _sbatch(slurm, args, {"RESULTS_DIR": results}, out, wait=False), out, results
    name, _, controller = launcher.partition("-")
    proc, out = _launch(machines, results, name, args,
                        {"CONTROLLER": controller} if controller else None)
    return proc, out, results


def _ended(cluster, launcher, job, timeout=120) -> float:
    """Seconds until the job has ended: srun's batch shell and node1 free; launch.sh's exit."""
    if launcher == "srun":
        return _batch_ended(cluster[1], job, timeout=timeout)
    started = time.monotonic()
    assert job.wait(timeout=timeout) != 0
    return time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["srun", "mpirun", "horovodrun-gloo"])
def test_a_rank_killed_on_another_node_ends_the_job_in_seconds(cluster, tmp_path, launcher):
    """Rank 1 on node2 killed. Under srun, --kill-on-bad-exit sends SIGTERM to the surviving
    rank, which waits in its allreduce for the dead one and cannot reach the step where a stop
    is taken: it ends itself once no step follows the signal (the job used to end at KillWait's
    SIGKILL, 31 s). mpirun and horovodrun hear of the death from node2 and end the job."""
    job, out, results = _start(cluster, tmp_path, launcher, LONG)
    _wait_for(out, "step 12/")
    victim = json.load(open(os.path.join(results, ".heartbeat", "rank-1.json")))
    assert victim["host"] == "node2"
    os.kill(victim["pid"], signal.SIGKILL)  # one machine: its pids are this one's
    took = _ended(cluster, launcher, job)
    text = open(out).read()
    print(f"\n[rank killed] {launcher}: the job ended {took:.1f} s after the kill (bound 15 s)")
    assert took < 15, text[-3000:]
    if launcher == "srun":
        assert cluster[1].wait(job, timeout=60) == "FAILED" and "node2: task 1: Killed" in text
    assert "<stderr>:Traceback" not in text and "main.py\", line" not in text
    assert _checkpoints(results)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["mpirun", "horovodrun-gloo"])
def test_a_killed_node_ends_a_job_launched_by_ssh_past_the_hang_timeout(cluster, tmp_path,
                                                                        launcher):
    """node2 loses power (link dark, its sshd, orted and rank killed): rank 0 names rank 1 as
    silent at --hang_timeout, and the launcher, whose ssh and daemon on node2 are gone without a
    word, ends END_GRACE seconds later at most. (Under srun Slurm requeues the job: the test
    after the next.)"""
    machines, slurm = cluster
    job, out, results = _start(cluster, tmp_path, launcher, LONG)
    _wait_for(out, "step 12/")
    machines.kill_node("node2")
    try:
        took = _ended(cluster, launcher, job)
    finally:
        machines.boot("node2")
        slurm.restart_slurmd("node2")
    text = open(out).read()
    bound = HANG + 3 + END_GRACE + 6
    print(f"\n[node killed] {launcher}: the job ended {took:.1f} s after the kill "
          f"(bound {bound} s)")
    assert took < bound, text[-3000:]
    _one_error_line(text, r"\(rank 0\): no training step finished on rank 0 for \d+ s "
                          r"\(--hang_timeout 10\): rank 1 \(node2, pid \d+\) stopped answering")
    assert _checkpoints(results)
    deadline = time.monotonic() + 60  # node2 back in Slurm for the tests after this one
    while not slurm._idle() and time.monotonic() < deadline:
        time.sleep(0.5)


@pytest.mark.slow
def test_mpiruns_own_exit_status_is_named_not_read_as_a_signal(cluster, tmp_path):
    """node2's Open MPI daemon killed: mpirun ends the job and exits 205, its own status for a
    lost daemon, which launch.sh read as "killed (signal 77)"."""
    machines, _ = cluster
    job, out, results = _start(cluster, tmp_path, "mpirun", LONG)
    _wait_for(out, "step 12/")
    orted = [p for p in machines.pids("node2") if "orted" in open(f"/proc/{p}/cmdline").read()]
    assert orted  # the daemon, and the shell sshd started it in
    for pid in orted:
        os.kill(pid, signal.SIGKILL)
    assert job.wait(timeout=120) == 205
    text = open(out).read()
    assert "launch.sh: mpirun exited 205: it lost the daemon (orted) of a node it started ranks " \
           "on" in text and "signal 77" not in text, text[-3000:]
    assert _checkpoints(results)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["flap", "slow"])
def test_a_flapping_or_slow_link_is_survived(cluster, one_host, tmp_path, fault):
    """node2's link down for 5 s, twice (under --hang_timeout), or limited to 4 Mbit/s: the job
    completes with the loss of an undisturbed run. (This kernel has no netem: a lossy or delayed
    link is not made here.)"""
    machines, slurm = cluster
    results, out = str(tmp_path / "r"), str(tmp_path / "job.out")
    args = [*RN50_TINY, "--num_iter", "30", "--display_every", "1", "--hang_timeout", "60"]
    if fault == "slow":
        machines.slow("node2", "4mbit")
    try:
        started = time.monotonic()
        job = _sbatch(slurm, args, {"RESULTS_DIR": results}, out, wait=False)
        if fault == "flap":
            for at in ("step 5/", "step 15/"):
                _wait_for(out, at)
                machines.link("node2", up=False)
                time.sleep(5)
                machines.link("node2", up=True)
        assert slurm.wait(job, timeout=400) == "COMPLETED", open(out).read()[-3000:]
    finally:
        machines.slow("node2", None)
    print(f"\n[{fault}] srun: 30 steps in {time.monotonic() - started:.1f} s")
    undisturbed = results + "-undisturbed"
    _sbatch(slurm, args, {"RESULTS_DIR": undisturbed}, out + "-undisturbed")
    assert _final(results)[0]["final_loss"] == _final(undisturbed)[0]["final_loss"]


@pytest.mark.slow
def test_a_results_directory_not_shared_by_every_node_is_refused_at_start(cluster, tmp_path):
    """node2 sees another file system at the results directory (a tmpfs over it in its mount
    namespace, as a node-local disk): refused before training, one line naming rank 1 and
    node2, instead of training until a hang or a requeue that starts over."""
    machines, slurm = cluster
    results = tmp_path / "r"
    results.mkdir()
    machines.run("node2", ["mount", "-t", "tmpfs", "tmpfs", str(results)], check=True)
    try:
        out = str(tmp_path / "job.out")
        job = _sbatch(slurm, [*RN50_TINY, "--num_iter", "4"], {"RESULTS_DIR": str(results)},
                      out, wait=False)
        assert slurm.wait(job, timeout=180) == "FAILED"
    finally:
        machines.run("node2", ["umount", str(results)], check=True)
    text = open(out).read()
    errors = [ln for ln in text.splitlines() if "main.py: error" in ln]
    assert sorted(errors) == sorted([
        f"main.py: error: --results_dir {results} is not shared by every node: rank(s) 1 "
        "(node2) cannot see the file rank 0 (node1) wrote there; checkpoints, the log and the "
        "--hang_timeout heartbeats are read across nodes: give a directory on a file system "
        "every node mounts",
        f"main.py: error: --results_dir {results} is not shared by every node (see rank 0's "
        "line)"]), text[-3000:]
    assert "step 1/" not in text


@pytest.fixture
def quick_slurm(tmp_path_factory):
    """A cluster of its own whose Slurm declares a silent node down after 10 s (the module's
    waits 120 s, for busy cores): Slurm's own NODE_FAIL requeue, in a test's time. (A short
    folder: slurmd's sockets in it must stay under 108 characters.)"""
    machines = Machines(str(tmp_path_factory.mktemp("q")), nodes=2).up()
    try:
        slurm = NetnsSlurm(machines, slurmd_timeout=10).start()
    except BaseException:
        machines.down()
        raise
    yield machines, slurm
    try:
        machines.link("node2", up=True)
        slurm.stop()
    finally:
        machines.down()


@pytest.mark.slow
def test_a_killed_node_requeues_the_job_which_resumes_once_with_each_step_logged_once(
        quick_slurm, tmp_path):
    """node2 loses power (its link dark, everything on it killed): Slurm declares it down and
    requeues the job (NODE_FAIL, the sbatch files' --requeue); the node boots again (slurmd
    with its spool as it was, holding the killed step's PMIx socket) and the requeued job runs
    on both nodes again, resumes from its last checkpoint past the heartbeats the killed job
    left (its "ending" mark included), and logs each step once."""
    machines, slurm = quick_slurm
    results, out = str(tmp_path / "r"), str(tmp_path / "job.out")
    job = _sbatch(slurm, [*RN50_TINY, "--num_iter", "40", "--display_every", "1",
                          "--save_checkpoint_steps", "5"], {"RESULTS_DIR": results}, out,
                  wait=False)
    _wait_for(out, "step 13/")
    machines.kill_node("node2")
    killed = time.monotonic()
    deadline = killed + 120
    while time.monotonic() < deadline and not (slurm.job_state(job) == "PENDING" and
                                               slurm._job_field(job, "Restarts", "0") == "1"):
        time.sleep(0.5)
    requeued = time.monotonic() - killed
    assert slurm._job_field(job, "Restarts", "0") == "1", open(out).read()[-3000:]
    leftovers = [f for f in os.listdir(os.path.join(slurm.root, "node2", "spool"))
                 if f.startswith("stepd.slurm.pmix")]
    assert leftovers, "no PMIx socket left to start past"
    assert os.listdir(os.path.join(results, ".heartbeat"))  # the killed job's records
    machines.link("node2", up=True)
    slurm.restart_slurmd("node2")
    time.sleep(3)  # a start in the second of the requeue is refused ("credential revoked")
    slurm.run(["scontrol", "update", f"JobId={job}", "StartTime=now"])
    state = slurm.wait(job, timeout=300)
    text = open(out).read()
    print(f"\n[node killed] srun: requeued by Slurm {requeued:.1f} s after the kill")
    assert state == "COMPLETED", text[-4000:]
    resumed = int(re.search(r"restored \S+/ckpt-(\d+) at step", text).group(1))
    assert 10 <= resumed < 40 and "slurm_job.sh: job" in text and ", start 2," in text
    records = read_records(os.path.join(results, "log.json"))
    steps = [r["step"][1] for r in step_logs(records) if "total_loss" in r["data"]]
    assert steps == sorted(set(steps)) and steps[-1] == 40  # none twice
    redone = read_records(os.path.join(results, "log.json.redone"))
    assert redone and all(r["step"][1] > resumed for r in redone)
    assert f"logged after the checkpoint this run resumes from (step {resumed})" in text
    assert _final(results)[0]["jobs"] == 2
