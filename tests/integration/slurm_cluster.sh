#!/usr/bin/env bash
# A single-node Slurm cluster in a private directory, for the deploy/slurm test.
#
#   slurm_cluster.sh start DIR   # munged, slurmctld, slurmd; prints SLURM_CONF=DIR/slurm.conf
#   slurm_cluster.sh stop DIR
#
# The node advertises two GPUs as a count-only gres (no device files), so the sbatch script's
# --gres=gpu:1 is honoured as on a GPU cluster. Ports are picked free. Needs root (slurmd starts
# jobs as their user) and Debian's slurm-wlm and munge.
set -euo pipefail
cmd="${1:?start|stop}"
dir="$(realpath -m "${2:?directory}")"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop() {
  # Jobs first: their slurmstepd and processes would outlive slurmd.
  if [ -f "$dir/slurmctld.pid" ]; then
    SLURM_CONF="$dir/slurm.conf" scancel --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 25); do
      [ -z "$(SLURM_CONF="$dir/slurm.conf" squeue -h 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  # Whatever is left of a job: the sessions (slurmstepd and the job's processes share one) of the
  # processes whose environment names this cluster's slurm.conf.
  for env in /proc/[0-9]*/environ; do
    if { tr '\0' '\n' < "$env"; } 2>/dev/null | grep -qx "SLURM_CONF=$dir/slurm.conf"; then
      pid="${env#/proc/}"; pid="${pid%/environ}"
      sid="$(ps -o sid= -p "$pid" 2>/dev/null | tr -d ' ' || true)"
      [ -n "$sid" ] && [ "$sid" != "$(ps -o sid= -p $$ | tr -d ' ')" ] && pkill -KILL -s "$sid" 2>/dev/null || true
    fi
  done
  # The daemons remove their pid files as they shut down: read them all first.
  pids=()
  for p in slurmd slurmctld munged; do
    if [ -f "$dir/$p.pid" ]; then pids+=("$(cat "$dir/$p.pid")"); fi
  done
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    sleep 0.5
    kill -9 "${pids[@]}" 2>/dev/null || true
  fi
  rm -f "$dir"/*.pid
}

if [ "$cmd" = stop ]; then stop; exit 0; fi

mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/dev"
touch "$dir/dev/nvidia0" "$dir/dev/nvidia1"  # stand-ins for the GPU device files
chmod 755 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" \
  --force

host="$(hostname)"
cat > "$dir/slurm.conf" <<CONF
ClusterName=cartlab-test
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=60
MpiDefault=none
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) Gres=gpu:2 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
cat > "$dir/gres.conf" <<CONF
Name=gpu File=$dir/dev/nvidia[0-1]
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N localhost
for _ in $(seq 100); do
  if sinfo -h -o '%T' 2>/dev/null | grep idle >/dev/null; then echo "SLURM_CONF=$SLURM_CONF"; exit 0; fi
  sleep 0.1
done
echo "slurm_cluster: the node did not come up; see $dir/*.log" >&2
sinfo >&2 || true
stop
exit 1
