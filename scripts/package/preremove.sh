#!/bin/sh
# slurm-llm packages, before removal (rpm %preun: $1 = 0 on erase, 1 on upgrade; deb prerm:
# remove, upgrade, ...). On erase only, the controller's units are stopped and disabled, as
# RHEL's %systemd_preun does; an upgrade leaves running services alone (restart them yourself).
set -e
case "$1" in
0 | remove) ;;
*) exit 0 ;;
esac
if [ "$SLURM_LLM_PACKAGE" = controller ] && [ -d /run/systemd/system ]; then
	systemctl --no-reload disable --now llm-front.service llm-keeper.service \
		llm-upstreams-watch.service llm-upstreams.timer llm-upstreams.service >/dev/null 2>&1 || true
fi
exit 0
