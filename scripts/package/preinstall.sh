#!/bin/sh
# slurm-llm packages, before install or upgrade (rpm %pre: $1 = 1 or 2; deb preinst: install,
# upgrade). Makes the system accounts the programs run as, when the system has none by that
# name: `getent` also finds a site's LDAP or SSSD account, which is then used as it is (tier jobs
# on several nodes need the same uid everywhere: create a site-wide slurm-llm account before
# installing, or give the local ones the same uid on every node).
#   slurm-llm   tier jobs (node), the keeper (controller)
#   llm-front   the front door (controller only)
set -e
case "$1" in
1 | 2 | install | upgrade) ;;
*) exit 0 ;;
esac
nologin=/sbin/nologin
[ -x /usr/sbin/nologin ] && nologin=/usr/sbin/nologin
add_account() { # add_account NAME COMMENT
	getent group "$1" >/dev/null || groupadd --system "$1"
	getent passwd "$1" >/dev/null ||
		useradd --system --gid "$1" --home-dir /var/lib/slurm-llm --no-create-home \
			--shell "$nologin" --comment "$2" "$1"
}
add_account slurm-llm "slurm-llm tier jobs and keeper"
case "$SLURM_LLM_PACKAGE" in
controller) add_account llm-front "slurm-llm front door" ;;
esac
exit 0
