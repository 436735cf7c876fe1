#!/usr/bin/env bash
# slurm24-root.sh: a Debian 13 (trixie) root holding Slurm 24.11 and munge, for `make e2e-slurm24`
# (the e2e suite against a second real Slurm, beside the host's Debian 12 Slurm 22.05).
#
#   scripts/slurm24-root.sh build      make the root with mmdebstrap unless a complete one is there
#                                      (prints its path); rebuild with SLURM24_REBUILD=1
#   scripts/slurm24-root.sh wrappers DIR
#                                      write DIR/<cmd> for the Slurm and munge client commands: each
#                                      runs the root's binary in the root (chroot, cwd kept); put DIR
#                                      first on PATH (root only: chroot). Inside the root (a job's
#                                      srun) the root's own binary runs directly.
#   scripts/slurm24-root.sh check      exit 0 when the root is complete (the lane's prerequisite)
#
# The root: $SLURM24_ROOT (default /var/cache/slurm-llm/slurm24-root), built into ROOT.tmp and
# renamed when done, so a half-built root is never taken for a complete one; the file
# ROOT/.slurm-llm-root names what it holds. The munge and slurm users get the host's UIDs/GIDs
# (changed after the install), so files under the bind-mounted /run keep one owner
# whichever Slurm runs. The daemons run from it through scripts/slurm-cluster.sh with
# SLURM_ROOT=ROOT (that script bind-mounts /tmp, /run, /proc, ... into the root).
# Needs root and mmdebstrap (apt-get install -y mmdebstrap) and the Debian mirror.
set -euo pipefail

readonly ROOT=${SLURM24_ROOT:-/var/cache/slurm-llm/slurm24-root}
readonly SUITE=${SLURM24_SUITE:-trixie}
readonly MIRROR=${SLURM24_MIRROR:-http://deb.debian.org/debian}
readonly MARK=$ROOT/.slurm-llm-root
# What the lane and the product call in the root. slurmdbd is small (no database server). curl:
# the tests run `runuser -u USER -- curl` on a node, and runuser is the root's.
readonly PACKAGES=slurm-wlm,slurmdbd,munge,util-linux,procps,iproute2,diffutils,curl
# munge and unmunge stay the host's (they only talk to the socket, which is the root's munged):
# tests run them as other users, and chroot needs root. runuser is the root's, so that
# `runuser -u USER -- sbatch` runs the root's sbatch as USER.
readonly CLIENTS=(squeue sbatch scontrol scancel srun sinfo sacct sacctmgr sshare sprio salloc sstat runuser)

log() { printf 'slurm24-root: %s\n' "$*" >&2; }
die() { printf 'slurm24-root: error: %s\n' "$*" >&2; exit 1; }

complete() {
	[[ -r $MARK ]] && [[ -x $ROOT/usr/sbin/slurmctld && -x $ROOT/usr/sbin/slurmd && -x $ROOT/usr/sbin/munged && -x $ROOT/usr/bin/sbatch ]]
}

# align_ids DIR: give the root's munge and slurm users the host's UIDs and GIDs (and their files
# with them), so that what the root's munged makes under the bind-mounted /run has the owner the
# host's tools expect.
align_ids() {
	local dir=$1 u uid gid ouid ogid
	for u in munge slurm; do
		uid=$(id -u "$u" 2>/dev/null) || continue
		gid=$(id -g "$u")
		ouid=$(chroot "$dir" id -u "$u" 2>/dev/null) || continue
		ogid=$(chroot "$dir" id -g "$u")
		[[ $uid == "$ouid" && $gid == "$ogid" ]] && continue
		chroot "$dir" groupmod -o -g "$gid" "$u" || die "groupmod $u in $dir"
		chroot "$dir" usermod -o -u "$uid" -g "$gid" "$u" || die "usermod $u in $dir"
		find "$dir" -xdev -uid "$ouid" -exec chown -h "$uid" {} + 2>/dev/null || true
		find "$dir" -xdev -gid "$ogid" -exec chgrp -h "$gid" {} + 2>/dev/null || true
		log "$u: uid $ouid -> $uid, gid $ogid -> $gid (the host's)"
	done
}

cmd_build() {
	[[ $(id -u) == 0 ]] || die "must run as root"
	if complete && [[ -z ${SLURM24_REBUILD:-} ]]; then
		log "reusing $ROOT ($(sed -n 's/^slurm=//p' "$MARK"))"
		echo "$ROOT"
		return
	fi
	# Never remove a root a cluster runs from: its bind mounts (/tmp, /run, /usr/local, ...)
	# would be emptied through it.
	if awk -v r="$ROOT" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
		die "something is mounted under $ROOT (a cluster runs from it?): run scripts/slurm-cluster.sh down first"
	fi
	command -v mmdebstrap >/dev/null || die "mmdebstrap not found; install with: apt-get install -y mmdebstrap"
	local tmp=$ROOT.tmp start=$SECONDS
	rm -rf "$tmp"
	mkdir -p "$(dirname "$ROOT")"
	log "building $ROOT from $SUITE ($MIRROR): $PACKAGES"
	mmdebstrap --mode=root --variant=apt --include="$PACKAGES" \
		"$SUITE" "$tmp" "$MIRROR" >&2 || die "mmdebstrap failed"
	align_ids "$tmp"
	# The root's own munge key (the cluster script makes it when missing; here only the dir).
	rm -f "$tmp/etc/munge/munge.key"
	local sv mv
	sv=$(chroot "$tmp" dpkg-query -W -f '${Version}' slurmctld) && [[ -n $sv ]] || die "no slurmctld in $tmp"
	mv=$(chroot "$tmp" dpkg-query -W -f '${Version}' munge) && [[ -n $mv ]] || die "no munge in $tmp"
	{
		echo "# written by scripts/slurm24-root.sh build"
		echo "suite=$SUITE"
		echo "slurm=$sv"
		echo "munge=$mv"
		echo "built=$(date -u +%FT%TZ)"
		echo "build_seconds=$((SECONDS - start))"
	} >"$tmp/.slurm-llm-root"
	rm -rf "$ROOT"
	mv "$tmp" "$ROOT"
	log "built $ROOT in $((SECONDS - start)) s ($(du -sh "$ROOT" | cut -f1))"
	echo "$ROOT"
}

cmd_wrappers() {
	local dir=$1 c bin
	complete || die "$ROOT is not complete; run: $0 build"
	mkdir -p "$dir"
	for c in "${CLIENTS[@]}"; do
		bin=/usr/bin/$c
		[[ -x $ROOT$bin ]] || bin=/usr/sbin/$c
		[[ -x $ROOT$bin ]] || die "$ROOT has no $c"
		cat >"$dir/$c.tmp" <<EOF
#!/bin/sh
# written by scripts/slurm24-root.sh: $c of $ROOT, run in that root (Slurm 24.11).
# In the root already (a job step, or the wrapped runuser): the root's own $c.
if [ -e /.slurm-llm-root ]; then exec $bin "\$@"; fi
if [ "\$(id -u)" != 0 ]; then
	echo "$dir/$c: chroot needs root; run 'runuser -u USER -- $c' (runuser is wrapped too)" >&2
	exit 1
fi
# The tests add users on the host: the root's daemons must know them.
cmp -s /etc/passwd $ROOT/etc/passwd || cp /etc/passwd $ROOT/etc/passwd
cmp -s /etc/group $ROOT/etc/group || cp /etc/group $ROOT/etc/group
# chroot goes to /: back to the caller's directory (bind-mounted: /tmp, the repository).
exec chroot $ROOT /bin/sh -c 'cd "\$0" 2>/dev/null; exec "\$@"' "\$PWD" $bin "\$@"
EOF
		chmod 0755 "$dir/$c.tmp"
		mv "$dir/$c.tmp" "$dir/$c"
	done
	log "wrote ${#CLIENTS[@]} wrappers in $dir"
}

case ${1:-} in
build) cmd_build ;;
wrappers) (($# == 2)) || die "usage: $0 wrappers DIR"; cmd_wrappers "$2" ;;
check) complete ;;
*) die "usage: $0 build | wrappers DIR | check" ;;
esac
