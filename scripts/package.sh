#!/usr/bin/env bash
# make package: .rpm and .deb of slurm-llm-node and slurm-llm-controller, built with nfpm (a Go
# module, run as `go tool nfpm`: no rpmbuild, no dpkg-buildpackage), from static binaries.
#
#   scripts/package.sh [--out DIR] [--version X.Y.Z] [rpm] [deb]     (default: both, into dist/)
#
# What each package holds is scripts/package/manifest (TestPackagesMatchManifest reads the built
# packages against it); the files come from a stage scripts/install.sh makes with --prefix /usr,
# so paths inside units and sbatch scripts are /usr/bin, /usr/share/slurm-llm and so on. The
# scriptlets (scripts/package/*.sh) make the system accounts, write the nginx site's placeholder
# upstream files and run `systemctl daemon-reload`; units are never enabled or started.
# Version: X.Y.Z from --version, else the newest vX.Y.Z tag, else 0.1.0; release
# 0.<commits>.g<hash> (so a later commit sorts later), with .dirty for uncommitted changes.
set -euo pipefail
cd "$(dirname "$0")/.."

out=dist version="" formats=()
while [ $# -gt 0 ]; do
	case $1 in
	--out) out=$2; shift 2 ;;
	--version) version=$2; shift 2 ;;
	rpm | deb) formats+=("$1"); shift ;;
	-h | --help) sed -n '2,13p' "$0"; exit 0 ;;
	*) echo "package.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ ${#formats[@]} -gt 0 ] || formats=(rpm deb)

if [ -z "$version" ]; then
	version=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || echo v0.1.0)
	version=${version#v}
fi
release="0.$(git rev-list --count HEAD).g$(git rev-parse --short HEAD)"
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || release+=.dirty

# describe PKG: the package's summary line and description.
describe() {
	case $1 in
	node)
		echo "description: |"
		echo "  LLM tiers as preemptible Slurm jobs: the GPU nodes' supervisor"
		echo "  slurm-llm for the GPU nodes: llm-supervisor runs an LLM tier (llama.cpp's rpc-server"
		echo "  workers and llama-server head) inside a preemptible, requeueable Slurm job, watches"
		echo "  its processes, drains them on preemption and publishes an endpoint file. With the"
		echo "  tiers' configs (/etc/slurm-llm) and sbatch scripts (/usr/share/slurm-llm/sbatch)."
		echo "depends: [munge]"
		;;
	controller)
		echo "description: |"
		echo "  LLM tiers on Slurm: nginx upstreams, keeper and front door (controller)"
		echo "  slurm-llm for the Slurm controller: llm-upstreams turns the tiers' endpoint files into"
		echo "  nginx upstreams (tested, reloaded only on change), keeps the tiers queued, and runs the"
		echo "  front door: one OpenAI URL for every tier, with munge keys, usage and fair share."
		echo "  systemd units (not enabled), the nginx site, Grafana and Prometheus files."
		echo "depends: [munge, nginx]"
		;;
	esac
}

# emit_config PKG FMT STAGE ENVFILE SITES SCRIPTS: nfpm's config for one package, from the manifest.
emit_config() {
	local pkg=$1 fmt=$2 stage=$3 envfile=$4 sites=$5 scriptdir=$6
	local p type mode dst src
	cat <<YAML
name: slurm-llm-$pkg
arch: amd64
platform: linux
version: "$version"
release: "$release"
section: admin
priority: optional
maintainer: "slurm-llm maintainers <slurm-llm@localhost>"
vendor: slurm-llm
YAML
	describe "$pkg"
	echo "contents:"
	while read -r p type mode dst src; do
		[[ -z $p || $p == \#* ]] && continue
		[ "$p" = "$pkg" ] || continue
		dst=${dst//@ENVFILE@/$envfile} dst=${dst//@NGINXSITES@/$sites}
		src=${src:-$dst}
		case $type in
		file | config)
			[ -f "$stage$src" ] || { echo "package.sh: $src is not in the stage (manifest line $dst)" >&2; return 1; }
			echo "  - src: \"$stage$src\""
			echo "    dst: \"$dst\""
			[ "$type" = config ] && echo "    type: config|noreplace"
			echo "    file_info: {mode: $mode, owner: root, group: root}"
			;;
		symlink)
			echo "  - src: \"$src\""
			echo "    dst: \"$dst\""
			echo "    type: symlink"
			;;
		dir)
			echo "  - dst: \"$dst\""
			echo "    type: dir"
			echo "    file_info: {mode: $mode, owner: root, group: root}"
			;;
		*) echo "package.sh: manifest: unknown type $type for $dst" >&2; return 1 ;;
		esac
	done <scripts/package/manifest
	echo "scripts:"
	local s
	for s in preinstall postinstall preremove postremove; do
		echo "  $s: \"$scriptdir/$s.sh\""
	done
}

make -s build VERSION="$version-$release"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for fmt in "${formats[@]}"; do
	case $fmt in
	rpm) envfile=/etc/sysconfig/slurm-llm sites=/etc/nginx/conf.d ;;
	deb) envfile=/etc/default/slurm-llm sites=/etc/nginx/sites-available ;;
	esac
	stage=$work/stage-$fmt
	scripts/install.sh --destdir "$stage" --prefix /usr --sysconfdir /etc/slurm-llm \
		--unitdir /usr/lib/systemd/system --envfile "$envfile" >/dev/null
	for pkg in node controller; do
		scriptdir=$work/scripts-$pkg
		mkdir -p "$scriptdir"
		for s in preinstall postinstall preremove postremove; do
			# The one script serves both packages: each gets its name set at the top.
			sed "0,/^set -e\$/s//set -e\nSLURM_LLM_PACKAGE=$pkg/" "scripts/package/$s.sh" >"$scriptdir/$s.sh"
		done
		conf=$work/$pkg-$fmt.yaml
		emit_config "$pkg" "$fmt" "$stage" "$envfile" "$sites" "$scriptdir" >"$conf"
		go tool nfpm package --config "$conf" --packager "$fmt" --target "$out/" >/dev/null
	done
done
ls -1 "$out"/slurm-llm-*"$release"*
