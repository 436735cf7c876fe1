#!/usr/bin/env bash
# The Debian packages `make check` needs, checked before anything runs, so that a missing one
# is named in the first second rather than by a test 20 minutes in.
#
#   scripts/test-deps.sh            check; install what is missing with apt-get when run as root
#                                   on a machine with apt-get, else name it and exit 1
#   scripts/test-deps.sh --check    check only: name what is missing and exit 1
#   scripts/test-deps.sh --list     print the packages, one line
#
# Each entry is a command (or file) the tests run and the package that brings it.
set -euo pipefail

deps=(
	slurmctld:slurm-wlm        # the local cluster: slurmctld, slurmd, the client commands
	slurmdbd:slurmdbd          # its accounting (keys' accounts, sshare's fair-share factors)
	mariadbd:mariadb-server    # slurmdbd's database
	munged:munge               # the cluster's and the front door's credentials
	nginx:nginx                # the shipped site, real nginx in the e2e tests
	promtool:prometheus        # the alert rules' tests (check-shipped)
	curl:curl                  # a real client in the e2e tests
	bindfs:bindfs              # a FUSE view that hides writes from inotify, as NFS does
	ip:iproute2                # network namespaces of the netns cluster
	nft:nftables               # link faults of the netns cluster
	node:nodejs                # the OpenAI Node SDK as a real client
	npm:npm                    #   (npm installs the SDK and playwright-core at test time)
	chromium:chromium          # a real browser for the chat page through the front door
	rpm:rpm                    # reading the built .rpm back (rpm -qp)
	dpkg-deb:dpkg              # reading the built .deb back
	make:make
	git:git                    # the packages' version and what install.sh ships
)

mode=install
case ${1:-} in
--check) mode=check ;;
--list) mode=list ;;
"") ;;
*) echo "usage: test-deps.sh [--check|--list]" >&2; exit 2 ;;
esac

if [ $mode = list ]; then
	printf '%s\n' "${deps[@]#*:}" | tr '\n' ' ' | sed 's/ $/\n/'
	exit 0
fi

export PATH=$PATH:/usr/sbin:/sbin
missing=()
for d in "${deps[@]}"; do
	cmd=${d%%:*} pkg=${d#*:}
	command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ $mode = install ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "test-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${missing[@]}" >/dev/null
	exit 0
fi
echo "test-deps: missing Debian packages: ${missing[*]}" >&2
echo "test-deps: as root: apt-get install -y ${missing[*]}" >&2
exit 1
