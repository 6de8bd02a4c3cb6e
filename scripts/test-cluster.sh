#!/usr/bin/env bash
# Five test hosts on this machine, for `kvplan deploy` over SSH (inventories/test-cluster):
#
#   scripts/test-cluster.sh up              build whatever is missing, wait until ssh reaches every host
#   scripts/test-cluster.sh down [--wipe]   stop every process of the hosts, remove the network;
#                                           --wipe also deletes the hosts' data ($STATE/hosts)
#   scripts/test-cluster.sh status          exit 0 only when every host is up and answers ssh
#   scripts/test-cluster.sh exec HOST CMD…  run CMD inside HOST (its network, mounts and host name)
#
# A test host is
#   - a network namespace kvtc-HOST whose only interface (besides lo) is eth0, one end of a veth
#     pair whose other end (kvtc-HOST) is a port of the bridge kvtc0 in the root namespace. The
#     bridge holds 10.213.17.1/24, so this machine (the Ansible controller) reaches every host;
#     the namespaces have no default route: nothing leaves the machine;
#   - its own mount and UTS namespace: the hosts share this machine's filesystem, so each one gets
#     private copies (bind mounts of directories under $STATE/hosts/HOST/fs) of the places the
#     deploy writes to (/etc/ceph, /var/lib/ceph, /tmp, …), its own /etc/hosts, host name, /run
#     (Ceph's pid files) and /dev/shm (LMCache's shared memory);
#   - an sshd in those namespaces, listening on the host's address, that lets in root with the
#     key $STATE/ssh/id_ed25519 ($STATE/ssh/known_hosts holds the hosts' keys).
# Everything else (binaries, /usr, /opt, the packages' state) is this machine's. Processes are
# told apart only by their network namespace (`ip netns pids`), never by name: this machine may
# run other Ceph daemons in the root namespace at the same time.
#
# Needs root, iproute2, util-linux, openssh-server and openssh-client (./install.sh test).
# STATE is /var/lib/kvplan-test-cluster unless KVPLAN_TEST_CLUSTER_STATE says otherwise (the
# inventory names the default's key files).
set -euo pipefail

SUBNET_PREFIX=10.213.17
BRIDGE=kvtc0
BRIDGE_ADDR=$SUBNET_PREFIX.1
HOSTS=(ceph0 ceph1 ceph2 gpu0 gpu1)
declare -A ADDR=([ceph0]=$SUBNET_PREFIX.10 [ceph1]=$SUBNET_PREFIX.11 [ceph2]=$SUBNET_PREFIX.12
                 [gpu0]=$SUBNET_PREFIX.20 [gpu1]=$SUBNET_PREFIX.21)
# Directories each host has its own copy of (bound from $STATE/hosts/HOST/fs/<path>).
PRIVATE_DIRS=(/etc/ceph /etc/kvplan /etc/lmcache /etc/prometheus /var/lib/ceph /var/lib/kvplan
              /var/lib/prometheus /var/log/ceph /var/log/kvplan /tmp)
# Shared read-only with every host when it exists here (the tiny model of `kvplan model build-tiny`).
MODELS=/var/lib/kvplan/models
DEFAULT_STATE=/var/lib/kvplan-test-cluster
STATE=${KVPLAN_TEST_CLUSTER_STATE:-$DEFAULT_STATE}
REPO=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "test-cluster: $*" >&2; exit 1; }
say() { echo "test-cluster: $*"; }

# --- checks -------------------------------------------------------------------------------

need_root() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (it creates network namespaces and mounts): sudo $0 ${*:-up}"
}

need_tools() {  # cmd:package ...
  local t
  for t in "$@"; do
    command -v "${t%%:*}" >/dev/null 2>&1 ||
      die "'${t%%:*}' not found (Debian package ${t#*:}); install the test tools with ./install.sh test"
  done
}

check_state_path() {
  # The hosts' mounts would hide a STATE under one of the directories they cover.
  local s p
  s=$(realpath -m "$STATE")
  [ "$s" != / ] || die "KVPLAN_TEST_CLUSTER_STATE must not be /"
  case "$s" in *[[:space:]]*) die "KVPLAN_TEST_CLUSTER_STATE must not contain spaces (sshd_config, ssh options)" ;; esac
  for p in "${PRIVATE_DIRS[@]}" /run /dev/shm; do
    case "$s/" in "$p"/*) die "STATE ($s) must not be under $p: each test host covers $p with its own copy" ;; esac
  done
  STATE=$s
}

check_subnet_free() {
  local other
  other=$(ip -o -4 addr show to "$SUBNET_PREFIX.0/24" | awk -v b="$BRIDGE" '$2 != b {print $2}' | sort -u)
  [ -z "$other" ] || die "$SUBNET_PREFIX.0/24 is already on interface(s) $other of this machine"
}

# --- names and files ----------------------------------------------------------------------

ns_of() { echo "kvtc-$1"; }
host_dir() { echo "$STATE/hosts/$1"; }
ssh_opts() {
  echo "-i $STATE/ssh/id_ed25519 -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes" \
       "-o UserKnownHostsFile=$STATE/ssh/known_hosts -o GlobalKnownHostsFile=/dev/null"
}

ns_exists() { ip netns list | awk '{print $1}' | grep -qxF "$1"; }

# The pid of HOST's sshd (written by the host's setup, which then execs sshd), when that
# process is alive and in HOST's network namespace; nothing otherwise.
sshd_pid() {
  local f pid
  f=$(host_dir "$1")/sshd.pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  [ "$(ip netns identify "$pid" 2>/dev/null)" = "$(ns_of "$1")" ] || return 1
  echo "$pid"
}

ssh_ok() {  # HOST
  # shellcheck disable=SC2046
  ssh $(ssh_opts) -F none -o ConnectTimeout=2 "root@${ADDR[$1]}" true </dev/null >/dev/null 2>&1
}

# --- keys ---------------------------------------------------------------------------------

ensure_keys() {
  local h
  mkdir -p "$STATE/ssh"
  chmod 700 "$STATE/ssh"
  [ -f "$STATE/ssh/id_ed25519" ] ||
    ssh-keygen -q -t ed25519 -N '' -C kvplan-test-cluster -f "$STATE/ssh/id_ed25519"
  cp "$STATE/ssh/id_ed25519.pub" "$STATE/ssh/authorized_keys"
  : >"$STATE/ssh/known_hosts.new"
  for h in "${HOSTS[@]}"; do
    [ -f "$STATE/ssh/host_$h" ] || ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$STATE/ssh/host_$h"
    echo "${ADDR[$h]},$h $(cut -d' ' -f1,2 "$STATE/ssh/host_$h.pub")" >>"$STATE/ssh/known_hosts.new"
  done
  mv "$STATE/ssh/known_hosts.new" "$STATE/ssh/known_hosts"
}

# --- network ------------------------------------------------------------------------------

no_ipv6() {  # IFACE [NS]: our links carry only the subnet's IPv4 addresses
  local f=/proc/sys/net/ipv6/conf/$1/disable_ipv6
  if [ -n "${2:-}" ]; then
    ip netns exec "$2" sh -c "[ ! -w $f ] || echo 1 >$f"
  elif [ -w "$f" ]; then
    echo 1 >"$f"
  fi
}

ensure_bridge() {
  ip link show dev "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  no_ipv6 "$BRIDGE"
  ip addr replace "$BRIDGE_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

ensure_host_net() {  # HOST
  local ns
  ns=$(ns_of "$1")
  ns_exists "$ns" || ip netns add "$ns"
  if ! ip -n "$ns" link show dev eth0 >/dev/null 2>&1; then
    ip link del "$ns" 2>/dev/null || true  # a root end left without its peer
    ip link add "$ns" type veth peer name eth0 netns "$ns"
  fi
  no_ipv6 "$ns"
  no_ipv6 eth0 "$ns"
  ip link set "$ns" master "$BRIDGE" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr replace "${ADDR[$1]}/24" dev eth0
  ip -n "$ns" link set eth0 up
}

# --- a host's filesystem view -------------------------------------------------------------

# Creates DIR (under a host's fs/) owned and moded like ORIG, this machine's directory.
mkdir_like() {  # DIR ORIG
  [ ! -d "$1" ] || return 0
  mkdir -p "$1"
  chown --reference="$2" "$1"
  chmod --reference="$2" "$1"
}

prepare_host_files() {  # HOST
  local h=$1 d p sub
  d=$(host_dir "$h")
  mkdir -p "$d/fs/etc" "$d/models-stage"
  for p in "${PRIVATE_DIRS[@]}"; do
    mkdir -p "$p"  # the mount point, on this machine
    mkdir_like "$d/fs$p" "$p"
  done
  chmod 1777 "$d/fs/tmp"
  # Debian's Ceph packages own empty directories under /var/lib/ceph (bootstrap-osd, mon, osd,
  # radosgw, tmp, crash/posted, …): the same, empty, in the host's copy. Not deeper: mon/ceph-ID
  # and the like are the data of daemons on this machine.
  for sub in /var/lib/ceph/*/ /var/lib/ceph/crash/*/; do
    [ -d "$sub" ] || continue
    sub=${sub%/}
    mkdir_like "$d/fs$sub" "$sub"
  done
  echo "$h" >"$d/fs/etc/hostname"
  [ -e /etc/hostname ] || : >/etc/hostname  # the mount point
  # The deploy adds lines to /etc/hosts (RGW's name): kept across down/up, gone with --wipe.
  [ -f "$d/fs/etc/hosts" ] || {
    printf '127.0.0.1 localhost\n::1 localhost\n'
    for p in "${HOSTS[@]}"; do echo "${ADDR[$p]} $p"; done
  } >"$d/fs/etc/hosts"
}

write_sshd_config() {  # HOST
  cat >"$(host_dir "$1")/sshd_config" <<EOF
# Written by scripts/test-cluster.sh for test host $1.
ListenAddress ${ADDR[$1]}:22
HostKey $STATE/ssh/host_$1
PidFile /run/sshd.pid
AuthorizedKeysFile $STATE/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
MaxStartups 100:30:200
MaxSessions 100
Subsystem sftp internal-sftp
EOF
}

# Run by sh inside the host's new mount and UTS namespaces (and its network namespace), before
# it execs sshd: $1 host, $2 its state dir, $3 sshd, $4 sshd's config, $5 MODELS, then PRIVATE_DIRS.
# Writes its pid first ($$ stays sshd's pid through exec) for `exec` and `down`.
# shellcheck disable=SC2016
HOST_SETUP='set -e
h=$1 d=$2 sshd=$3 conf=$4 models=$5; shift 5
echo $$ >"$d/sshd.pid"
echo "$h" >/proc/sys/kernel/hostname
# The models of this machine, set aside before their parent directory is covered.
if [ -d "$models" ]; then mount --bind "$models" "$d/models-stage"; else models=""; fi
for p in "$@"; do mount --bind "$d/fs$p" "$p"; done
if [ -n "$models" ]; then
  mkdir -p "$models"
  mount --bind "$d/models-stage" "$models"
  mount -o remount,bind,ro "$models"
  umount "$d/models-stage"
fi
mount --bind "$d/fs/etc/hosts" /etc/hosts
mount --bind "$d/fs/etc/hostname" /etc/hostname
umount -l /run/netns 2>/dev/null || true
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
mkdir -m 755 /run/sshd
mkdir -m 1777 /run/lock
mkdir -m 770 /run/ceph
chown ceph:ceph /run/ceph 2>/dev/null || true
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
"$sshd" -t -f "$conf"
exec "$sshd" -D -e -f "$conf"'

start_host() {  # HOST
  local h=$1 d sshd
  d=$(host_dir "$h")
  sshd=$(command -v sshd)
  prepare_host_files "$h"
  write_sshd_config "$h"
  rm -f "$d/sshd.pid"
  setsid ip netns exec "$(ns_of "$h")" unshare --mount --uts --propagation private \
    sh -c "$HOST_SETUP" sh "$h" "$d" "$sshd" "$d/sshd_config" "$MODELS" "${PRIVATE_DIRS[@]}" \
    </dev/null >>"$d/sshd.log" 2>&1 9>&- &
}

# --- stopping -----------------------------------------------------------------------------

ns_pids() {  # NS...: the pids of the processes in those network namespaces
  local ns
  for ns in "$@"; do ip netns pids "$ns" 2>/dev/null || true; done | sort -un | tr '\n' ' '
}

kill_namespaces() {  # NS...: TERM, up to 10 s, KILL; again until none is left
  local round pids
  for round in 1 2 3 4 5; do
    pids=$(ns_pids "$@")
    [ -n "${pids// /}" ] || return 0
    say "stopping $(wc -w <<<"$pids") process(es) in $* (round $round)"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 50); do
      sleep 0.2
      pids=$(ns_pids "$@")
      [ -n "${pids// /}" ] || return 0
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
  done
  die "processes still running in $*: $(ns_pids "$@")"
}

our_namespaces() { ip netns list | awk '$1 ~ /^kvtc-/ {print $1}'; }
our_links() { ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); if ($2 ~ /^kvtc-/) print $2}'; }

# --- commands -----------------------------------------------------------------------------

cmd_up() {
  local h pid left deadline
  need_root up
  need_tools ip:iproute2 unshare:util-linux setsid:util-linux sshd:openssh-server \
             flock:util-linux ssh-keygen:openssh-client ssh:openssh-client
  check_state_path
  mkdir -p "$STATE/hosts"
  exec 9>"$STATE/.lock"
  flock 9
  check_subnet_free
  ensure_keys
  ensure_bridge
  for h in "${HOSTS[@]}"; do
    ensure_host_net "$h"
    if sshd_pid "$h" >/dev/null; then continue; fi
    # A host whose sshd is gone restarts as a whole (a fresh /run would hide what is left).
    kill_namespaces "$(ns_of "$h")"
    say "$h: starting sshd on ${ADDR[$h]}"
    start_host "$h"
  done

  deadline=$((SECONDS + 30))
  left=("${HOSTS[@]}")
  while [ ${#left[@]} -gt 0 ]; do
    local still=()
    for h in "${left[@]}"; do
      if ssh_ok "$h"; then
        printf '%-6s %-13s up (sshd pid %s)\n' "$h" "${ADDR[$h]}" "$(sshd_pid "$h" || echo '?')"
      elif [ -s "$(host_dir "$h")/sshd.pid" ] && ! sshd_pid "$h" >/dev/null; then
        tail -n 20 "$(host_dir "$h")/sshd.log" >&2 || true
        die "$h: its sshd exited (log: $(host_dir "$h")/sshd.log)"
      else
        still+=("$h")
      fi
    done
    left=("${still[@]+"${still[@]}"}")
    [ ${#left[@]} -eq 0 ] && break
    [ $SECONDS -lt $deadline ] || die "no ssh to ${left[*]} after 30 s (logs: $STATE/hosts/HOST/sshd.log)"
    sleep 0.5
  done

  echo "inventory: $REPO/inventories/test-cluster   (kvplan deploy examples/cluster.yaml -i inventories/test-cluster)"
  echo "ssh:       ssh $(ssh_opts) root@${ADDR[ceph0]}"
  [ "$STATE" = "$DEFAULT_STATE" ] ||
    echo "note: the inventory names the keys under $DEFAULT_STATE, not $STATE"
}

cmd_down() {
  local wipe="" ns link h nss
  case "${1:-}" in "") ;; --wipe) wipe=yes ;; *) die "usage: $0 down [--wipe]" ;; esac
  need_root down
  need_tools ip:iproute2
  check_state_path
  if [ -d "$STATE" ]; then exec 9>"$STATE/.lock"; flock 9; fi
  mapfile -t nss < <(our_namespaces)
  [ ${#nss[@]} -eq 0 ] || kill_namespaces "${nss[@]}"
  for ns in "${nss[@]+"${nss[@]}"}"; do ip netns del "$ns"; done
  for link in $(our_links); do ip link del "$link" 2>/dev/null || true; done
  ! ip link show dev "$BRIDGE" >/dev/null 2>&1 || ip link del "$BRIDGE"
  for h in "${HOSTS[@]}"; do rm -f "$(host_dir "$h")/sshd.pid"; done
  if [ -n "$wipe" ]; then
    rm -rf "$STATE/hosts"
    say "down; the hosts' data is deleted (keys kept in $STATE/ssh)"
  else
    say "down; the hosts' data is kept in $STATE/hosts (down --wipe deletes it)"
  fi
}

cmd_status() {
  local h ns pid line ok=0
  need_root status
  need_tools ip:iproute2 ssh:openssh-client
  check_state_path
  for h in "${HOSTS[@]}"; do
    ns=$(ns_of "$h")
    line=$(printf '%-6s %-13s' "$h" "${ADDR[$h]}")
    if ! ns_exists "$ns"; then
      line+=" no namespace"; ok=1
    elif ! pid=$(sshd_pid "$h"); then
      line+=" namespace ok, sshd not running"; ok=1
    elif ! ssh_ok "$h"; then
      line+=" namespace ok, sshd pid $pid, ssh FAILS"; ok=1
    else
      line+=" namespace ok, sshd pid $pid, ssh ok"
    fi
    echo "$line"
  done
  return $ok
}

cmd_exec() {
  local h=${1:-} pid
  if [ -z "$h" ] || [ -z "${ADDR[$h]:-}" ] || [ $# -lt 2 ]; then
    die "usage: $0 exec HOST CMD... (HOST: ${HOSTS[*]})"
  fi
  shift
  need_root exec
  need_tools nsenter:util-linux ip:iproute2
  check_state_path
  pid=$(sshd_pid "$h") || die "$h is not up ($0 up)"
  exec nsenter --target "$pid" --net --mount --uts -- "$@"
}

case "${1:-}" in
  up) shift; [ $# -eq 0 ] || die "usage: $0 up"; cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) shift; cmd_status ;;
  exec) shift; cmd_exec "$@" ;;
  *) echo "usage: $0 up | down [--wipe] | status | exec HOST CMD..." >&2; exit 2 ;;
esac
