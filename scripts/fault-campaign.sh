#!/usr/bin/env bash
# The fault campaign: the local cluster of config/local.toml (on ports 17000-17900, data under
# /tmp) with a second replica of the global aggregator and of each datacenter aggregator
# (`global@1`, `aggregator_<DC>@1`), behind the emulated WAN, under steady keyed load
# (`geoctl load`), while in turn:
#   1. a shard node is killed -9 and restarted;
#   2. a datacenter aggregator (replica 0) is restarted;
#   3. a shard node is SIGSTOPped, then SIGCONTed;
#   4. ASIA_0 is cut off (every WAN link of every replica), then healed;
#   5. EUROPE_0's shard's disk (a tmpfs; needs root) is filled, then freed;
#   6. DC_USA_0_VAL_0's disk is lost right after both replicas of its datacenter aggregator
#      restarted, and the node restores its slot (from the global aggregator and its peers:
#      the aggregator forgot it);
#   7. DC_ASIA_0_VAL_1's disk is lost and the node killed -9 in the middle of its restore (its
#      sources, every replica of both aggregators and its peer, stopped meanwhile), then
#      restarted: it resumes the restore;
#   8. a byte of DC_USA_0_VAL_2's newest log segment is flipped: the node refuses to start,
#      naming the file and the byte, `shard-node check` says so, and the documented recovery
#      (move the data directory aside, start the node) restores it whole;
#   9. DC_ASIA_0_VAL_1's disk is lost while its only peer, DC_ASIA_0_VAL_0, restarts (both
#      killed -9 by one kill, then started again): ASIA_0 refuses writes while no peer can hold
#      them, and the node restores its slot, values and keys, from its peer's log once the peer
#      is back;
#  10. a second node is started for a slot already served (a topology copy giving it another
#      address): it and every replica of the datacenter aggregator report the conflict and it
#      takes no writes;
#  11. the global aggregator (replica 0) is restarted;
#  12. a shard node is flooded with idle connections from one other address (127.0.0.2):
#      its pulls and its writes go on, and global reads stay fresh;
#  13. the global aggregator is stormed with 4 loops of the worst-case top-K scan: its reads
#      keep answering, never 503 (stale);
#  14. global replica 0 (`global`) is killed -9: meanwhile every read at `global@1` answers 200,
#      complete, fresh and from replica 1; then it is restarted;
#  15. replica 0 of USA_0's aggregator (`aggregator_USA_0`) is killed -9: meanwhile every read
#      at `aggregator_USA_0@1` answers 200 and complete, and every global replica answers
#      complete and fresh reads with USA_0 fresh; then it is restarted.
# During each fault, marker writes (+1, each with its own Idempotency-Key) go through every
# datacenter; after each heal the unacknowledged ones are retried with the same keys and every
# replica of every datacenter aggregator and of the global aggregator is polled until it shows
# exactly the markers. A marker counts as lost if it was acknowledged and the global total
# misses it, as doubled if the total exceeds the acknowledged markers plus those of unknown
# outcome.
#
# From the start of the load to its end, through every fault and without a pause before one,
# scripts/campaign_writers.py (with the `redis` Python client scripts/resp-clients.sh installs)
# runs two more writers:
# - bounded counters: three made with `max`, one with `min` (written with decrements), written
#   by a client in every datacenter, each write keyed (a 409 at the bound is an expected
#   refusal; one of unknown outcome is retried with its key until answered for good), their room
#   sized so that each reaches its bound in the run. Once a second and at the end every part is
#   read, each datacenter aggregator replica's and each shard node's slot: their sums must stay
#   within the bound (never only the clamped global total), and at the end every tier must agree
#   with the slots, whose sum is the acknowledged deltas (plus at most those of unknown outcome);
# - pipelined Redis-protocol writes: pipelines of 16 to 64 `INCRBY` at every shard node's `resp`
#   port, each reply acknowledged, refused, or of unknown outcome (an error saying so, the
#   connection lost mid-pipeline, or a LOADING reply, past which redis-py reads none); at the
#   end each counter's slots and global total must be its acknowledged increments plus at most
#   the unknown ones.
#
# USA_0 and ASIA_0 run `durability = "replicated"` (config/local.toml): a write is acknowledged
# once a peer shard node holds it too, so the load runs on through the disk losses (faults 6 to
# 9) with no pause before them, and nothing acknowledged may be lost. EUROPE_0, one node in
# `sync`, loses no disk here: it would lose the writes of the last pull interval.
#
# Prints one table: writes acknowledged, refused and of unknown outcome (the load's, the
# markers', the bounded and the Redis-protocol writers'), writes lost (must be 0), writes
# doubled (must be 0), how far a bounded counter's parts went past its bound (quota exceeded,
# must be 0), the longest time any tier stayed wrong after a heal, and whether every process
# still serves; then `lost = N, doubled = N, quota exceeded = N`. Exits 1 if anything was lost
# or doubled, a quota exceeded, a tier never converged, a writer's check failed, or a process
# stopped serving.
#
#   scripts/fault-campaign.sh [--duration S] [--rate N] [--no-build]
#
# The binaries are built into and run from $CARGO_TARGET_DIR/release (target/release when
# CARGO_TARGET_DIR is unset).
#
# Bounded: the load runs S seconds (default 240, at least 150); the whole run takes about
# S + 90 s plus the build. Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=240
rate=400
build=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration) duration="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --no-build) build=0; shift ;;
        *) echo "usage: $0 [--duration S] [--rate N] [--no-build]" >&2; exit 2 ;;
    esac
done
((duration >= 150)) || { echo "--duration must be at least 150" >&2; exit 2; }

bins="${CARGO_TARGET_DIR:-target}/release"
python=$(scripts/resp-clients.sh)
if ((build)); then
    cargo build --release -p shard-node -p geocount-aggregator -p geocount-cluster \
        -p geoctl -p geocount-wan
fi

run=/tmp/geocount-campaign
data="$run/data"
topology="$run/topology.toml"
full_slot=DC_EUROPE_0_VAL_0
tmpfs="$data/$full_slot"
launcher_pid=""
restarted=()     # processes this script restarted (the launcher no longer owns them)
load_pid=""
writers_pid=""

cleanup() {
    set +e
    [[ -n "$load_pid" ]] && kill "$load_pid" 2>/dev/null
    [[ -n "$writers_pid" ]] && kill "$writers_pid" 2>/dev/null
    for pid in "${restarted[@]}"; do kill -CONT "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done
    if [[ -n "$launcher_pid" ]]; then
        kill "$launcher_pid" 2>/dev/null
        wait "$launcher_pid" 2>/dev/null
    fi
    for pid in "${restarted[@]}"; do   # disowned: wait until each is gone, for 10 s at most
        for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    done
    mountpoint -q "$tmpfs" && umount -l "$tmpfs"
}
trap cleanup EXIT

mountpoint -q "$tmpfs" && umount -l "$tmpfs"
rm -rf "$run"
mkdir -p "$tmpfs"
# config/local.toml on ports 17xxx, with one more replica of the global aggregator (17010) and
# of each datacenter aggregator (its aggregator's port + 10: 17110, 17210, 17310).
sed -e 's/127\.0\.0\.1:7\([0-9][0-9][0-9]\)/127.0.0.1:17\1/g' \
    -e "s|^data_dir = .*|data_dir = \"$data\"|" \
    -e 's/^listen = "127\.0\.0\.1:17000"$/&\nreplicas = ["127.0.0.1:17010"]/' \
    -e 's/^aggregator = "127\.0\.0\.1:17\([0-9]\)00"$/&\naggregator_replicas = ["127.0.0.1:17\110"]/' \
    config/local.toml > "$topology"
grep -q '^replicas = ' "$topology" && (($(grep -c '^aggregator_replicas = ' "$topology") == 3)) ||
    { echo "cannot add the replicas to $topology" >&2; exit 1; }
disk_fault=1
if ! mount -t tmpfs -o size=64m tmpfs "$tmpfs" 2>"$run/mount.err"; then
    disk_fault=0
    echo "note: cannot mount a tmpfs for $full_slot ($(cat "$run/mount.err")): the disk-full fault is skipped"
fi

"$bins/geocount-cluster" --config "$topology" --bin-dir "$bins" --data-dir "$data" --wan --new-cluster \
    > "$run/cluster.out" 2>&1 &
launcher_pid=$!
for _ in $(seq 1 300); do
    grep -q "Ctrl-C stops the cluster" "$run/cluster.out" && break
    kill -0 "$launcher_pid" 2>/dev/null || { cat "$run/cluster.out"; exit 1; }
    sleep 0.1
done
grep -q "Ctrl-C stops the cluster" "$run/cluster.out" || { cat "$run/cluster.out"; exit 1; }

# name → pid and address, from the launcher's table.
declare -A pid_of addr_of
while read -r _role name addr pid _log; do
    pid_of[$name]=$pid
    addr_of[$name]=$addr
done < <(awk '$4 ~ /^[0-9]+$/ && $3 ~ /:/ && $2 !~ /:/ {print}' "$run/cluster.out")
control="${addr_of[wan-emulator]}"
global="${addr_of[global]}"
declare -A shards_of=(
    [USA_0]="${addr_of[DC_USA_0_VAL_0]} ${addr_of[DC_USA_0_VAL_1]} ${addr_of[DC_USA_0_VAL_2]}"
    [ASIA_0]="${addr_of[DC_ASIA_0_VAL_0]} ${addr_of[DC_ASIA_0_VAL_1]}"
    [EUROPE_0]="${addr_of[DC_EUROPE_0_VAL_0]}"
)
datacenters=(USA_0 ASIA_0 EUROPE_0)

# replicas_of NAME: NAME and its other replicas (NAME@1, ...) as the launcher's table names them.
replicas_of() {
    local name
    for name in "${!addr_of[@]}"; do
        if [[ $name == "$1" || $name =~ ^$1@[0-9]+$ ]]; then echo "$name"; fi
    done | sort
}
mapfile -t globals < <(replicas_of global)
((${#globals[@]} == 2)) || { echo "the launcher started ${globals[*]}, not 2 global replicas" >&2; exit 1; }
declare -A aggregators_of
for dc in "${datacenters[@]}"; do
    aggregators_of[$dc]="$(replicas_of "aggregator_$dc" | tr '\n' ' ')"
    [[ -n "${addr_of[aggregator_$dc@1]:-}" ]] || { echo "the launcher started no aggregator_$dc@1" >&2; exit 1; }
done

now_ms() { date +%s%3N; }

# gone PID: the process has exited: no such pid, or only its zombie leader is left (its files,
# and so its store's lock, go with its last thread).
gone() {
    ! kill -0 "$1" 2>/dev/null ||
        { [[ "$(ps -o stat= -p "$1")" == Z* ]] && (($(ls "/proc/$1/task" 2>/dev/null | wc -l) <= 1)); }
}

# stop_at_once SIGNAL NAME...: keeps each process's command line, signals them all with one
# kill (in that order) and waits until each is gone.
stop_at_once() {
    local signal=$1 name pid
    local -a pids=()
    shift
    for name in "$@"; do
        pid=${pid_of[$name]}
        cp "/proc/$pid/cmdline" "$run/$name.cmdline"
        pids+=("$pid")
    done
    kill "-$signal" "${pids[@]}"
    for pid in "${pids[@]}"; do
        until gone "$pid"; do sleep 0.05; done
    done
}

# stop NAME SIGNAL: stop_at_once for one process.
stop() { stop_at_once "$2" "$1"; }

# launch NAME: starts it again with the command line it had, less a first start's
# `--restore empty` (a node that finds its disk empty now must restore it), appending to its
# log; does not wait.
launch() {
    local name=$1 skip=0 arg
    local -a saved cmd=()
    mapfile -d '' saved < "$run/$name.cmdline"
    for arg in "${saved[@]}"; do
        ((skip)) && { skip=0; continue; }
        [[ $arg == --restore ]] && { skip=1; continue; }
        cmd+=("$arg")
    done
    "${cmd[@]}" >> "$data/logs/$name.log" 2>&1 &
    pid_of[$name]=$!
    restarted+=("$!")
    disown "$!"   # its kill -9 is the campaign's, not news
}

# healthy NAME SECONDS: waits until NAME answers /healthz with 200.
healthy() {
    local name=$1 tries=$(($2 * 20))
    for _ in $(seq 1 "$tries"); do
        curl -sf -m 1 "http://${addr_of[$name]}/healthz" > /dev/null && return 0
        sleep 0.05
    done
    echo "$name not healthy after $2 s" >&2
    return 1
}

# start NAME: launch, then wait until it answers /healthz.
start() {
    launch "$1"
    healthy "$1" 15 || { echo "$1 did not come back after its restart" >&2; return 1; }
}

# status_of NAME: the status word of its /healthz.
status_of() { curl -s -m 1 "http://${addr_of[$1]}/healthz" | jq -r '.status // "none"' 2>/dev/null || echo none; }

# A check of a fault's own behaviour that did not hold.
checks_failed=()
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then echo "  ok: $what"; else echo "  NOT OK: $what"; checks_failed+=("$what"); fi
}

# Marker writes of the current fault: key → the shard node it was sent to; acked keys; the
# outcome of each key's first attempt (acknowledged, refused, unknown).
declare -A marker_node marker_acked marker_first marker_answer marker_maybe
marker_counter=""
markers_per_dc=4

# One marker write; marks it acknowledged on 200. A refusal applied nothing; no answer, a 504
# or a 503 "not acknowledged" (in the node's log, no peer held it in time) leave the outcome
# unknown. The retries use the same key, so the marker applies once whatever happened.
send_marker() {
    local key=$1 node=$2 answer code outcome
    answer=$(curl -s -m 2 -w '\n%{http_code}' -X PATCH -H "Idempotency-Key: $key" \
        -d '{"delta": 1}' "http://$node/counter/$marker_counter/write?op=INCREMENT" || true)
    code=${answer##*$'\n'}
    case "$code" in
        200) outcome=acknowledged; marker_acked[$key]=1 ;;
        000 | 504) outcome=unknown ;;
        *) if [[ $answer == *"not acknowledged"* ]]; then outcome=unknown; else outcome=refused; fi ;;
    esac
    [[ $outcome == unknown ]] && marker_maybe[$key]=1
    [[ -n "${marker_first[$key]:-}" ]] || marker_first[$key]=$outcome
    marker_answer[$key]="$code ${answer%$'\n'*}"
    return 0
}

# Sends every marker of fault $1 once (during the fault), round robin over each datacenter's
# shard nodes.
write_markers() {
    marker_counter="campaign-$1"
    marker_node=()
    marker_acked=()
    marker_first=()
    marker_answer=()
    marker_maybe=()
    local dc i node
    for dc in "${datacenters[@]}"; do
        local -a nodes=(${shards_of[$dc]})
        for ((i = 0; i < markers_per_dc; i++)); do
            node=${nodes[i % ${#nodes[@]}]}
            marker_node["$1-$dc-$i"]=$node
            send_marker "$1-$dc-$i" "$node"
        done
    done
}

value_of() { curl -s -m 1 "$1" | jq -r '.value // "none"' 2>/dev/null || echo none; }

# Writes to $run/markers-<counter> how many markers were acknowledged and how many others may
# have applied (an attempt of unknown outcome), for the final count.
marker_counts() {
    local key maybe=0
    for key in "${!marker_node[@]}"; do
        [[ -z "${marker_acked[$key]:-}" && -n "${marker_maybe[$key]:-}" ]] && maybe=$((maybe + 1))
    done
    echo "${#marker_acked[@]} $maybe" > "$run/markers-$marker_counter"
}

# After a heal at $1 (ms): retries the unacknowledged markers (same keys, same node) until all
# are acknowledged, then polls every replica of every datacenter aggregator and of the global
# aggregator until each shows exactly the markers. Prints the milliseconds from the heal until
# then, or "never" (and, on stderr, what was still wrong); then marker_counts.
converge() {
    converge_wait "$1"
    marker_counts
}

converge_wait() {
    local healed=$1 deadline=$(($(now_ms) + 30000)) key dc name ok value wrong
    while :; do
        ok=1
        for key in "${!marker_node[@]}"; do
            [[ -n "${marker_acked[$key]:-}" ]] || { send_marker "$key" "${marker_node[$key]}"; ok=0; }
        done
        ((ok)) && break
        if (($(now_ms) >= deadline)); then
            for key in "${!marker_node[@]}"; do
                [[ -n "${marker_acked[$key]:-}" ]] ||
                    echo "  marker $key at ${marker_node[$key]} never acknowledged; last answer: ${marker_answer[$key]}" >&2
            done
            echo never
            return
        fi
        sleep 0.1
    done
    while :; do
        wrong=""
        for dc in "${datacenters[@]}"; do
            for name in ${aggregators_of[$dc]}; do
                value=$(value_of "http://${addr_of[$name]}/counter/$marker_counter")
                [[ $value == "$markers_per_dc" ]] || wrong+=" $name=$value"
            done
        done
        for name in "${globals[@]}"; do
            value=$(value_of "http://${addr_of[$name]}/counter/$marker_counter?allow_partial=true")
            [[ $value == "$((markers_per_dc * ${#datacenters[@]}))" ]] || wrong+=" $name=$value"
        done
        [[ -z $wrong ]] && { echo $(($(now_ms) - healed)); return; }
        if (($(now_ms) >= deadline)); then
            echo "  $marker_counter still wrong 30 s after the heal:$wrong" >&2
            echo never
            return
        fi
        sleep 0.02
    done
}

# The load runs under a subshell that records its exit status, read once the faults are over.
(
    "$bins/geoctl" --config "$topology" load --duration-secs "$duration" --rate "$rate" \
        --path http --concurrency 16 --json "$run/load.json" > "$run/load.out" 2>&1 &
    echo $! > "$run/load.pid"
    status=0
    wait $! || status=$?
    echo "$status" > "$run/load.status"
) &
load_waiter=$!
while [[ ! -s "$run/load.pid" ]]; do sleep 0.01; done
load_pid=$(cat "$run/load.pid")
started=$(now_ms)
"$python" scripts/campaign_writers.py --topology "$topology" --duration "$duration" \
    --stop "$run/writers.stop" --report "$run/writers.json" > "$run/writers.log" 2>&1 &
writers_pid=$!
faults=()      # "name|converged ms"
gap=$(((duration - 30) / 15))

at() { # waits until $1 seconds after the load started
    local wait_ms=$((started + $1 * 1000 - $(now_ms)))
    ((wait_ms > 0)) && sleep "$(awk "BEGIN {print $wait_ms / 1000}")"
    return 0
}

fault_window=4
record() {
    local -A first=([acknowledged]=0 [refused]=0 [unknown]=0)
    local key
    for key in "${!marker_first[@]}"; do first[${marker_first[$key]}]=$((first[${marker_first[$key]}] + 1)); done
    faults+=("$1|$(converge "$2")")
    echo "  $1: of ${#marker_node[@]} markers, ${first[acknowledged]} acknowledged, ${first[refused]} refused, ${first[unknown]} of unknown outcome during the fault; every tier right ${faults[-1]##*|} ms after the heal"
}

echo "campaign: load at $rate writes/s for $duration s; a fault every $gap s; logs in $data/logs"

at 8
echo "fault 1: kill -9 DC_USA_0_VAL_1, restart after ${fault_window} s"
stop DC_USA_0_VAL_1 KILL
write_markers kill9
sleep "$fault_window"
start DC_USA_0_VAL_1
record "kill -9 shard DC_USA_0_VAL_1, restart" "$(now_ms)"

at $((8 + gap))
echo "fault 2: restart aggregator_ASIA_0 (SIGTERM, down ${fault_window} s)"
stop aggregator_ASIA_0 TERM
write_markers agg-restart
sleep "$fault_window"
start aggregator_ASIA_0
record "restart aggregator_ASIA_0" "$(now_ms)"

at $((8 + 2 * gap))
echo "fault 3: SIGSTOP DC_ASIA_0_VAL_1 for ${fault_window} s"
kill -STOP "${pid_of[DC_ASIA_0_VAL_1]}"
write_markers sigstop
sleep "$fault_window"
kill -CONT "${pid_of[DC_ASIA_0_VAL_1]}"
record "SIGSTOP shard DC_ASIA_0_VAL_1, SIGCONT" "$(now_ms)"

at $((8 + 3 * gap))
# Every link of ASIA_0, each way, one per replica: global-to-ASIA_0[@N], ASIA_0-to-global[@N].
mapfile -t asia_links < <(curl -sf "http://$control/links" | jq -r '.links[].name' |
    grep -E '^(global-to-ASIA_0|ASIA_0-to-global)(@[0-9]+)?$')
echo "fault 4: cut ASIA_0 off (${#asia_links[@]} WAN links) for ${fault_window} s"
check "ASIA_0 has a link each way per replica" test "${#asia_links[@]}" == 4
links_to() { # links_to cut|heal: every link of ASIA_0
    local link
    for link in "${asia_links[@]}"; do
        curl -sf -X POST "http://$control/links/$link/$1" > /dev/null || return 1
    done
}
check "the emulator cuts every link of ASIA_0" links_to cut
write_markers cut
sleep "$fault_window"
check "the emulator heals every link of ASIA_0" links_to heal
record "cut ASIA_0 off, heal" "$(now_ms)"

at $((8 + 4 * gap))
if ((disk_fault)); then
    echo "fault 5: fill $full_slot's disk (tmpfs) for ${fault_window} s"
    dd if=/dev/zero of="$tmpfs/filler" bs=1M 2>/dev/null || true
    write_markers disk-full
    # The log's last page may still take a few small records: write until the node refuses.
    for ((probe = 1; probe <= 500; probe++)); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 -X PATCH \
            "http://${addr_of[$full_slot]}/counter/campaign-disk-probe/write?op=INCREMENT")
        [[ $code == 200 ]] || break
    done
    health=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://${addr_of[$full_slot]}/healthz")
    echo "  while full: probe write $probe to $full_slot answered $code, /healthz $health"
    sleep "$fault_window"
    rm -f "$tmpfs/filler"
    record "fill $full_slot's disk, free it" "$(now_ms)"
fi

at $((8 + 5 * gap))
echo "fault 6: lose DC_USA_0_VAL_0's disk right after every aggregator_USA_0 replica restarted"
for name in ${aggregators_of[USA_0]}; do
    stop "$name" TERM
    start "$name"
done
stop DC_USA_0_VAL_0 KILL
rm -rf "${data:?}/DC_USA_0_VAL_0"
launch DC_USA_0_VAL_0
write_markers lost-disk
check "DC_USA_0_VAL_0 restores its slot" healthy DC_USA_0_VAL_0 60
record "lose a disk after its aggregator restarted" "$(now_ms)"

at $((8 + 6 * gap))
echo "fault 7: kill -9 DC_ASIA_0_VAL_1 in the middle of the restore of its lost disk"
stop DC_ASIA_0_VAL_1 KILL
rm -rf "${data:?}/DC_ASIA_0_VAL_1"
sources=(${aggregators_of[ASIA_0]} "${globals[@]}" DC_ASIA_0_VAL_0)
for name in "${sources[@]}"; do kill -STOP "${pid_of[$name]}"; done
launch DC_ASIA_0_VAL_1
restoring() {
    for _ in $(seq 1 100); do [[ "$(status_of "$1")" == restoring ]] && return 0; sleep 0.05; done
    return 1
}
check "DC_ASIA_0_VAL_1 waits for its stopped sources" restoring DC_ASIA_0_VAL_1
write_markers restore-crash
stop DC_ASIA_0_VAL_1 KILL
check "the restore is recorded on disk" test -e "$data/DC_ASIA_0_VAL_1/restore.pending"
launch DC_ASIA_0_VAL_1
check "DC_ASIA_0_VAL_1 resumes its restore" restoring DC_ASIA_0_VAL_1
for name in "${sources[@]}"; do kill -CONT "${pid_of[$name]}"; done
check "DC_ASIA_0_VAL_1 restores its slot" healthy DC_ASIA_0_VAL_1 60
record "kill -9 a shard in its restore" "$(now_ms)"

at $((8 + 7 * gap))
echo "fault 8: flip a byte of DC_USA_0_VAL_2's newest log segment"
stop DC_USA_0_VAL_2 KILL
victim_dir="$data/DC_USA_0_VAL_2"
segment=$(find "$victim_dir" -name 'wal-*.log' | sort | tail -n 1)
record_bytes=$("$bins/shard-node" check --data-dir "$victim_dir" | grep '^log segment' | tail -n 1 |
    sed -E 's/.* in ([0-9]+) bytes.*/\1/')
offset=$((record_bytes / 3))
byte=$(od -An -tu1 -j "$offset" -N1 "$segment" | tr -d ' ')
printf "$(printf '\\x%02x' $((byte ^ 0xff)))" | dd of="$segment" bs=1 seek="$offset" conv=notrunc 2>/dev/null
before=$(sha256sum < "$segment")
write_markers corrupt-log
launch DC_USA_0_VAL_2
refused() {
    for _ in $(seq 1 200); do
        kill -0 "${pid_of[DC_USA_0_VAL_2]}" 2>/dev/null || break
        sleep 0.05
    done
    # It names the segment and where the record holding the flipped byte starts.
    ! kill -0 "${pid_of[DC_USA_0_VAL_2]}" 2>/dev/null &&
        tail -n 1 "$data/logs/DC_USA_0_VAL_2.log" |
        grep -q "log segment $segment is corrupt at byte"
}
check "the node refuses the log (byte $offset flipped), naming the segment" refused
check "the segment is left as it was" test "$(sha256sum < "$segment")" == "$before"
check "shard-node check finds it" bash -c "! '$bins/shard-node' check --data-dir '$victim_dir' > /dev/null"
mv "$victim_dir" "$run/DC_USA_0_VAL_2.corrupt"
launch DC_USA_0_VAL_2
check "moved aside, the node restores its slot" healthy DC_USA_0_VAL_2 60
record "corrupt log, directory moved aside" "$(now_ms)"

at $((8 + 8 * gap))
echo "fault 9: lose DC_ASIA_0_VAL_1's disk while its peer DC_ASIA_0_VAL_0 restarts (both killed -9 at once)"
# One kill for both, peer first: DC_ASIA_0_VAL_1 has no time to log writes no peer can hold.
# DC_ASIA_0_VAL_0 is the peer: its log of DC_ASIA_0_VAL_1's writes reaches back to the start.
stop_at_once KILL DC_ASIA_0_VAL_0 DC_ASIA_0_VAL_1
rm -rf "${data:?}/DC_ASIA_0_VAL_1"
restore_log_from=$(($(wc -l < "$data/logs/DC_ASIA_0_VAL_1.log") + 1))
launch DC_ASIA_0_VAL_0
launch DC_ASIA_0_VAL_1
write_markers peer-restart
check "DC_ASIA_0_VAL_0 comes back" healthy DC_ASIA_0_VAL_0 60
check "DC_ASIA_0_VAL_1 restores its slot" healthy DC_ASIA_0_VAL_1 60
keys_whole() { # the restore vouches for every key: no refusal of keyed writes for the retention
    [[ ! -e "$data/DC_ASIA_0_VAL_1/keys.unknown-until" ]] &&
        ! tail -n "+$restore_log_from" "$data/logs/DC_ASIA_0_VAL_1.log" | grep -q "do not reach as far as the restore needs"
}
check "DC_ASIA_0_VAL_1 restores its idempotency keys whole (from its peer's log)" keys_whole
record "lose a disk while its peer restarts" "$(now_ms)"

at $((8 + 9 * gap))
echo "fault 10: a second node for DC_ASIA_0_VAL_0, at another address, for ${fault_window} s"
mapfile -d '' asia_cmd < "$run/DC_ASIA_0_VAL_1.cmdline"
for ((i = 0; i < ${#asia_cmd[@]}; i++)); do [[ ${asia_cmd[i]} == --config ]] && asia_config=${asia_cmd[i + 1]}; done
second_addr=127.0.0.1:17990
# Its HTTP address and, on the datacenter's `resp` line after it, its Redis port are its own;
# the rest of the topology is the cluster's.
sed "s|${addr_of[DC_ASIA_0_VAL_0]}|$second_addr|" "$asia_config" |
    awk -v own="$second_addr" '
        index($0, own) { moved = 1 }
        moved && /^resp = \[/ { sub(/"[^"]*"/, "\"127.0.0.1:17991\""); moved = 0 }
        { print }' > "$run/second.toml"
"$bins/shard-node" --config "$run/second.toml" --dc ASIA_0 --slot 0 --data-dir "$run/second-data" \
    --restore empty >> "$data/logs/second.log" 2>&1 &
second_pid=$!
restarted+=("$second_pid")
disown "$second_pid"
addr_of[second]=$second_addr
served_twice() {
    for _ in $(seq 1 300); do [[ "$(status_of "$1")" == "slot served twice" ]] && return 0; sleep 0.05; done
    return 1
}
check "the second node reports the conflict and takes no writes" served_twice second
for name in ${aggregators_of[ASIA_0]}; do
    check "$name reports the conflict" served_twice "$name"
done
write_markers second-node
sleep "$fault_window"
kill -KILL "$second_pid"
unset 'addr_of[second]'
record "a second node for a served slot" "$(now_ms)"

at $((8 + 10 * gap))
echo "fault 11: restart the global aggregator (SIGTERM, down ${fault_window} s)"
stop global TERM
write_markers global-restart
sleep "$fault_window"
start global
record "restart the global aggregator" "$(now_ms)"

at $((8 + 11 * gap))
echo "fault 12: flood DC_USA_0_VAL_0 with 3000 idle connections from 127.0.0.2 for ${fault_window} s"
"$bins/geoctl" --config "$topology" storm connections --target "${addr_of[DC_USA_0_VAL_0]}" \
    --connections 3000 --from 127.0.0.2 --duration-secs "$fault_window" > "$run/flood.out" 2>&1 &
flood_pid=$!
sleep 1
write_markers flood
fresh_reads() { # global reads without allow_partial are never stale (503) for 2 s
    local end=$(($(now_ms) + 2000)) code
    while (($(now_ms) < end)); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://$global/counter/campaign-flood" || true)
        [[ $code == 200 || $code == 404 ]] || { echo "  global read answered $code during the flood"; return 1; }
        sleep 0.1
    done
}
check "global reads stay fresh during the flood" fresh_reads
wait "$flood_pid" || true
echo "  $(cat "$run/flood.out")"
record "flood a shard node with connections" "$(now_ms)"

at $((8 + 12 * gap))
echo "fault 13: 4 loops of the worst-case top-K at the global aggregator for ${fault_window} s"
write_markers scan-storm
check "the global aggregator answers every read during the scans" \
    "$bins/geoctl" --config "$topology" storm scans --loops 4 --probe campaign-scan-storm \
    --duration-secs "$fault_window"
record "scan storm at the global aggregator" "$(now_ms)"

# Faults 14 and 15 read fault 1's markers (every tier held them whole since fault 1) at the
# replicas that stay up. served_by NAME REPLICA QUERY JQ: reads them at NAME every 150 ms until
# $run/outage.over exists; every answer must be 200 from replica REPLICA (body and
# `geocount-replica` header) and satisfy JQ. Prints how many reads it made.
probe_counter=campaign-kill9
served_by() {
    local name=$1 replica=$2 query=$3 test=$4 reads=0 code body header
    while [[ ! -e "$run/outage.over" ]]; do
        rm -f "$run/$name.headers"
        body=$(curl -s -m 1 -D "$run/$name.headers" -w '\n%{http_code}' \
            "http://${addr_of[$name]}/counter/$probe_counter$query" || true)
        code=${body##*$'\n'}
        body=${body%$'\n'*}
        header=$(tr -d '\r' < "$run/$name.headers" 2> /dev/null |
            awk -F': ' 'tolower($1) == "geocount-replica" {print $2}' || true)
        reads=$((reads + 1))
        if [[ $code != 200 || $header != "$replica" ]] ||
            ! jq -e --argjson r "$replica" "(.replica == \$r) and ($test)" <<< "$body" > /dev/null 2>&1; then
            echo "  read $reads at $name answered $code (geocount-replica: $header): $body"
            return 1
        fi
        sleep 0.15
    done
    echo "  $reads reads at $name, every one 200 from replica $replica"
}

# outage NAME FAULT CHECK...: kills NAME -9, runs each CHECK ("description|replica-name|
# replica|query|jq test") as served_by in the background while the markers of FAULT go
# through, restarts NAME after the fault window and records whether every read held.
outage() {
    local name=$1 fault=$2 spec what at replica query test i
    local -a pids=() whats=()
    shift 2
    rm -f "$run/outage.over"
    stop "$name" KILL
    for spec in "$@"; do
        IFS='|' read -r what at replica query test <<< "$spec"
        served_by "$at" "$replica" "$query" "$test" &
        pids+=("$!")
        whats+=("$what")
    done
    write_markers "$fault"
    sleep "$fault_window"
    touch "$run/outage.over"
    for i in "${!pids[@]}"; do check "${whats[i]}" wait "${pids[i]}"; done
    start "$name"
}

total=$((markers_per_dc * ${#datacenters[@]}))
usa_fresh='.complete == true and .datacenters.USA_0.staleness_ms != null'

at $((8 + 13 * gap))
echo "fault 14: kill -9 global replica 0 (global), restart after ${fault_window} s"
outage global global-kill9 \
    "global@1 answers complete and fresh throughout|global@1|1||.complete == true and .value == $total"
record "kill -9 global replica 0, restart" "$(now_ms)"

at $((8 + 14 * gap))
echo "fault 15: kill -9 aggregator_USA_0 (replica 0), restart after ${fault_window} s"
outage aggregator_USA_0 aggregator-kill9 \
    "aggregator_USA_0@1 answers complete throughout|aggregator_USA_0@1|1||.complete == true and .value == $markers_per_dc" \
    "global keeps USA_0 fresh throughout|global|0||$usa_fresh and .value == $total" \
    "global@1 keeps USA_0 fresh throughout|global@1|1||$usa_fresh and .value == $total"
record "kill -9 aggregator_USA_0 (replica 0), restart" "$(now_ms)"

wait "$load_waiter"
load_status=$(cat "$run/load.status" 2>/dev/null || echo "unknown")
load_pid=""
echo "the load is over: the writers settle their writes and check their counters"
touch "$run/writers.stop"
writers_status=0
wait "$writers_pid" || writers_status=$?
writers_pid=""

# Every process still serving?
serving=0
total=0
for name in "${!addr_of[@]}"; do
    total=$((total + 1))
    if curl -sf -m 2 "http://${addr_of[$name]}/healthz" > /dev/null; then
        serving=$((serving + 1))
    else
        echo "not serving: $name (${addr_of[$name]})"
    fi
done

# The markers, read back at the global aggregator after everything healed.
marker_lost=0
marker_doubled=0
marker_acked_total=0
for fault in kill9 agg-restart sigstop cut disk-full lost-disk restore-crash corrupt-log \
    peer-restart second-node global-restart flood scan-storm global-kill9 aggregator-kill9; do
    [[ $fault == disk-full ]] && ((!disk_fault)) && continue
    read -r expected maybe < "$run/markers-campaign-$fault"
    marker_acked_total=$((marker_acked_total + expected))
    got=$(value_of "http://$global/counter/campaign-$fault?allow_partial=true")
    [[ "$got" =~ ^-?[0-9]+$ ]] || got=0
    ((got < expected)) && marker_lost=$((marker_lost + expected - got))
    ((got > expected + maybe)) && marker_doubled=$((marker_doubled + got - expected - maybe))
done

json="$run/load.json"
acked=$(jq '.writes.acknowledged' "$json")
refused=$(jq '.writes.refused' "$json")
unknown=$(jq '.writes.unknown' "$json")
load_lost=$(jq '[.exactness.mismatches[] | select(.observed != null and .unknown_writes == 0) | .expected - .observed | select(. > 0)] | add // 0' "$json")
load_doubled=$(jq '[.exactness.mismatches[] | select(.observed != null and .unknown_writes == 0) | .observed - .expected | select(. > 0)] | add // 0' "$json")
unexplained=$(jq '.exactness.mismatches | length' "$json")

# The bounded and Redis-protocol writers' figures, and their own checks.
writers="$run/writers.json"
writer_checks=()
if [[ $writers_status != 0 || ! -s $writers ]]; then
    writer_checks+=("the writers exited $writers_status (see $run/writers.log)")
    echo '{"bounded": {}, "resp": {}}' > "$writers"
fi
w() { jq -r "$1 // 0" "$writers"; }
[[ $(w .bounded.reached) == true ]] || writer_checks+=("a bounded counter never reached its bound")
[[ $(w .bounded.unsettled) == 0 ]] || writer_checks+=("$(w .bounded.unsettled) bounded writes never answered for good")
[[ $(w .bounded.converged) == true ]] || writer_checks+=("a bounded counter's tiers never agreed with its slots")
[[ $(w .resp.converged) == true ]] || writer_checks+=("a Redis-protocol counter's global total never agreed with its slots")
bounded_acked=$(w .bounded.acknowledged)
resp_acked=$(w .resp.acknowledged)
exceeded=$(w .bounded.exceeded)
lost=$((load_lost + marker_lost + $(w .bounded.lost) + $(w .resp.lost)))
doubled=$((load_doubled + marker_doubled + $(w .bounded.doubled) + $(w .resp.doubled)))
worst=0
worst_fault=""
never=0
for entry in "${faults[@]}"; do
    ms=${entry##*|}
    if [[ $ms == never ]]; then never=1; worst_fault="${entry%|*} (never converged)"; continue; fi
    ((ms > worst)) && { worst=$ms; ((never)) || worst_fault=${entry%|*}; }
done

echo
echo "FAULT                                        TIERS RIGHT AGAIN AFTER THE HEAL"
for entry in "${faults[@]}"; do
    printf '%-44s %s ms\n' "${entry%|*}" "${entry##*|}"
done
echo
printf '%-44s %s\n' "writes acknowledged" "$((acked + marker_acked_total + bounded_acked + resp_acked)) ($acked load, $marker_acked_total markers, $bounded_acked bounded, $resp_acked RESP); $refused load writes refused, $unknown unknown outcome"
printf '%-44s %s\n' "bounded writes" "$(w .bounded.writes): $bounded_acked acknowledged, $(w .bounded.at_bound) refused at the bound, $(w .bounded.unknown) of unknown outcome never acknowledged on a retry"
jq -r '.bounded.counters[]? | "  \(.id) (\(.bound) \(.limit)): slots sum to \(.sums.slots), acknowledged \(.acknowledged) + \(.unknown) of unknown outcome; first refused at the bound after \(.first_at_bound_s // "-") s"' "$writers"
printf '%-44s %s\n' "RESP increments" "$(w .resp.commands) in $(w .resp.pipelines) pipelines: $resp_acked acknowledged, $(w .resp.unknown) of unknown outcome ($(w .resp.lost_pipelines) pipelines lost mid-way, $(w .resp.loading_pipelines) cut by LOADING), refused $(jq -c '.resp.errors // {}' "$writers")"
printf '%-44s %s\n' "writes lost (must be 0)" "$lost (load $load_lost, markers $marker_lost, bounded $(w .bounded.lost), RESP $(w .resp.lost))"
printf '%-44s %s\n' "writes doubled (must be 0)" "$doubled (load $load_doubled, markers $marker_doubled, bounded $(w .bounded.doubled), RESP $(w .resp.doubled))"
printf '%-44s %s\n' "quota exceeded (must be 0)" "$exceeded (the parts read $(w .bounded.samples) times)"
printf '%-44s %s\n' "counters unexplained by the load's check" "$unexplained (geoctl load exited $load_status)"
printf '%-44s %s\n' "longest time a tier stayed wrong after a heal" "$worst ms ($worst_fault)"
printf '%-44s %s\n' "every process still serving" "$([[ $serving == "$total" ]] && echo yes || echo no) ($serving of $total)"
printf '%-44s %s\n' "every fault's own checks hold" "$( ((${#checks_failed[@]} == 0)) && echo yes || echo "no: ${checks_failed[*]}")"
printf '%-44s %s\n' "the writers' own checks hold" "$( ((${#writer_checks[@]} == 0)) && echo yes || (IFS=';'; echo "no: ${writer_checks[*]}"))"
echo
echo "lost = $lost, doubled = $doubled, quota exceeded = $exceeded"

if ((lost != 0 || doubled != 0 || exceeded != 0 || unexplained != 0 || never || serving != total)) ||
    ((${#checks_failed[@]} != 0 || ${#writer_checks[@]} != 0)) ||
    [[ $load_status != 0 ]]; then
    echo "FAILED: see $run/load.out, $run/writers.log and $data/logs"
    exit 1
fi
