#!/usr/bin/env bash
# make demo: slurm-llm end to end on this one machine, as root.
#
# Builds and installs the project, installs missing Debian packages, brings up the local
# 3-node Slurm cluster (scripts/slurm-cluster.sh) and a private nginx serving the shipped
# site on 127.0.0.1:8080 (fast) and :8081 (reasoning), runs llm-upstreams watch and the
# front door (llm-upstreams front, one URL for both tiers on 127.0.0.1:8090), submits
# both tiers with the fake llama.cpp, waits until nginx answers a chat completion on both
# ports and the front door answers both models on its one URL; two users made for the demo
# (useradd, and given a Slurm account each with sacctmgr; removed at the end) make keys with
# munge (the front door asks slurmdbd for their accounts), one floods the reasoning tier while the
# other's request goes next (fair share), and `llm-upstreams usage` shows both; then provokes two
# preemptions with high-priority "VASP" jobs: a one-node job on the fast tier's node while
# other nodes have room (the keeper releases the requeued job and the tier is back on
# another node in seconds; clients of the front door meanwhile wait instead of getting a
# 503: none fails); then 12 clients load the fast tier
# through nginx and the keeper grows it to three replicas on the idle nodes, a one-node
# VASP job takes one replica's node (that replica is gone, the others serve on), and the
# tier shrinks back to one when the load stops; then a job with a time limit taking every
# node (nginx's 503 says why and when the tiers are expected back, and they come back by
# themselves when it ends); last, the reasoning tier as an elastic tier (three one-node
# member jobs): a one-node VASP job takes one member, the tier serves on the other two, and
# grows back when the VASP job ends. It stops everything it started (the cluster too,
# unless it was already up). It brings the cluster up in netns mode (each node its own addresses,
# so replicas on different nodes can use the same port); on a loopback cluster that was
# already up, the replicas step is skipped. The keeper (llm-upstreams keep, as a loop) submits the tiers
# and releases requeued jobs, as it does on the controller; `llm-upstreams report` shows
# the availability record at the end.
#
#   scripts/demo.sh [--keep] [--no-preempt] [--from-source]
#     --keep          leave the tiers, nginx and the watcher running at the end
#     --no-preempt    stop after the tiers answer (no VASP job)
#     --from-source   make install under /usr/local instead of the packages
#
# It runs what an admin installs: the .deb packages (make package; dpkg -i
# slurm-llm-node and slurm-llm-controller: /usr/bin, /usr/share/slurm-llm), on a machine with
# dpkg; elsewhere, or with --from-source, `make install` under /usr/local.
#
# Every answer it prints is checked: an empty or failed answer stops the demo.
#
# Environment: DEMO_DIR (default /run/slurm-llm-demo) holds nginx's and the watcher's files.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly DEMO_DIR=${DEMO_DIR:-/run/slurm-llm-demo}
readonly STATE=/var/lib/slurm-llm
readonly EP_DIR=$STATE/endpoints
keep=0 preempt=1 from=package
command -v dpkg >/dev/null || from=source
for a in "$@"; do
	case $a in
	--keep) keep=1 ;;
	--no-preempt) preempt=0 ;;
	--from-source) from=source ;;
	*) echo "usage: demo.sh [--keep] [--no-preempt] [--from-source]" >&2; exit 2 ;;
	esac
done
if [ $from = package ]; then
	PREFIX=/usr
	# The packaged programs, not a /usr/local/bin left by an earlier make install. Slurm's
	# clients from SLURM_CLIENT_PATH first when set (make e2e-slurm24: the wrappers that run
	# the Slurm 24.11 root's commands, which the cluster's daemons speak).
	export PATH=${SLURM_CLIENT_PATH:+$SLURM_CLIENT_PATH:}/usr/bin:/usr/sbin:$PATH
else
	PREFIX=/usr/local
fi
readonly PREFIX SHARE=$PREFIX/share/slurm-llm

t0=$(date +%s)
say() { printf '\n\033[1m[demo %3ss] %s\033[0m\n' "$(($(date +%s) - t0))" "$*"; }
info() { printf '           %s\n' "$*"; }
die() {
	printf '\n[demo] FAILED: %s\n' "$*" >&2
	if command -v squeue >/dev/null && squeue >/dev/null 2>&1; then
		squeue -o '%.8i %.14j %.10P %.10T %.20r %N' | sed 's/^/             /' >&2
	fi
	exit 1
}

# wait_for DESCRIPTION SECONDS CMD...: poll CMD every half second until it succeeds.
wait_for() {
	local what=$1 secs=$2 deadline
	shift 2
	deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${secs}s waiting for $what"
		sleep 0.5
	done
}

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts Slurm and nginx)"

# ---------------------------------------------------------------- packages, build, install
say "checking packages (slurm-wlm slurmdbd mariadb-server munge nginx curl)"
missing=()
for p in slurmctld:slurm-wlm slurmdbd:slurmdbd mariadbd:mariadb-server munged:munge nginx:nginx curl:curl ip:iproute2 nft:nftables; do
	command -v "${p%%:*}" >/dev/null || [ -x "/usr/sbin/${p%%:*}" ] || missing+=("${p#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
	info "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ $from = package ]; then
	say "building the packages (make package) and installing them (dpkg -i)"
	rm -rf "$DEMO_DIR/dist"
	scripts/package.sh --out "$DEMO_DIR/dist" deb >/dev/null || die "make package failed"
	dpkg -i "$DEMO_DIR"/dist/slurm-llm-node_*.deb "$DEMO_DIR"/dist/slurm-llm-controller_*.deb >"$DEMO_DIR/dpkg.log" 2>&1 ||
		die "dpkg -i: $(tail -5 "$DEMO_DIR/dpkg.log")"
	info "$(dpkg-query -W -f '${Package} ${Version}, ' slurm-llm-node slurm-llm-controller)from $DEMO_DIR/dist"
else
	say "building and installing slurm-llm under $PREFIX"
	make -s build
	make -s install PREFIX=$PREFIX >/dev/null
fi
info "$(command -v llm-supervisor): $(llm-supervisor --version), $(command -v llm-upstreams): $(llm-upstreams --version)"

# ---------------------------------------------------------------- cluster and nginx
cluster_was_up=0
scripts/slurm-cluster.sh status >/dev/null 2>&1 && sinfo -h >/dev/null 2>&1 && cluster_was_up=1
mode=--netns
[ $cluster_was_up = 1 ] && mode="" # keep the mode of the cluster that is up
say "bringing up the local 3-node Slurm cluster"
scripts/slurm-cluster.sh up $mode | sed 's/^/           /'
netns=0
cluster_status=$(scripts/slurm-cluster.sh status 2>&1 || true)
[[ $cluster_status == *"mode: netns"* ]] && netns=1

mkdir -p "$EP_DIR" "$STATE/logs" "$STATE/models" "$DEMO_DIR/upstreams" "$DEMO_DIR/tmp"
# The fake llama.cpp reads no weights, but an elastic member checks that the model it would
# lead with is readable on its node (etc/local/*.toml name these files).
touch "$STATE/models/fast-tiny.gguf" "$STATE/models/reasoning-tiny.gguf"
rm -f "$EP_DIR"/*.json
rm -rf "${DEMO_DIR:?}/state"
mkdir -p "$DEMO_DIR/state" # the front door keeps its usage database there and does not make the directory

jobs_started=() demo_users=()
watch_pid="" keeper_pid="" front_pid=""
cleanup() {
	set +e
	if [ $keep = 1 ]; then
		say "--keep: leaving the tiers (${jobs_started[*]}), nginx and the watcher running"
		return
	fi
	say "cleaning up"
	[ -n "$keeper_pid" ] && kill "$keeper_pid" 2>/dev/null && wait "$keeper_pid" 2>/dev/null
	for j in "${jobs_started[@]}"; do scancel "$j" 2>/dev/null; done
	rm -f "$DEMO_DIR/load.on"
	for name in vasp-demo llm-fast-extra llm-reasoning; do # scancel --name takes one name
		scancel --name="$name" 2>/dev/null
	done
	local deadline=$(($(date +%s) + 60))
	while [ -n "$(squeue -h -n llm-fast,llm-fast-extra,llm-reasoning,vasp-demo 2>/dev/null)" ] && [ "$(date +%s)" -lt $deadline ]; do
		sleep 1
	done
	[ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null && wait "$watch_pid" 2>/dev/null
	[ -n "$front_pid" ] && kill "$front_pid" 2>/dev/null && wait "$front_pid" 2>/dev/null
	[ -n "${prom_pid:-}" ] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
	for u in "${demo_users[@]}"; do
		sacctmgr -i delete user name="$u" >/dev/null 2>&1
		userdel "$u" 2>/dev/null
	done
	[ -f "$DEMO_DIR/nginx.pid" ] && nginx -c "$DEMO_DIR/nginx.conf" -s quit 2>/dev/null
	if [ $cluster_was_up = 0 ]; then scripts/slurm-cluster.sh down >/dev/null; fi
	info "done; logs are in $STATE/logs and $DEMO_DIR"
}
trap cleanup EXIT
trap "exit 143" TERM INT

say "starting a private nginx with the shipped site (127.0.0.1:8080 fast, :8081 reasoning)"
sed "s#/etc/nginx/slurm-llm/#$DEMO_DIR/upstreams/#g" "$SHARE/etc/nginx/slurm-llm.conf" >"$DEMO_DIR/site.conf"
cat >"$DEMO_DIR/nginx.conf" <<EOF
worker_processes 1;
pid $DEMO_DIR/nginx.pid;
error_log $DEMO_DIR/nginx-error.log;
events { worker_connections 256; }
http {
    access_log $DEMO_DIR/nginx-access.log;
    client_body_temp_path $DEMO_DIR/tmp/body;
    proxy_temp_path $DEMO_DIR/tmp/proxy;
    fastcgi_temp_path $DEMO_DIR/tmp/fastcgi;
    uwsgi_temp_path $DEMO_DIR/tmp/uwsgi;
    scgi_temp_path $DEMO_DIR/tmp/scgi;
    include $DEMO_DIR/site.conf;
}
EOF
# upstreams.toml RELOAD: the watcher's config; the first sync runs before nginx does.
upstreams_conf() {
	cat <<EOF
endpoint_dir = "$EP_DIR"
output_dir = "$DEMO_DIR/upstreams"
lock_file = "$DEMO_DIR/upstreams.lock"
keeper_config = "$DEMO_DIR/keeper.toml"
state_dir = "$DEMO_DIR/state"
# The demo's tier jobs run as root (submit_as = "") on the test cluster's 127.0.0.1.
allowed_owners = ["root"]
allowed_networks = ["127.0.0.0/8", "10.77.0.0/16"]   # loopback mode, and the netns mode's Ethernet network
coalesce = "50ms"
sweep_interval = "2s"
[tiers.fast]
[tiers.reasoning]
backup = "fast"
[nginx]
test = ["nginx", "-t", "-q", "-c", "$DEMO_DIR/nginx.conf"]
reload = $1
[metrics]
listen = "127.0.0.1:9465"
[front]
listen = "127.0.0.1:8090"
metrics_listen = "127.0.0.1:9467"
access_log = "$DEMO_DIR/front-access.log"
[front.aliases]
# The fake names a model as llama-server does: by its -m path. Clients say fast-tiny.
fast-tiny = "/var/lib/slurm-llm/models/fast-tiny.gguf"
[front.tiers.reasoning]
models = ["OR1-Behemoth"]
prefix = "/reasoning"   # the seed's URL of the tier, as shipped
[front.auth]
slurm_accounts = true    # a key counts under its user's Slurm account (sacctmgr; the cluster's slurmdbd)
EOF
}
upstreams_conf '["true"]' >"$DEMO_DIR/upstreams-first.toml"
upstreams_conf "[\"nginx\", \"-s\", \"reload\", \"-c\", \"$DEMO_DIR/nginx.conf\"]" >"$DEMO_DIR/upstreams.toml"
llm-upstreams sync --config "$DEMO_DIR/upstreams-first.toml" 2>>"$DEMO_DIR/upstreams.log" ||
	die "first llm-upstreams sync failed: see $DEMO_DIR/upstreams.log"
if [ -f "$DEMO_DIR/nginx.pid" ] && kill -0 "$(cat "$DEMO_DIR/nginx.pid")" 2>/dev/null; then
	nginx -c "$DEMO_DIR/nginx.conf" -s reload
else
	nginx -c "$DEMO_DIR/nginx.conf"
fi
llm-upstreams watch --config "$DEMO_DIR/upstreams.toml" 2>>"$DEMO_DIR/upstreams.log" &
watch_pid=$!
info "nginx up; llm-upstreams watch (pid $watch_pid) logs to $DEMO_DIR/upstreams.log"
llm-upstreams front --config "$DEMO_DIR/upstreams.toml" 2>>"$DEMO_DIR/front.log" &
front_pid=$!
info "the front door, one URL for both tiers: llm-upstreams front (pid $front_pid) on 127.0.0.1:8090, logs to $DEMO_DIR/front.log"
info "before any tier runs, nginx answers:"
curl -s -i http://127.0.0.1:8080/v1/models | sed -n '1p;/^Retry-After/p;$p' | sed 's/^/             /'

# ---------------------------------------------------------------- the tiers
say "llm-upstreams keep submits both tiers (fake llama.cpp): fast on 1 node, reasoning on 3"
cat >"$DEMO_DIR/keeper.toml" <<EOF
state_dir = "$DEMO_DIR/keeper"
submit_as = ""
endpoint_dir = "$EP_DIR"
scale_interval = "1s"
[metrics]
listen = "127.0.0.1:9466"
[tiers.fast]
job_name = "llm-fast"
script = "$SHARE/sbatch/local/fast.sbatch"
[tiers.fast.replicas]   # grows onto idle nodes under load (the replicas step)
min = 1
max = $((netns == 1 ? 3 : 1))
grow_after = "2s"
idle_after = "8s"
[tiers.reasoning]
job_name = "llm-reasoning"
script = "$SHARE/sbatch/local/reasoning.sbatch"
EOF
rm -rf "${DEMO_DIR:?}/keeper"
llm-upstreams keep --interval 30s --config "$DEMO_DIR/keeper.toml" 2>>"$DEMO_DIR/keeper.log" &
keeper_pid=$!
info "llm-upstreams keep (pid $keeper_pid) logs to $DEMO_DIR/keeper.log"
# Prometheus (Debian's package), with the shipped scrape jobs and alert rules, scrapes the three
# listeners every 2 s: the demo ends with the dashboard's main queries evaluated on it.
prom_pid=""
if command -v prometheus >/dev/null; then
	rm -rf "${DEMO_DIR:?}/prometheus"
	sed -e 's/_interval: 15s/_interval: 2s/' "$SHARE/etc/prometheus/prometheus.yml" >"$DEMO_DIR/prometheus.yml"
	prometheus --config.file="$DEMO_DIR/prometheus.yml" --storage.tsdb.path="$DEMO_DIR/prometheus" \
		--web.listen-address=127.0.0.1:9468 2>>"$DEMO_DIR/prometheus.log" &
	prom_pid=$!
	info "Prometheus (pid $prom_pid) on 127.0.0.1:9468 scrapes watch (:9465), the front door (:9467) and the keeper (:9466)"
fi
has_job() { [ -n "$(squeue -h -n "llm-$1" -o %i)" ]; }
for t in fast reasoning; do
	wait_for "the keeper to submit the $t tier" 30 has_job "$t"
	j=$(squeue -h -n "llm-$t" -o %i | head -n1)
	jobs_started+=("$j")
	info "$t: job $j"
done

answer() { # answer PORT[/PREFIX] [MODEL]: one chat completion; prints its content, or stops the demo
	local body content
	body=$(curl -sf --max-time 120 "http://127.0.0.1:$1/v1/chat/completions" -H 'Content-Type: application/json' \
		-d "{\"model\":\"${2:-}\",\"messages\":[{\"role\":\"user\",\"content\":\"Say hello.\"}],\"max_tokens\":8}") ||
		die "no answer on :$1${2:+ for $2}"
	content=$(sed -n 's/.*"content":"\([^"]*\)".*/\1/p' <<<"$body")
	[ -n "$content" ] || die "an empty answer on :$1${2:+ for $2}: $body"
	printf '%s' "$content"
}
chat_ok() { # chat_ok PORT: a chat completion on PORT is answered (200)
	curl -sf --max-time 30 -o /dev/null "http://127.0.0.1:$1/v1/chat/completions" -H 'Content-Type: application/json' \
		-d '{"model":"","messages":[{"role":"user","content":"Say hello."}],"max_tokens":4}'
}
served_by() { # served_by PORT TIER: nginx answers on PORT from TIER itself (not a backup)
	curl -sf --max-time 5 -o /dev/null -D - "http://127.0.0.1:$1/v1/models" | grep -qi "^X-LLM-Tier: $2"
}
say "waiting until nginx answers a chat completion on both ports, each from its own tier"
wait_for "the fast tier through nginx :8080" 120 served_by 8080 fast
wait_for "the reasoning tier through nginx :8081" 120 served_by 8081 reasoning
for port in 8080 8081; do
	a=$(answer $port)
	info ":$port → $a"
done
say "the front door: one URL (:8090) for both tiers, routed by the request's model"
front_tier() { # front_tier MODEL: the tier the front door's /v1/models names for MODEL
	curl -sf --max-time 5 http://127.0.0.1:8090/v1/models |
		sed 's/"id":/\n"id":/g' | grep -F "\"id\":\"$1\"" | sed -n 's/.*"tier":"\([^"]*\)".*/\1/p'
}
lists_both() { [ "$(front_tier OR1-Behemoth)" = reasoning ] && [ "$(front_tier /var/lib/slurm-llm/models/fast-tiny.gguf)" = fast ]; }
wait_for "the front door to list both tiers' models" 60 lists_both
info "GET :8090/v1/models: /var/lib/slurm-llm/models/fast-tiny.gguf (fast), OR1-Behemoth (reasoning); fast-tiny is an alias"
tier_header() { # tier_header MODEL [PREFIX]: the X-LLM-Tier of the front door's answer for MODEL (at a tier's PREFIX)
	curl -s -o /dev/null -D - --max-time 20 "http://127.0.0.1:8090${2:-}/v1/chat/completions" -H 'Content-Type: application/json' \
		-d "{\"model\":\"$1\",\"messages\":[],\"max_tokens\":1}" | sed -n 's/^X-Llm-Tier: \([a-z]*\).*/\1/ip'
}
for m in fast-tiny OR1-Behemoth; do
	a=$(answer 8090 "$m")
	info ":8090 $m → $a (X-LLM-Tier: $(tier_header "$m"))"
done
# The seed's URL of the reasoning tier (https://CONTROLLER/reasoning/v1/..., tailscale serve's
# /reasoning mount) keeps working with tailscale serve pointing at the front door alone.
a=$(answer 8090/reasoning OR1-Behemoth)
t=$(tier_header OR1-Behemoth /reasoning)
[ "$t" = reasoning ] || die "the seed's URL :8090/reasoning/v1/chat/completions was answered by tier '$t', not reasoning"
info ":8090/reasoning/v1/chat/completions (the seed's URL; [front.tiers.reasoning] prefix) → $a (X-LLM-Tier: $t)"
say "status"
llm-supervisor status --endpoint-dir "$EP_DIR" | sed 's/^/           /'
llm-upstreams status --config "$DEMO_DIR/upstreams.toml" 2>/dev/null | sed 's/^/           /'
say "llm-upstreams doctor: what this controller needs, checked (README: Install on a real cluster)"
# The demo's controller as an admin would check it: its nginx (the private one [nginx] test
# names), munge, Slurm and accounting, the directories, the installed units. Every line ok
# or WARN, else the demo stops with the fixes doctor names.
doctor_rc=0
llm-upstreams doctor --config "$DEMO_DIR/upstreams.toml" >"$DEMO_DIR/doctor.out" 2>&1 || doctor_rc=$?
sed 's/^/           /' "$DEMO_DIR/doctor.out"
[ $doctor_rc = 0 ] || die "llm-upstreams doctor found this controller not ready (exit $doctor_rc): $(grep -h FAIL "$DEMO_DIR/doctor.out" | head -5)"

# ---------------------------------------------------------------- who uses it
say "who uses it: keys made with munge, a fair share of a busy tier, usage per user"
declare -A key account
# The cluster's two Slurm accounts (slurmdbd; scripts/slurm-cluster.sh made them): one each.
IFS=, read -r account[sllm-demo-alice] account[sllm-demo-bob] < <(sed -n 's/^accounts=//p' /run/slurm-llm-cluster/cluster.env)
for u in sllm-demo-alice sllm-demo-bob; do
	sacctmgr -i delete user name="$u" >/dev/null 2>&1 || true # leftovers of a killed demo
	userdel "$u" 2>/dev/null || true
	useradd --system --no-create-home --shell /usr/sbin/nologin "$u" || die "useradd $u"
	demo_users+=("$u")
	sacctmgr -i add user "$u" account="${account[$u]}" >"$DEMO_DIR/sacctmgr.out" 2>&1 ||
		die "sacctmgr add user $u account=${account[$u]}: $(cat "$DEMO_DIR/sacctmgr.out")"
	out=$(runuser -u "$u" -- "$(command -v llm-upstreams)" key create --url http://127.0.0.1:8090 --note demo 2>"$DEMO_DIR/key.err") ||
		die "llm-upstreams key create as $u: $(cat "$DEMO_DIR/key.err")"
	key[$u]=$(head -n1 <<<"$out")
	info "$u (a user made for the demo; sacctmgr add user $u account=${account[$u]}) runs llm-upstreams key create:" \
		"munge proves its uid to the front door, which asks sacctmgr for the user's account;" \
		"it answers a key, ${key[$u]:0:14}… (shown once), $(grep '^id ' <<<"$out")"
done
ask() { # ask USER: one OR1-Behemoth chat completion with USER's key; prints the seconds it took, or stops the demo
	curl -sf -o /dev/null -w '%{time_total}\n' --max-time 120 http://127.0.0.1:8090/v1/chat/completions \
		-H "Authorization: Bearer ${key[$1]}" -H 'Content-Type: application/json' \
		-d '{"model":"OR1-Behemoth","messages":[{"role":"user","content":"Say hello."}],"max_tokens":16}' || die "no answer for $1"
}
alone=$(printf '%.2f' "$(ask sllm-demo-alice)")
: >"$DEMO_DIR/flood.times"
flood=()
for _ in $(seq 12); do
	ask sllm-demo-alice >>"$DEMO_DIR/flood.times" &
	flood+=($!)
done
flooding() { # llm-upstreams status shows 8 or more of alice's requests waiting in the front door
	flood_status=$(llm-upstreams status --config "$DEMO_DIR/upstreams.toml" 2>/dev/null) || return 1
	awk '$1 == "reasoning" && $2 == "sllm-demo-alice" && $4 >= 8 { ok = 1 } END { exit !ok }' <<<"$flood_status"
}
wait_for "alice's requests waiting in the front door" 20 flooding
info "sllm-demo-alice sends 12 requests at once to OR1-Behemoth (one slot; one answer alone takes ${alone} s); llm-upstreams status:"
sed -n '/^FRONT DOOR/,/^$/p' <<<"$flood_status" | sed 's/^/             /'
bob=$(printf '%.2f' "$(ask sllm-demo-bob)")
wait "${flood[@]}"
behind=$(awk -v t="$alone" '$1 == "reasoning" && $2 == "sllm-demo-alice" { printf "%d of hers waiting: about %.1f s", $4, $4 * t }' <<<"$flood_status")
info "sllm-demo-bob sends one meanwhile: answered in ${bob} s (fair share: the user with the fewest requests on a head" \
	"goes next; in arrival order he would have waited behind the $behind); hers took up to $(sort -n "$DEMO_DIR/flood.times" | tail -n1 | xargs printf '%.2f') s"
counted() { # llm-upstreams usage has every request of the two (the database is written in batches, at most 1 s apart)
	used=$(llm-upstreams usage --since 1h --config "$DEMO_DIR/upstreams.toml" 2>/dev/null) || return 1
	awk '$1 == "sllm-demo-alice" && $3 == 13 { a = 1 } $1 == "sllm-demo-bob" && $3 == 1 { b = 1 } END { exit !(a && b) }' <<<"$used"
}
wait_for "the usage database to have both users' requests" 10 counted
info "llm-upstreams usage --since 1h (usage.db in state_dir, written off the request path; '-' is anonymous):"
sed 's/^/             /' <<<"$used"

# ---------------------------------------------------------------- preemption
if [ $preempt = 0 ]; then
	say "demo finished in $(($(date +%s) - t0)) s (--no-preempt)"
	exit 0
fi
node_of() { squeue -h -j "$1" -o %N; }
ms() { date +%s%3N; }
since() { local d=$(($(ms) - $1)); printf '%d.%d' $((d / 1000)) $((d % 1000 / 100)); } # since MS: seconds, one decimal
restarts() { scontrol -o show job "$1" | grep -o 'Restarts=[0-9]*' | cut -d= -f2; }
fast_job=${jobs_started[0]} reasoning_job=${jobs_started[1]}
fast_node=$(node_of "$fast_job")
say "partial preemption: a one-CPU VASP job on $fast_node, the fast tier's node; the other nodes have room"
log_mark=$(wc -l <"$DEMO_DIR/upstreams.log")
# Meanwhile 10 requests/s go to the front door, each on a new connection, as curl does.
touch "$DEMO_DIR/front-load.on"
: >"$DEMO_DIR/front-load.codes"
(while [ -f "$DEMO_DIR/front-load.on" ]; do
	curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 120 http://127.0.0.1:8090/v1/chat/completions \
		-H 'Content-Type: application/json' -d '{"model":"fast-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4}' \
		>>"$DEMO_DIR/front-load.codes" &
	sleep 0.1
done; wait) &
front_load=$!
vasp1=$(sbatch --parsable -p gpu_vasp -N1 -n1 -w "$fast_node" --job-name=vasp-demo -o "$DEMO_DIR/vasp-%j.out" --wrap 'sleep 600')
info "vasp job $vasp1 (gpu_vasp, PriorityTier 10): Slurm preempts the smallest gpu_ai job there, fast"
t_pre=$(ms)
requeued() { [ "$(restarts "$fast_job")" = 1 ]; }
wait_for "the fast tier to be requeued" 90 requeued
t_req=$(ms)
info "fast requeued $(since "$t_pre") s after the VASP job was submitted; nginx says meanwhile:"
curl -s -i --max-time 5 http://127.0.0.1:8080/v1/models | sed -n '1p;/^Retry-After/p;$p' | sed 's/^/             /'
back_elsewhere() { served_by 8080 fast && [ "$(node_of "$fast_job")" != "$fast_node" ]; }
wait_for "the fast tier back on another node" 150 back_elsewhere
info "fast is back on $(node_of "$fast_job") $(since "$t_req") s after its requeue" \
	"(Slurm alone holds a requeued job ~120 s); the keeper said:"
grep "released requeued job" "$DEMO_DIR/keeper.log" | tail -n1 | sed 's/^/             /'
info "and llm-upstreams watch saw the fast tier go (its 503 said each reason in turn):"
tail -n +"$((log_mark + 1))" "$DEMO_DIR/upstreams.log" | grep -E 'tier state: tier=fast|tier back: tier=fast' |
	sed -e 's/ llm-upstreams: / /' -e 's/^/             /'
a=$(answer 8080)
info ":8080 → $a; reasoning was not touched: $(squeue -h -j "$reasoning_job" -o '%T on %N')"
sleep 1
rm -f "$DEMO_DIR/front-load.on"
wait "$front_load"
front_total=$(wc -l <"$DEMO_DIR/front-load.codes")
front_failed=$(grep -vc '^200 ' "$DEMO_DIR/front-load.codes" || true)
front_longest=$(sort -k2 -n "$DEMO_DIR/front-load.codes" | tail -n1 | cut -d' ' -f2)
info "through the front door meanwhile: $front_total requests at 10/s, $front_failed failed; the longest waited ${front_longest} s (held while the tier moved)"
[ "$front_failed" = 0 ] || die "requests through the front door failed during the partial preemption: $(grep -v '^200 ' "$DEMO_DIR/front-load.codes" | head -n3 | tr '\n' ' ')"
scancel "$vasp1"
gone() { [ -z "$(squeue -h -j "$1" 2>/dev/null)" ]; }
running() { [ "$(squeue -h -j "$1" -o %T)" = RUNNING ]; }
wait_for "the VASP job to end" 90 gone "$vasp1"

# ---------------------------------------------------------------- replicas
replicas() { # replicas STATE: the keeper's count of the fast tier's replicas in STATE
	curl -s --max-time 2 http://127.0.0.1:9466/metrics |
		sed -n "s/^llm_keeper_replicas{state=\"$1\",tier=\"fast\"} //p"
}
routed_is() { [ "$(replicas routed)" = "$1" ] && [ "$(replicas running)" = "$1" ]; }
extras() { squeue -h -n llm-fast-extra -t running -o '%i %N'; }
gone_extras() { [ -z "$(squeue -h -n llm-fast-extra 2>/dev/null)" ]; }
if [ $netns = 0 ]; then
	say "replicas: skipped (a loopback cluster was up: every node is 127.0.0.1, so replicas would share one port)"
else
	say "replicas: 12 clients stream completions through nginx :8080; the fast tier grows onto the idle nodes"
	touch "$DEMO_DIR/load.on"
	: >"$DEMO_DIR/load.codes"
	clients=()
	for _ in $(seq 12); do
		(while [ -f "$DEMO_DIR/load.on" ]; do
			curl -s -o /dev/null -w '%{http_code}\n' --max-time 20 http://127.0.0.1:8080/v1/chat/completions \
				-H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Count."}],"stream":true}' \
				>>"$DEMO_DIR/load.codes"
		done) &
		clients+=($!)
	done
	t_load=$(ms)
	rate() { # rate N0 T0MS: completions/s since the count was N0 at T0MS
		echo $((($(wc -l <"$DEMO_DIR/load.codes") - $1) * 1000 / ($(ms) - $2)))
	}
	sleep 1
	n0=$(wc -l <"$DEMO_DIR/load.codes") t0ms=$(ms)
	sleep 2
	r1=$(rate "$n0" "$t0ms")
	[ "$(replicas routed)" = 1 ] && info "through nginx: $r1 completions/s on 1 replica (before the keeper grows it)"
	wait_for "a second replica routed" 60 routed_is 2
	info "2 replicas routed $(since "$t_load") s after the load began"
	wait_for "a third replica routed" 60 routed_is 3
	info "3 replicas routed $(since "$t_load") s after the load began; llm-upstreams keep status:"
	llm-upstreams keep status --config "$DEMO_DIR/keeper.toml" 2>/dev/null | sed -n '/^fast: replicas/,/^$/p' | sed 's/^/             /'
	sleep 5 # load on three replicas, for the count below
	n0=$(wc -l <"$DEMO_DIR/load.codes") t0ms=$(ms)
	sleep 5
	info "through nginx: $(rate "$n0" "$t0ms") completions/s on 3 replicas"
	read -r victim victim_node < <(extras | head -n1)
	say "a one-CPU VASP job on $victim_node takes extra replica $victim's node; the other two serve on"
	fails0=$(grep -vc '^200$' "$DEMO_DIR/load.codes" || true)
	vasp2=$(sbatch --parsable -p gpu_vasp -N1 -n1 -w "$victim_node" --job-name=vasp-demo -o "$DEMO_DIR/vasp-%j.out" --wrap 'sleep 600')
	t_pre=$(ms)
	wait_for "replica $victim to be gone" 60 gone "$victim"
	info "replica $victim gone $(since "$t_pre") s after the VASP job was submitted (its supervisor requeued it, the keeper cancelled it: an extra never runs again)"
	wait_for "the VASP job to run" 60 running "$vasp2"
	info "VASP job $vasp2 running on $victim_node $(since "$t_pre") s after its sbatch; 2 replicas routed: $(replicas routed)"
	sleep 3
	rm -f "$DEMO_DIR/load.on"
	t_idle=$(ms)
	wait "${clients[@]}" # each client ends after its last request
	total=$(wc -l <"$DEMO_DIR/load.codes") fails=$(grep -vc '^200$' "$DEMO_DIR/load.codes" || true)
	info "load stopped: $total requests, $fails not answered 200 ($((fails - fails0)) of them after the VASP job came)"
	scancel "$vasp2"
	say "no load: the extra replica drains and ends after idle_after (8 s); the kept one stays"
	routed_one() { [ "$(replicas routed)" = 1 ]; }
	wait_for "back to one routed replica" 60 routed_one
	info "1 replica routed $(since "$t_idle") s after the load stopped"
	wait_for "the extras to end" 60 gone_extras
	info "the extra's job ended $(since "$t_idle") s after the load stopped; the kept job $fast_job: $(squeue -h -j "$fast_job" -o '%T on %N')"
	wait_for "the VASP job to end" 90 gone "$vasp2"
fi

say "full preemption: a VASP job with a 1-minute time limit takes every node (-N3 --exclusive -t 1)"
vasp=$(sbatch --parsable -p gpu_vasp -N3 --exclusive -t 1 --job-name=vasp-demo -o "$DEMO_DIR/vasp-%j.out" --wrap 'sleep 600')
info "vasp job $vasp"
t_pre=$(date +%s)
has_eta() { curl -s --max-time 2 http://127.0.0.1:8081/v1/models | grep -q '"expected_back":"'; }
wait_for "nginx to say when the tiers are expected back" 120 has_eta
info "nginx now answers (reasoning, :8081), $(($(date +%s) - t_pre)) s after the VASP job was submitted:"
curl -s -i --max-time 5 http://127.0.0.1:8081/v1/models | sed -n '1p;/^Retry-After/p;/^X-LLM-Tier/p;$p' | sed 's/^/             /'
eta=$(curl -s --max-time 2 http://127.0.0.1:8081/v1/models | sed -n 's/.*"expected_back":"\([^"]*\)".*/\1/p')
llm-upstreams status --config "$DEMO_DIR/upstreams.toml" 2>/dev/null | sed -n '/^TIER *STATE/,/^$/p' | sed 's/^/           /'
say "VASP runs until its time limit; nobody releases anything by hand"
wait_for "the fast tier to answer again" 300 served_by 8080 fast
wait_for "the reasoning tier to answer again" 300 served_by 8081 reasoning
info "both tiers answer again, $(($(date +%s) - t_pre)) s after the preemption; expected back at $eta, back at $(date -u +%FT%TZ)"
llm-supervisor status --endpoint-dir "$EP_DIR" | sed 's/^/           /'
for j in "${jobs_started[@]}"; do
	info "job $j: $(scontrol -o show job "$j" | grep -o 'Restarts=[0-9]*')"
done
say "availability (llm-upstreams report --since 1h)"
llm-upstreams report --since 1h --config "$DEMO_DIR/upstreams.toml" 2>/dev/null | sed 's/^/           /'

# ---------------------------------------------------------------- elastic reasoning tier
serving_on() { # serving_on N: llm-upstreams status says the reasoning tier serves on N of 3 nodes
	# (not `status | grep -q`: grep's early exit fails the pipe under pipefail)
	local st
	st=$(llm-upstreams status --config "$DEMO_DIR/upstreams.toml" 2>/dev/null) || return 1
	grep -q "^reasoning .*routed: serving on $1 of 3 nodes" <<<"$st"
}
none_named() { [ -z "$(squeue -h -n "$1" 2>/dev/null)" ]; }
if [ $netns = 0 ]; then
	say "elastic reasoning tier: skipped (a loopback cluster was up: every node is 127.0.0.1)"
else
	say "an elastic reasoning tier: three one-node member jobs instead of one 3-node job"
	info "the one-job tier and the fast tier step aside (each member takes a whole node: --exclusive)"
	llm-upstreams tier disable reasoning --cancel --config "$DEMO_DIR/keeper.toml" 2>>"$DEMO_DIR/keeper.log" >/dev/null
	llm-upstreams tier disable fast --cancel --config "$DEMO_DIR/keeper.toml" 2>>"$DEMO_DIR/keeper.log" >/dev/null
	wait_for "the tiers' jobs to end" 90 none_named llm-reasoning,llm-fast,llm-fast-extra
	kill "$keeper_pid" && wait "$keeper_pid" 2>/dev/null
	sed -i -e "s#$SHARE/sbatch/local/reasoning.sbatch#$SHARE/sbatch/local/reasoning-elastic.sbatch#" \
		-e '/^\[tiers.reasoning\]/a members = 3' "$DEMO_DIR/keeper.toml"
	llm-upstreams tier enable reasoning --config "$DEMO_DIR/keeper.toml" 2>>"$DEMO_DIR/keeper.log" >/dev/null
	llm-upstreams keep --interval 30s --config "$DEMO_DIR/keeper.toml" 2>>"$DEMO_DIR/keeper.log" &
	keeper_pid=$!
	t_el=$(ms)
	wait_for "the elastic tier on 3 nodes" 120 serving_on 3
	# status evaluates on its own: nginx may not have reloaded yet (issue 21: the demo printed
	# an empty answer here). Ask once nginx routes the tier itself.
	wait_for "nginx :8081 routing the elastic tier" 30 served_by 8081 reasoning
	a=$(answer 8081)
	info "serving on 3 of 3 nodes $(since "$t_el") s after the keeper submitted the members; :8081 → $a"
	members=$EP_DIR/members/reasoning
	worker_node=""
	for f in "$members"/member-*.json; do
		grep -q '"leads": true' "$f" && continue
		worker_node=$(sed -n 's/.*"node": "\([^"]*\)".*/\1/p' "$f")
		break
	done
	[ -n "$worker_node" ] || die "no worker member found in $members"
	say "a one-CPU VASP job on $worker_node takes one member (a worker); the tier re-plans onto the other two"
	vasp3=$(sbatch --parsable -p gpu_vasp -N1 -n1 -w "$worker_node" --job-name=vasp-demo -o "$DEMO_DIR/vasp-%j.out" --wrap 'sleep 600')
	t_pre=$(ms)
	wait_for "the tier on 2 nodes" 120 serving_on 2
	wait_for "nginx :8081 routing the elastic tier" 30 served_by 8081 reasoning
	# The first chat right after the re-plan may meet the head still taking its new workers (an
	# nginx 502/503: a client retries): wait until one is answered, then show it.
	wait_for "a chat answered on :8081 by the re-planned tier" 60 chat_ok 8081
	a=$(answer 8081)
	info "serving on 2 of 3 nodes $(since "$t_pre") s after the VASP job was submitted (VASP: $(squeue -h -j "$vasp3" -o %T)); nginx :8081 → $a"
	# (a status line shown, not checked: grep finding none must not end the demo under pipefail)
	st=$(llm-upstreams status --config "$DEMO_DIR/upstreams.toml" 2>/dev/null || true)
	grep '^reasoning .*routed' <<<"$st" | sed 's/^/             /' || true
	scancel "$vasp3"
	t_back=$(ms)
	say "the VASP job ends: the member is requeued, released, and the tier grows back after 30 s with nothing in flight"
	wait_for "the tier back on 3 nodes" 180 serving_on 3
	info "serving on 3 of 3 nodes again $(since "$t_back") s after the VASP job ended"
fi
# ---------------------------------------------------------------- monitoring
# show_panel TITLE EXPR: the dashboard panel TITLE's query (its variables all, $__rate_interval
# the last 10 minutes) evaluated now (scripts/monitoring_test.go checks each is the panel's).
show_panel() {
	local out
	out=$(promtool query instant http://127.0.0.1:9468 "$2" 2>&1) || die "promtool query instant for \"$1\": $out (see $DEMO_DIR/prometheus.log)"
	info "$1:"
	if [ -z "$out" ]; then info "  (no series)"; else sed 's/^/             /' <<<"$out"; fi
}
say "monitoring: the dashboard and the alert rules"
info "dashboard: $SHARE/etc/grafana/slurm-llm.json (Grafana: Dashboards, Import; README.md, Monitoring)"
info "alert rules: $SHARE/etc/prometheus/slurm-llm.rules.yml; scrape jobs: $SHARE/etc/prometheus/prometheus.yml"
if [ -n "$prom_pid" ]; then
	info "the main panels now, by promtool query instant against the demo's Prometheus (PromQL: rates, quantiles"
	info "and joins of the watcher's and the front door's figures need a Prometheus; /metrics alone has raw counters):"
	show_panel "Tier routed" 'max by (tier) (llm_upstreams_tier_routed{tier=~".*"})'
	show_panel "Tier state and reason" 'max by (tier, state, reason) (llm_upstreams_tier_state_info{tier=~".*"})'
	show_panel "Availability, last day" 'sum by (tier) (increase(llm_upstreams_tier_state_seconds_total{state="routed",tier=~".*"}[1d])) / sum by (tier) (increase(llm_upstreams_tier_state_seconds_total{tier=~".*"}[1d]))'
	show_panel "Preemptions" 'sum by (tier) (increase(llm_upstreams_tier_preemptions_total{tier=~".*"}[1h]))'
	show_panel "Recovery after preemption" 'histogram_quantile(0.5, sum by (tier, le) (increase(llm_upstreams_tier_recovery_seconds_bucket{tier=~".*"}[1d])))'
	show_panel "Requests by outcome" 'sum by (outcome) (rate(llm_front_requests_total{tier=~".*"}[10m]))'
	show_panel "503s by reason" 'sum by (tier) (rate(llm_front_requests_total{outcome="unavailable",tier=~".*"}[10m])) * on (tier) group_left (reason) max by (tier, reason) (llm_upstreams_tier_state_info)'
	show_panel "Requests held" 'sum by (tier) (llm_front_held{tier=~".*"})'
	show_panel "Continuations" 'sum by (tier, result) (rate(llm_front_continuations_total{tier=~".*"}[10m]))'
	show_panel "Tokens per second" 'sum by (model, kind) (rate(llm_front_tokens_total{tier=~".*",model=~".*"}[10m]))'
	show_panel "Time to first token" 'histogram_quantile(0.5, sum by (model, le) (rate(llm_front_time_to_first_token_seconds_bucket{tier=~".*",model=~".*"}[10m])))'
	show_panel "Replicas" 'max by (tier, state) (llm_keeper_replicas{tier=~".*"})'
	show_panel "Elastic members" 'max by (tier, state) (llm_keeper_members{tier=~".*"})'
	show_panel "Keeper submits and releases" 'sum by (tier, kind) (increase(llm_keeper_submitted_total{tier=~".*"}[1h]))'
	show_panel "Firing alerts" 'ALERTS{alertname=~"LLM.*", alertstate="firing"}'
else
	info "no Prometheus here (apt-get install prometheus): the families of the main panels, read from /metrics directly:"
	for port in 9465 9467 9466; do
		curl -s --max-time 2 "http://127.0.0.1:$port/metrics" |
			grep -E '^(llm_upstreams_tier_state_info|llm_upstreams_tier_preemptions_total|llm_front_requests_total|llm_front_tokens_total|llm_keeper_replicas|llm_keeper_members)' |
			sed 's/^/             /' || true
	done
fi
say "demo finished in $(($(date +%s) - t0)) s"
