#!/usr/bin/env bash
# Checks what the project ships, with the built programs (make build first):
#   - llm-supervisor check-config on every tier config under etc/ (site configs planned
#     for the site's nodes vasp-[01-03], local ones for the test cluster's node[1-3]);
#   - promtool check rules and test rules on the alert rules (etc/prometheus/), promtool
#     check config on the example Prometheus config;
#   - nginx -t on the shipped site etc/nginx/slurm-llm.conf, with the upstream files and
#     the 503 bodies llm-upstreams writes for it, and the front door's site
#     etc/nginx/slurm-llm-front.conf beside it, in a private nginx prefix (no running
#     nginx needed); the same site in RHEL's layout (conf.d/*.conf inside http {}), failing
#     before `llm-upstreams init` writes its includes and passing after. (etc/upstreams.toml
#     is loaded by TestShippedConfig.)
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0

for f in $(git ls-files 'etc/*.toml' 'etc/**/*.toml'); do
	grep -q '^tier *=' "$f" || continue
	case $f in
	etc/local/*) nodes='node[1-3]' ;;
	*) nodes='vasp-[01-03]' ;;
	esac
	if bin/llm-supervisor check-config "$f" --nodelist "$nodes" >/dev/null; then
		echo "ok   check-config $f (nodes $nodes)"
	else
		echo "FAIL check-config $f"
		fail=1
	fi
done

# The alert rules: promtool check rules, their unit tests (each alert fires and stays
# quiet where it should), and the example Prometheus config with the rules beside it.
if command -v promtool >/dev/null; then
	rules=etc/prometheus/slurm-llm.rules.yml
	if promtool check rules "$rules" >/dev/null && promtool test rules etc/prometheus/slurm-llm.rules.test.yml; then
		echo "ok   promtool check rules and test rules $rules"
	else
		promtool check rules "$rules" || true
		echo "FAIL promtool check rules or test rules $rules"
		fail=1
	fi
	promcfg=$(mktemp)
	sed "s#/usr/local/share/slurm-llm/etc/prometheus/#$PWD/etc/prometheus/#" etc/prometheus/prometheus.yml >"$promcfg"
	if promtool check config "$promcfg" >/dev/null; then
		echo "ok   promtool check config etc/prometheus/prometheus.yml"
	else
		promtool check config "$promcfg" || true
		echo "FAIL promtool check config etc/prometheus/prometheus.yml"
		fail=1
	fi
	rm -f "$promcfg"
else
	echo "FAIL promtool is not installed (apt-get install prometheus): the alert rules are not checked"
	fail=1
fi

if ! command -v nginx >/dev/null; then
	echo "skip nginx -t: nginx is not installed"
	exit $fail
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/endpoints" "$tmp/upstreams" "$tmp/logs"
sed "s#/etc/nginx/slurm-llm/#$tmp/upstreams/#g" etc/nginx/slurm-llm.conf >"$tmp/site.conf"
cp etc/nginx/slurm-llm-front.conf "$tmp/front.conf"
cat >"$tmp/nginx.conf" <<CONF
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log;
events {}
http {
    access_log $tmp/logs/access.log;
    client_body_temp_path $tmp/body;
    proxy_temp_path $tmp/proxy;
    fastcgi_temp_path $tmp/fastcgi;
    uwsgi_temp_path $tmp/uwsgi;
    scgi_temp_path $tmp/scgi;
    include $tmp/site.conf;
    include $tmp/front.conf;
}
CONF
cat >"$tmp/upstreams.toml" <<CONF
endpoint_dir = "$tmp/endpoints"
output_dir = "$tmp/upstreams"
lock_file = "$tmp/lock"
allow_any_owner = true
allow_any_network = true
[tiers.fast]
[tiers.reasoning]
backup = "fast"
[nginx]
test = ["nginx", "-t", "-q", "-c", "$tmp/nginx.conf"]
reload = ["true"]
[scheduler]
check = false
CONF
if bin/llm-upstreams sync --config "$tmp/upstreams.toml" 2>"$tmp/sync.log" &&
	nginx -t -q -c "$tmp/nginx.conf" &&
	[ -s "$tmp/upstreams/unavailable-fast.json" ] && [ -s "$tmp/upstreams/unavailable-reasoning.json" ]; then
	echo "ok   nginx -t etc/nginx/slurm-llm.conf and slurm-llm-front.conf (with rendered upstream files and 503 bodies)"
else
	echo "FAIL nginx -t etc/nginx/slurm-llm.conf and slurm-llm-front.conf"
	cat "$tmp/sync.log"
	fail=1
fi

# RHEL's layout: nginx.conf includes conf.d/*.conf inside http {} (beside its own default server;
# the layout of RHEL 8's nginx package), and the .rpm puts the site there, active at nginx's next
# reload. Before `llm-upstreams init` nginx -t must fail (the site's includes are missing); after
# it, pass: that is what the package's post-install step is for.
rh=$tmp/rhel
mkdir -p "$rh/conf.d" "$rh/default.d" "$rh/out" "$rh/logs"
sed "s#/etc/nginx/slurm-llm/#$rh/out/#g" etc/nginx/slurm-llm.conf >"$rh/conf.d/slurm-llm.conf"
cat >"$rh/nginx.conf" <<CONF
worker_processes auto;
error_log $rh/logs/error.log;
pid $rh/nginx.pid;
events { worker_connections 1024; }
http {
    log_format main '\$remote_addr - \$remote_user [\$time_local] "\$request" \$status';
    access_log $rh/logs/access.log main;
    client_body_temp_path $rh/body;
    proxy_temp_path $rh/proxy;
    fastcgi_temp_path $rh/fastcgi;
    uwsgi_temp_path $rh/uwsgi;
    scgi_temp_path $rh/scgi;
    sendfile on;
    keepalive_timeout 65;
    types_hash_max_size 2048;
    default_type application/octet-stream;
    include $rh/conf.d/*.conf;
    server {
        listen 127.0.0.1:18080 default_server;
        server_name _;
        include $rh/default.d/*.conf;
        location / { return 404; }
    }
}
CONF
sed -e "s#$tmp/upstreams#$rh/out#" "$tmp/upstreams.toml" >"$rh/upstreams.toml"
if nginx -t -q -c "$rh/nginx.conf" 2>/dev/null; then
	echo "FAIL nginx -t passed on RHEL's conf.d layout before llm-upstreams init wrote the includes"
	fail=1
elif bin/llm-upstreams init --config "$rh/upstreams.toml" >/dev/null && nginx -t -q -c "$rh/nginx.conf"; then
	echo "ok   nginx -t etc/nginx/slurm-llm.conf in RHEL's conf.d/ with llm-upstreams init's placeholders"
else
	echo "FAIL nginx -t etc/nginx/slurm-llm.conf in RHEL's conf.d/ after llm-upstreams init"
	fail=1
fi
exit $fail
