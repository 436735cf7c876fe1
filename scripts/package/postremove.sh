#!/bin/sh
# slurm-llm packages, after removal (rpm %postun: $1 = 0 on erase, 1 on upgrade; deb postrm:
# remove, purge, upgrade, ...). systemd reads the units again. Accounts, /var/lib/slurm-llm, the
# endpoint directory and the generated files in /etc/nginx/slurm-llm are left, as packages leave
# data (remove them by hand).
set -e
if [ "$SLURM_LLM_PACKAGE" = controller ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
