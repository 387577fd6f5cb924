"""The launchers' command lines (DRY_RUN=1 prints them): one machine, several through mpirun
-H, and a SLURM allocation through srun in a pyxis/enroot container. Only the command lines can
be checked without GPUs and a cluster; each is what NVIDIA's recipes and Horovod's docs use."""
import os
import shlex
import subprocess

import pytest
from conftest import ROOT

pytestmark = pytest.mark.one_stack(
    "pip", "the launchers are bash, the same for both stacks")

CONTAINER_ROOT = "/workspace/tf-model-scripts"


def dry(script, *args, **env):
    """(exit code, the printed command as a list, stderr) of a launcher under DRY_RUN=1."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "HOSTS", "LAUNCHER", "CONTAINER", "MOUNTS", "PYTHON",
                                 "SRUN_"))}
    full.update(DRY_RUN="1", **env)
    full = {k: v for k, v in full.items() if v is not None}  # None: unset
    proc = subprocess.run(["bash", os.path.join(ROOT, script), *args], capture_output=True,
                          text=True, env=full, cwd=ROOT, timeout=60)
    return proc.returncode, shlex.split(proc.stdout), proc.stderr.strip()


def flag(cmd, name):
    return cmd[cmd.index(name) + 1]


def test_one_machine_is_mpirun_with_one_process_per_gpu():
    code, cmd, _ = dry("resnet50v1.5/scripts/RN50_AMP_8GPU.sh", DATA_DIR="/d")
    assert code == 0
    # mpirun binds nothing: bind.sh puts each rank on its GPU's NUMA node.
    assert cmd[:9] == ["mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "8",
                       "bash", os.path.join(ROOT, "scripts", "bind.sh"), "python"]
    assert cmd[9] == os.path.join(ROOT, "resnet50v1.5", "main.py") and cmd[10] == "--amp"
    code, cmd, _ = dry("resnet50v1.5/scripts/RN50_TF32_1GPU.sh", DATA_DIR="/d")
    assert cmd[0] == "python" and "--tf32" in cmd  # one GPU: no launcher


def test_several_machines_through_mpirun_hosts():
    code, cmd, _ = dry("ssd320/scripts/train.sh", "fp32", "8", "xla", HOSTS="n1:8,n2:8",
                       TF_ENABLE_AUTO_MIXED_PRECISION="0", NCCL_IB_HCA="mlx5",
                       LD_LIBRARY_PATH="/opt/lib")
    assert code == 0
    assert flag(cmd, "-np") == "16" and flag(cmd, "-H") == "n1:8,n2:8"
    forwarded = {cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"}
    assert {"PATH", "LD_LIBRARY_PATH", "TF_ENABLE_AUTO_MIXED_PRECISION", "NCCL_IB_HCA",
            "LAUNCH_ID"} <= forwarded
    # The launcher passes flags only: the recipe's steps are main.py's (test_recipes.py).
    assert "--num_iter" not in cmd and {"--no_tf32", "--xla"} <= set(cmd)
    # An unset variable is not forwarded (mpirun warned at every run).
    code, cmd, err = dry("ssd320/scripts/train.sh", "fp32", "8", HOSTS="n1:8,n2:8",
                         LD_LIBRARY_PATH=None)
    assert code == 0 and "LD_LIBRARY_PATH" not in cmd, err
    code, cmd, _ = dry("ssd320/scripts/train.sh", "fp32", "8", HOSTS="n1:8,n2:8",
                       LAUNCHER="horovodrun")
    assert cmd[:5] == ["horovodrun", "-np", "16", "-H", "n1:8,n2:8"]


def test_the_interface_between_nodes_and_horovodruns_controller():
    """NET_IFACE: the interface NCCL, Gloo and Open MPI's TCP transports use where nodes have
    several (tests/test_multinode.py shows the traffic on it); CONTROLLER: horovodrun's."""
    code, cmd, err = dry("scripts/launch.sh", "x/main.py", "amp", "8", HOSTS="n1:8,n2:8",
                         NET_IFACE="eth1")
    assert code == 0, err
    forwarded = {cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"}
    assert {"NCCL_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "OMPI_MCA_btl_tcp_if_include",
            "OMPI_MCA_oob_tcp_if_include"} <= forwarded
    code, cmd, err = dry("scripts/launch.sh", "x/main.py", "amp", "8", HOSTS="n1:8,n2:8",
                         LAUNCHER="horovodrun", CONTROLLER="gloo", NET_IFACE="eth1")
    assert code == 0, err
    assert cmd[:7] == ["horovodrun", "-np", "16", "-H", "n1:8,n2:8", "--gloo",
                       "--network-interface"] and cmd[7] == "eth1"
    code, _, err = dry("scripts/launch.sh", "x/main.py", "amp", "8", CONTROLLER="gloo")
    assert code == 2 and err == (
        "launch.sh: error: CONTROLLER=gloo is horovodrun's choice (LAUNCHER=horovodrun); mpirun "
        "and srun start Horovod with MPI")
    code, _, err = dry("scripts/launch.sh", "x/main.py", "amp", "8", NET_IFACE="eth1;rm")
    assert code == 2 and err == ("launch.sh: error: NET_IFACE names network interfaces (eth1, "
                                 "or eth1,eth2), not 'eth1;rm'")


@pytest.mark.parametrize("model", ["resnet50v1.5", "ssd320", "transformerxl"])
def test_slurm_runs_one_task_per_gpu_in_the_container(model):
    code, cmd, err = dry(f"{model}/scripts/slurm.sbatch", "tf32", "noxla", "--seed", "7",
                         SLURM_JOB_ID="42", SLURM_JOB_NUM_NODES="4",
                         SLURM_NTASKS_PER_NODE="8", CONTAINER="nvcr.io#me/scripts:1",
                         DATA_DIR="/lustre/data", MOUNTS="/ckpt:/ckpt")
    assert code == 0, err
    assert cmd[:3] == ["srun", "--mpi=pmix", "--ntasks-per-node=8"]
    assert "--container-image=nvcr.io#me/scripts:1" in cmd
    assert f"--container-workdir={CONTAINER_ROOT}" in cmd
    results = os.path.join(ROOT, "results", f"{model}-42")
    assert (f"--container-mounts=/ckpt:/ckpt,/lustre/data:/lustre/data,{results}:{results}"
            in cmd)
    main = cmd.index("python") + 1
    assert cmd[main] == f"{CONTAINER_ROOT}/{model}/main.py"  # the image's code
    assert cmd[main - 2] == f"{CONTAINER_ROOT}/scripts/bind.sh"
    assert flag(cmd, "--data_dir") == "/lustre/data" and flag(cmd, "--results_dir") == results
    assert cmd[-2:] == ["--seed", "7"] and "--tf32" in cmd
    # The recipe's sizes are main.py's, for the world it finds (tests/test_recipes.py).
    assert not {"--batch_size", "--batch_chunk", "--num_iter"} & set(cmd)


@pytest.mark.parametrize("image", ["nvcr.io#me/tf-model-scripts:25.02",
                                   "me@registry.example.com#team/img", "ubuntu:24.04",
                                   "library/ubuntu", "/shared/images/tf.sqsh", "./tf.sqsh"])
def test_pyxis_image_forms_are_passed_on(image):
    code, cmd, err = dry("ssd320/scripts/slurm.sbatch", SLURM_JOB_ID="1", CONTAINER=image)
    assert code == 0, err
    assert f"--container-image={image}" in cmd


def test_slurm_without_a_container_runs_this_checkout():
    code, cmd, _ = dry("ssd320/scripts/slurm.sbatch", SLURM_JOB_ID="1", SLURM_JOB_NUM_NODES="1",
                       SLURM_NTASKS_PER_NODE="4")
    assert code == 0 and cmd[:3] == ["srun", "--mpi=pmix", "--ntasks-per-node=4"]
    assert not [c for c in cmd if c.startswith("--container")]
    assert cmd[cmd.index("python") + 1] == os.path.join(ROOT, "ssd320", "main.py")
    assert "--amp" in cmd  # the default precision


@pytest.mark.parametrize("script,args,env,message", [
    ("ssd320/scripts/train.sh", ["amp", "8"], {"HOSTS": "n1:8,n2"},
     "launch.sh: error: HOSTS entries are host:slots, not 'n2'"),
    ("scripts/launch.sh", ["x/main.py", "amp", "2"], {"LAUNCHER": "pdsh"},
     "launch.sh: error: LAUNCHER must be mpirun, horovodrun or srun, not pdsh"),
    ("scripts/launch.sh", ["x/main.py", "bf16", "2"], {},
     "launch.sh: error: precision must be amp, tf32 or fp32, not bf16"),
    ("scripts/launch.sh", ["x/main.py", "amp", "0"], {},
     "launch.sh: error: GPUS must be a positive number, not 0"),
    ("scripts/launch.sh", ["/elsewhere/main.py", "amp", "8"],
     {"LAUNCHER": "srun", "CONTAINER": "img"},
     "launch.sh: error: MAIN_PY must be inside this repository"),
    ("ssd320/scripts/slurm.sbatch", [], {"REPO": "/tmp"},
     "slurm.sbatch: error: /tmp is not this repository: submit from its root or set REPO"),
    # Values the scripts used to do arithmetic on, and a path pyxis cannot mount.
    ("ssd320/scripts/train.sh", ["amp", "abc"], {}, "launch.sh: error: GPUS must be a positive "
     "number, not abc"),
    ("ssd320/scripts/slurm.sbatch", [], {"SLURM_JOB_ID": "1", "SLURM_NTASKS_PER_NODE": "0"},
     "launch.sh: error: GPUS must be a positive number, not 0"),
    ("ssd320/scripts/slurm.sbatch", [], {"SLURM_JOB_ID": "1", "SLURM_NTASKS_PER_NODE": "x"},
     "launch.sh: error: GPUS must be a positive number, not x"),
    ("resnet50v1.5/scripts/slurm.sbatch", [], {"SLURM_JOB_ID": "1", "CONTAINER": "img",
                                               "DATA_DIR": "/data/a,b"},
     "launch.sh: error: DATA_DIR=/data/a,b holds a comma or a colon, which pyxis's "
     "--container-mounts cannot take"),
    ("transformerxl/scripts/slurm.sbatch", [], {"SLURM_JOB_ID": "1", "SLURM_CPUS_ON_NODE": "x"},
     "launch.sh: error: SLURM_CPUS_ON_NODE is not a number: x"),
    # pyxis reads "registry.example.com/team/img" as a Docker Hub path: '#' separates a registry.
    ("ssd320/scripts/slurm.sbatch", [], {"SLURM_JOB_ID": "1",
                                         "CONTAINER": "registry.example.com/team/img:25.02"},
     "launch.sh: error: CONTAINER=registry.example.com/team/img:25.02: pyxis reads images as "
     "[USER@][REGISTRY#]IMAGE[:TAG], so this is looked up on Docker Hub; write "
     "CONTAINER=registry.example.com#team/img:25.02"),
    ("ssd320/scripts/slurm.sbatch", [], {"SLURM_JOB_ID": "1", "CONTAINER": "me@localhost:5000/i"},
     "launch.sh: error: CONTAINER=me@localhost:5000/i: pyxis reads images as "
     "[USER@][REGISTRY#]IMAGE[:TAG], so this is looked up on Docker Hub; write "
     "CONTAINER=me@localhost:5000#i"),
    # The stock image holds neither the code nor Keras 3.15: refused before srun, by any name.
    *[("resnet50v1.5/scripts/slurm.sbatch", [], {"SLURM_JOB_ID": "1", "CONTAINER": image},
       f"launch.sh: error: CONTAINER={image} is NVIDIA's stock TensorFlow image, which holds "
       "neither this code nor Keras 3.15: build this repository's image on it")
      for image in ("nvcr.io#nvidia/tensorflow:25.02-tf2-py3",
                    "/shared/images/nvidia+tensorflow+25.02-tf2-py3.sqsh")],
])
def test_launcher_errors_are_one_line(script, args, env, message):
    code, _, err = dry(script, *args, **env)
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith(message), err


def test_srun_outside_an_allocation_is_refused():
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts/launch.sh"), "m.py", "amp", "8"],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "LAUNCHER": "srun"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("launch.sh: error: LAUNCHER=srun runs inside a SLURM "
                                   "allocation (sbatch or salloc)")


def test_srun_gives_each_task_its_share_of_the_node_and_the_chosen_mpi_plugin():
    """srun does not pass sbatch's CPUs per task on: each task asks for its share itself."""
    code, cmd, _ = dry("resnet50v1.5/scripts/slurm.sbatch", SLURM_JOB_ID="1",
                       SLURM_JOB_NUM_NODES="2", SLURM_NTASKS_PER_NODE="8",
                       SLURM_CPUS_ON_NODE="128", SRUN_MPI="pmi2")
    assert code == 0
    assert cmd[:6] == ["srun", "--mpi=pmi2", "--ntasks-per-node=8", "--kill-on-bad-exit=1",
                       "--cpus-per-task=16", "--cpu-bind=none"]
    assert cmd[6:8] == ["bash", os.path.join(ROOT, "scripts", "bind.sh")]


def _fake_gpu_machine(tmp_path, numa_nodes):
    """A PATH with an nvidia-smi that lists len(numa_nodes) GPUs, and a sysfs with their NUMA
    nodes (what NVIDIA's bind.sh reads on a DGX)."""
    bin_dir, sysfs = tmp_path / "bin", tmp_path / "sys"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    buses = [f"00000000:{0x07 + 0x10 * i:02X}:00.0" for i in range(len(numa_nodes))]
    smi.write_text("#!/usr/bin/env bash\n"
                   "i=''; for a in \"$@\"; do [ \"$prev\" = -i ] && i=$a; prev=$a; done\n"
                   f'case "$*" in *index*) seq 0 {len(buses) - 1} ;; '
                   f'*pci.bus_id*) b=({" ".join(buses)}); echo "${{b[$i]}}" ;; esac\n')
    smi.chmod(0o755)
    numactl = bin_dir / "numactl"
    numactl.write_text("#!/bin/sh\n")
    numactl.chmod(0o755)
    for bus, node in zip(buses, numa_nodes):
        d = sysfs / "bus" / "pci" / "devices" / bus[4:].lower()
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{node}\n")
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "BIND_SYSFS": str(sysfs)}


@pytest.mark.parametrize("env, node", [
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "5"}, "1"),  # mpirun: GPU 5 of 8, socket 1
    ({"SLURM_LOCALID": "2"}, "0"),  # srun
    ({"SLURM_LOCALID": "3", "CUDA_VISIBLE_DEVICES": "6"}, "1"),  # srun --gpus-per-task=1
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "9"}, "0"),  # more ranks than GPUs: GPU 1, as main.py pins
])
def test_bind_puts_each_rank_on_its_gpus_numa_node(tmp_path, env, node):
    fake = _fake_gpu_machine(tmp_path, [0, 0, 0, 0, 1, 1, 1, 1])
    code, cmd, err = dry("scripts/bind.sh", "python", "main.py", **fake, **env)
    assert code == 0, err
    assert cmd == ["numactl", f"--cpunodebind={node}", f"--membind={node}", "python", "main.py"]


def test_bind_runs_unbound_where_there_is_nothing_to_follow(tmp_path):
    code, cmd, err = dry("scripts/bind.sh", "python", "main.py",
                         PATH="/usr/bin:/bin", SLURM_LOCALID="1")  # no nvidia-smi: a CPU node
    assert code == 0 and cmd == ["python", "main.py"] and err == ""
    fake = _fake_gpu_machine(tmp_path, [-1, -1])  # a machine whose GPUs have no NUMA node
    code, cmd, err = dry("scripts/bind.sh", "python", "main.py", **fake, SLURM_LOCALID="1")
    assert code == 0 and cmd == ["python", "main.py"]
    assert err.startswith("bind.sh: GPU 1 (00000000:17:00.0) has no NUMA node in ")
    code, cmd, _ = dry("scripts/bind.sh", "python", "main.py", **fake, BIND="none")
    assert cmd == ["python", "main.py"]


@pytest.mark.parametrize("precision", ["fp32", "tf32", "amp"])
def test_launch_sh_keeps_the_precisions_of_common_precisions(precision):
    """launch.sh runs where Python may not (a pyxis job's batch host), so it keeps its own copy
    of the table: the same flags."""
    from common.tools import named_precisions as precisions
    code, cmd, _ = dry("scripts/launch.sh", "m/main.py", precision, "1")
    assert code == 0 and cmd[2:] == precisions.precision_flags(precision)


@pytest.mark.parametrize("env, message", [
    ({"BATCH_SIZE": "0"}, "main.py: error: flag --batch_size=0: "),
    ({"BATCH_CHUNK": "0"}, "main.py: error: flag --batch_chunk=0: "),
])
def test_sizes_the_launchers_pass_on_are_checked_by_main_py_with_one_line(env, message):
    """train.sh does no arithmetic: a size of 0 reaches main.py, which refuses it at once."""
    import sys
    model = "ssd320" if "BATCH_SIZE" in env else "transformerxl"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LAUNCHER"))}
    proc = subprocess.run(["bash", os.path.join(ROOT, model, "scripts", "train.sh"), "fp32", "1"],
                          capture_output=True, text=True, timeout=120,
                          env={**full, "DATA_DIR": "", "PYTHON": sys.executable, **env})
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(message)
