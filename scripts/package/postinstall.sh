#!/bin/sh
# slurm-llm packages, after install or upgrade (rpm %post: $1 = 1 or 2; deb postinst: configure).
# Units are installed, never enabled or started: systemd is told to read them again, no more.
# The controller also writes the placeholder upstream files its nginx site includes
# (llm-upstreams init: only the missing ones, no nginx run), so that `nginx -t` passes with the
# site in place: on RHEL the site is in conf.d/, loaded at nginx's next reload.
set -e
case "$1" in
1 | 2 | configure) ;;
*) exit 0 ;;
esac
if [ "$SLURM_LLM_PACKAGE" = controller ]; then
	if ! llm-upstreams init --config /etc/slurm-llm/upstreams.toml >/dev/null; then
		echo "slurm-llm-controller: llm-upstreams init failed (above): fix /etc/slurm-llm/upstreams.toml, then run it again before nginx loads the site" >&2
	fi
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	echo "slurm-llm-controller: units installed, none enabled; run 'llm-upstreams doctor' next (README: Install on a real cluster)"
else
	echo "slurm-llm-node: run 'llm-supervisor doctor' next (README: Install on a real cluster)"
fi
exit 0
