"""A one-host Slurm cluster for the `slurm` nox session: this machine as controller and as its only node.

    python tools/slurm_one_host.py up      # writes /etc/slurm/slurm.conf, starts munged, slurmctld, slurmd; waits
    python tools/slurm_one_host.py down    # stops the three daemons this script started
    python tools/slurm_one_host.py status  # sinfo

Needs root and Debian's `slurm-wlm` and `munge` (the nox session installs them with apt-get). The node is declared
with this machine's own CPUs and memory; its partition shares them among up to 4 jobs (`OverSubscribe=FORCE:4`,
slurm.conf(5)), since the embedded default's reference servers each take one CPU and the sweep runs them side by
side or in turn on a 2-core machine. No cgroups (`proctrack/linuxproc`, `task/none`): a container rarely lets a
daemon manage them, and the tests need only what Slurm's commands show (squeue, scontrol, scancel).

A slurm.conf that this script did not write is never overwritten: `up` stops with a message instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

CONF = Path("/etc/slurm/slurm.conf")
MARK = "# written by dflashbench tools/slurm_one_host.py"
PIDS = {"slurmctld": "/run/slurmctld.pid", "slurmd": "/run/slurmd.pid"}


def conf_text() -> str:
    host = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    return f"""{MARK}
ClusterName=dflashbench
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile={PIDS['slurmctld']}
SlurmdPidFile={PIDS['slurmd']}
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=5
MinJobAge=600
NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def up() -> int:
    if os.geteuid() != 0:
        print("tools/slurm_one_host.py up needs root (it writes /etc/slurm/slurm.conf and starts daemons)")
        return 2
    for prog in ("munged", "slurmctld", "slurmd", "sinfo"):
        if shutil.which(prog) is None and not Path(f"/usr/sbin/{prog}").exists():
            print(f"{prog} not installed: apt-get install -y slurm-wlm munge")
            return 2
    if CONF.exists() and MARK not in CONF.read_text():
        print(f"{CONF} exists and was not written by this script: left alone (use that cluster, or move it aside)")
        return 2
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text(conf_text())
    for folder in ("/var/spool/slurmctld", "/var/spool/slurmd", "/var/log/slurm", "/run/munge"):
        Path(folder).mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    if not Path("/etc/munge/munge.key").exists():  # Debian's package makes one; a bare image may not
        sh("/usr/sbin/mungekey", "--create")
        shutil.chown("/etc/munge/munge.key", "munge", "munge")
    if sh("munge", "-n", check=False).returncode != 0:
        sh("runuser", "-u", "munge", "--", "/usr/sbin/munged")
    for daemon in ("slurmctld", "slurmd"):
        if not _alive(daemon):
            sh(f"/usr/sbin/{daemon}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = sh("sinfo", "-h", "-o", "%t", check=False).stdout.strip()
        if state in ("idle", "mix", "alloc"):
            print(f"one-host Slurm up: {sh('sinfo', check=False).stdout.strip()}")
            return 0
        if state.startswith(("drain", "down")):
            sh("scontrol", "update", f"NodeName={socket.gethostname().split('.')[0]}", "State=RESUME", check=False)
        time.sleep(1)
    print("Slurm did not come up within 60 s: /var/log/slurm/slurmctld.log and slurmd.log say why")
    return 1


def _alive(daemon: str) -> bool:
    try:
        pid = int(Path(PIDS[daemon]).read_text().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def down() -> int:
    for daemon in ("slurmd", "slurmctld"):
        try:
            os.kill(int(Path(PIDS[daemon]).read_text().strip()), 15)
        except (OSError, ValueError):
            pass
    return 0


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "status"
    if command == "up":
        return up()
    if command == "down":
        return down()
    print(sh("sinfo", check=False).stdout or "no Slurm answering here")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
