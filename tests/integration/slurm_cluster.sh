#!/usr/bin/env bash
# A Slurm cluster in a private directory, for the deploy/slurm tests: munged, slurmctld and one
# slurmd per node, with free ports.
#
#   slurm_cluster.sh start DIR
#       one node, "localhost", on this host's loopback address
#   slurm_cluster.sh start DIR --controller ADDR --node NAME=NETNS@ADDR [--node ...]
#       one node per --node: its slurmd runs inside network namespace NETNS (made beforehand, with
#       ADDR on its side of a link to this host) and a UTS namespace whose host name is NAME, so
#       the jobs it starts see that host name and address. slurmctld runs here and the nodes
#       reach it at ADDR (an address of this host that the namespaces route to).
#   slurm_cluster.sh cut DIR NAME    # stops node NAME's slurmd (its jobs' processes stay)
#   slurm_cluster.sh stop DIR
#
# Prints SLURM_CONF=DIR/slurm.conf once every node is idle. Each node advertises GPUs as a
# count-only gres (no device files), two on the single node and one per node otherwise, so the
# sbatch script's --gres=gpu:1 is honoured as on a GPU cluster and spreads an array over the nodes.
# Needs root (slurmd starts jobs as their user) and Debian's slurm-wlm and munge.
set -euo pipefail
cmd="${1:?start|cut|stop}"
dir="$(realpath -m "${2:?directory}")"
shift 2

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
  for f in "$dir"/slurmd*.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
    if [ -f "$f" ]; then pids+=("$(cat "$f")"); fi
  done
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    sleep 0.5
    kill -9 "${pids[@]}" 2>/dev/null || true
  fi
  rm -f "$dir"/*.pid
}

case "$cmd" in
  stop) stop; exit 0 ;;
  cut)
    node="${1:?node name}"
    pidfile="$dir/slurmd-$node.pid"
    [ -f "$pidfile" ] || { echo "slurm_cluster: no slurmd pid file for node '$node' in $dir" >&2; exit 1; }
    kill -9 "$(cat "$pidfile")"
    rm -f "$pidfile"
    exit 0 ;;
  start) ;;
  *) echo "slurm_cluster: unknown command '$cmd' (start, cut, stop)" >&2; exit 2 ;;
esac

controller=""
nodes=()  # NAME=NETNS@ADDR
while [ $# -gt 0 ]; do
  case "$1" in
    --controller) controller="${2:?--controller ADDR}"; shift 2 ;;
    --node)
      [[ "${2:-}" =~ ^[a-z][a-z0-9-]*=[^@]+@[0-9.]+$ ]] || {
        echo "slurm_cluster: --node wants NAME=NETNS@ADDR, got '${2:-}'" >&2; exit 2; }
      nodes+=("$2"); shift 2 ;;
    *) echo "slurm_cluster: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ ${#nodes[@]} -gt 0 ] && [ -z "$controller" ]; then
  echo "slurm_cluster: --node needs --controller ADDR (this host's address the nodes reach)" >&2
  exit 2
fi

mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/dev"
chmod 755 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
# One munged serves every node: its socket is a file, which network namespaces do not separate.
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" \
  --force
# From here on, a failed step stops what was started before exiting (set -e).
trap 'echo "slurm_cluster: start failed; stopping what it started" >&2; stop' ERR

host="$(hostname)"
if [ ${#nodes[@]} -eq 0 ]; then
  touch "$dir/dev/nvidia0" "$dir/dev/nvidia1"  # stand-ins for the GPU device files
  node_lines="NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) Gres=gpu:2 State=UNKNOWN"
  partition_nodes=localhost
  gres="Name=gpu File=$dir/dev/nvidia[0-1]"
  controller=127.0.0.1
  oversubscribe=YES
  slurmd_files="SlurmdPidFile=$dir/slurmd.pid
SlurmdLogFile=$dir/slurmd.log
SlurmdSpoolDir=$dir/spool"
else
  node_lines="" partition_nodes="" gres=""
  for spec in "${nodes[@]}"; do
    name="${spec%%=*}"; addr="${spec##*@}"
    mkdir -p "$dir/dev/$name" "$dir/spool/$name"
    touch "$dir/dev/$name/nvidia0"
    node_lines+="NodeName=$name NodeHostname=$name NodeAddr=$addr CPUs=1 Gres=gpu:1 State=UNKNOWN"$'\n'
    partition_nodes+="${partition_nodes:+,}$name"
    gres+="NodeName=$name Name=gpu File=$dir/dev/$name/nvidia0"$'\n'
  done
  oversubscribe=NO
  # slurmd expands %n to its node name: one pid file, log and spool per node.
  slurmd_files="SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdLogFile=$dir/slurmd-%n.log
SlurmdSpoolDir=$dir/spool/%n"
fi

cat > "$dir/slurm.conf" <<CONF
ClusterName=cartlab-test
SlurmctldHost=${host}(${controller})
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
$slurmd_files
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=10
KillWait=60
MpiDefault=none
GresTypes=gpu
$node_lines
PartitionName=test Nodes=$partition_nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=$oversubscribe
CONF
printf '%s\n' "$gres" > "$dir/gres.conf"
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
if [ ${#nodes[@]} -eq 0 ]; then
  slurmd -f "$SLURM_CONF" -N localhost
else
  for spec in "${nodes[@]}"; do
    name="${spec%%=*}"; netns="${spec#*=}"; netns="${netns%@*}"
    # slurmd daemonizes inside both namespaces; what it starts inherits them. nsenter rather than
    # `ip netns exec`, which mounts a sysfs of the namespace's own without the cgroup tree that
    # slurmd reads.
    nsenter --net="/run/netns/$netns" unshare --uts sh -c 'hostname "$1" && exec slurmd -f "$2" -N "$1"' \
      sh "$name" "$SLURM_CONF"
  done
fi
want=$(( ${#nodes[@]} > 0 ? ${#nodes[@]} : 1 ))
for _ in $(seq 150); do
  if [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" -ge "$want" ]; then
    echo "SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.1
done
echo "slurm_cluster: $want node(s) did not come up; see $dir/*.log" >&2
sinfo -N >&2 || true
stop
exit 1
