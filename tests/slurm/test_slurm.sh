#!/usr/bin/env bash
# test_slurm.sh — a real Slurm test of `kvbench slurm`: installs Slurm from Debian (slurm-wlm, munge), starts a
# one-node cluster on this machine (slurmctld + slurmd on localhost, a generated slurm.conf, 2 CPUs), submits
# a 2-shard array of a small CPU sweep plus the dependent merge, waits, and checks that the merged database
# holds exactly the rows of an unsharded run. The cluster is shut down at the end, whatever happens.
# Usage: tests/slurm/test_slurm.sh [CONFIG] [LIMIT]   (run from the project root after `make`)
set -uo pipefail
config=${1:-tests/slurm/slurm_sweep.json}
limit=${2:-2}
work=$(mktemp -d /tmp/kvbench-slurm.XXXXXX)
pass=0; fail=0
ok()  { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
finish() { echo "test_slurm: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

need=()
for p in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null \
        || { bad "cannot install ${need[*]}"; finish; }
fi

host=$(hostname)
export SLURM_CONF=$work/slurm.conf
mkdir -p "$work/state" "$work/spool" "$work/munge"
cat > "$SLURM_CONF" <<CONF
ClusterName=kvbenchtest
SlurmctldHost=$host
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldPort=16917
SlurmdPort=16918
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

# munge: a private key and socket, so the test neither needs nor disturbs a system munged.
dd if=/dev/urandom of="$work/munge/munge.key" bs=128 count=1 status=none
chmod 600 "$work/munge/munge.key"
munge_sock=$work/munge/munge.socket
cleanup() {
    scontrol shutdown >/dev/null 2>&1
    sleep 1
    [ -f "$work/slurmd.pid" ] && kill "$(cat "$work/slurmd.pid")" 2>/dev/null
    [ -f "$work/slurmctld.pid" ] && kill "$(cat "$work/slurmctld.pid")" 2>/dev/null
    [ -f "$work/munge/munged.pid" ] && kill "$(cat "$work/munge/munged.pid")" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
munged --force --key-file="$work/munge/munge.key" --socket="$munge_sock" --pid-file="$work/munge/munged.pid" \
       --log-file="$work/munge/munged.log" --seed-file="$work/munge/seed" \
    || { bad "munged did not start"; finish; }
# Slurm's auth/munge plugin reads the socket path from AuthInfo.
sed -i "s|^AuthType=auth/munge|AuthType=auth/munge\nAuthInfo=socket=$munge_sock|" "$SLURM_CONF"
slurmctld -c -f "$SLURM_CONF" || { bad "slurmctld did not start"; finish; }
slurmd -f "$SLURM_CONF" || { bad "slurmd did not start"; finish; }
for _ in $(seq 30); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 1; done
sinfo -h -o %t | grep -q idle && ok "one-node cluster up" || { bad "cluster not idle: $(sinfo 2>&1)"; finish; }

# The sharded run through Slurm.
out=$(./kvbench slurm "$config" --shards 2 --limit "$limit" --dir "$work/sweep" --cpus-per-task 1 --submit)
echo "$out"
merge_id=$(echo "$out" | sed -n 's/.*merge job \([0-9]*\).*/\1/p')
[ -n "$merge_id" ] && ok "array and merge submitted" || { bad "submission failed"; finish; }
for _ in $(seq 600); do
    squeue -h 2>/dev/null | grep -q . || break
    sleep 1
done
squeue -h | grep -q . && bad "jobs still queued after 10 minutes: $(squeue)"
[ -f "$work/sweep/merged.db" ] && ok "merged database written" \
    || { bad "no merged database; logs: $(cat "$work"/sweep/logs/* 2>/dev/null | tail -20)"; finish; }

# The same sweep unsharded, and the row-by-row comparison.
./kvbench run "$config" --limit "$limit" --db "$work/ref.db" > "$work/ref.log" 2>&1 \
    && ok "unsharded reference run" || { bad "unsharded run failed: $(tail -5 "$work/ref.log")"; finish; }
rows='SELECT s.model, s.sample_key, r.policy, r.aggregation, r.params, r.budget, r.kept_tokens, r.prediction, r.score
      FROM results r JOIN samples s ON s.id = r.sample_id ORDER BY 1, 2, 3, 4, 5, 6'
sqlite3 "$work/ref.db" "$rows" > "$work/ref.rows"
sqlite3 "$work/sweep/merged.db" "$rows" > "$work/merged.rows"
n=$(wc -l < "$work/ref.rows")
[ "$n" -gt 0 ] && ok "reference has $n result rows" || bad "reference has no rows"
cmp -s "$work/ref.rows" "$work/merged.rows" && ok "merged rows equal the unsharded run's ($n rows)" \
    || bad "merged rows differ: $(diff "$work/ref.rows" "$work/merged.rows" | head -5)"
finish
