#!/usr/bin/env bash
# Installs slurm-llm from a built tree (run `make build` first; `make install` does both).
#
#   scripts/install.sh [--destdir DIR] [--prefix /usr/local] [--sysconfdir /etc/slurm-llm]
#                      [--unitdir /etc/systemd/system] [--envfile FILE]
#
# What goes where (PREFIX=/usr/local):
#   bin/llm-supervisor, bin/llm-upstreams            the two programs
#   libexec/slurm-llm/fake-llama                     the fake llama.cpp (tests, demo)
#   libexec/slurm-llm/fake/{llama-server,rpc-server,ggml-rpc-server}  symlinks to it
#   share/slurm-llm/etc/                             every shipped config, for reference
#   share/slurm-llm/sbatch/                          sbatch scripts of the tiers
#   share/slurm-llm/scripts/                         local cluster, demo, install scripts
#   SYSCONFDIR/*.toml                                configs, only where none exists yet
#   UNITDIR/llm-*.service, *.timer                   systemd units (not enabled)
#   ENVFILE                                          the units' environment (etc/slurm-llm.env),
#                                                    only where none exists yet: /etc/sysconfig/
#                                                    slurm-llm on RHEL (/etc/redhat-release),
#                                                    else /etc/default/slurm-llm
# Paths inside units, sbatch scripts and the local configs follow PREFIX.
# An existing config in SYSCONFDIR is never overwritten; the new one is put beside it
# as NAME.toml.new.
set -euo pipefail
cd "$(dirname "$0")/.."

destdir="" prefix=/usr/local sysconfdir=/etc/slurm-llm unitdir=/etc/systemd/system envfile=""
while [ $# -gt 0 ]; do
	case $1 in
	--destdir|--stage) destdir=$2; shift 2 ;;
	--prefix) prefix=$2; shift 2 ;;
	--sysconfdir) sysconfdir=$2; shift 2 ;;
	--unitdir) unitdir=$2; shift 2 ;;
	--envfile) envfile=$2; shift 2 ;;
	-h|--help) sed -n '2,20p' "$0"; exit 0 ;;
	*) echo "install.sh: unknown option $1" >&2; exit 2 ;;
	esac
done

if [ -z "$envfile" ]; then
	envfile=/etc/default/slurm-llm
	[ -e /etc/redhat-release ] && envfile=/etc/sysconfig/slurm-llm
fi
bindir=$prefix/bin libexecdir=$prefix/libexec/slurm-llm sharedir=$prefix/share/slurm-llm
for b in llm-supervisor llm-upstreams fake-llama; do
	[ -x "bin/$b" ] || { echo "install.sh: bin/$b is missing: run make build first" >&2; exit 1; }
done

# fix_paths: the shipped files name the default prefix; rewrite it to this one.
fix_paths() {
	sed -e "s#/usr/local/bin/#$bindir/#g" \
	    -e "s#/usr/local/libexec/slurm-llm#$libexecdir#g" \
	    -e "s#/usr/local/share/slurm-llm#$sharedir#g" \
	    -e "s#/etc/slurm-llm/#$sysconfdir/#g" \
	    -e "s#^EnvironmentFile=-/etc/default/slurm-llm\$#EnvironmentFile=-$envfile#"
}

# put SRC DEST MODE: install a text file with its paths fixed.
put() {
	install -d "$(dirname "$2")"
	fix_paths <"$1" >"$2.tmp.$$"
	chmod "$3" "$2.tmp.$$"
	mv -f "$2.tmp.$$" "$2"
}

D=$destdir
install -d "$D$bindir" "$D$libexecdir/fake" "$D$sharedir" "$D$sysconfdir" "$D$unitdir" "$D$(dirname "$envfile")"
install -m 0755 bin/llm-supervisor bin/llm-upstreams "$D$bindir/"
install -m 0755 bin/fake-llama "$D$libexecdir/"
for name in llama-server rpc-server ggml-rpc-server; do
	ln -sfn ../fake-llama "$D$libexecdir/fake/$name"
done

while IFS= read -r f; do
	put "$f" "$D$sharedir/$f" 0644
done < <(git ls-files etc 2>/dev/null || find etc -type f)
while IFS= read -r f; do put "$f" "$D$sharedir/${f#scripts/}" 0755; done < <(find scripts/sbatch -name "*.sbatch")
for f in scripts/*.sh; do put "$f" "$D$sharedir/scripts/$(basename "$f")" 0755; done
install -m 0644 README.md "$D$sharedir/README.md"

# keep SRC DEST: install a config unless one that differs is there already.
keep() {
	local f=$1 dest=$2
	if [ -e "$dest" ] && ! cmp -s <(fix_paths <"$f") "$dest"; then
		put "$f" "$dest.new" 0644
		echo "install.sh: kept $dest; the shipped version is $dest.new"
	else
		put "$f" "$dest" 0644
	fi
}
for f in etc/*.toml; do keep "$f" "$D$sysconfdir/$(basename "$f")"; done
keep etc/slurm-llm.env "$D$envfile"
for f in etc/systemd/*; do put "$f" "$D$unitdir/$(basename "$f")" 0644; done

echo "installed slurm-llm under ${D:-}$prefix (configs in ${D:-}$sysconfdir, units in ${D:-}$unitdir)"
