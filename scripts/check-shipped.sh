#!/usr/bin/env bash
# Checks what the project ships, with the built programs (make build first):
#   - llm-supervisor check-config on every tier config under etc/ (site configs planned
#     for the site's nodes vasp-[01-03], local ones for the test cluster's node[1-3]);
#   - promtool check rules and test rules on the alert rules (etc/prometheus/), promtool
#     check config on the example Prometheus config;
#   - nginx -t on the shipped site etc/nginx/slurm-llm.conf, with the upstream files and
#     the 503 bodies llm-upstreams writes for it, and the front door's site
#     etc/nginx/slurm-llm-front.conf beside it, in a private nginx prefix (no running
#     nginx needed). (etc/upstreams.toml is loaded by TestShippedConfig.)
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
exit $fail
