#!/usr/bin/env bash
# Install everything the local stack and the test suite need, once.
#
#   Debian packages   PostgreSQL, MariaDB, Redis (apt-get; only what is missing);
#                     for the tests: chromium (the lag page), prometheus (its promtool
#                     checks deploy/monitoring; its service stays off) and systemd's
#                     systemd-analyze (scores the service unit's sandbox)
#   Maven Central     Kafka, Kafka Connect, Debezium plugins, Elasticsearch, Spark
#                     Kafka source + Delta Lake: pinned in deploy/local/pom.xml
#   Go module proxy   SeaweedFS (the S3 server), built from its module source: pinned in stack.env
#   PyPI              this package and its pinned dependencies, in a virtualenv
#   Spark             a class archive its driver JVM starts from (cdcsync/class_archive.py)
#
# Downloads are cached under the state directory (Maven repository, pip cache)
# and each step leaves a stamp keyed by its inputs, so a second run does nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
state="$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import stack; print(stack.STATE)' "$here")"
stamps="$state/stamps"
mkdir -p "$state/lib" "$state/plugins" "$state/opt" "$stamps"

step() { printf '==> %s\n' "$*"; }
fingerprint() { cat "$@" | sha256sum | cut -c1-16; }

# ---- Debian packages -------------------------------------------------------
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v mariadbd >/dev/null || missing+=(mariadb-server)
command -v mariadb >/dev/null || missing+=(mariadb-client)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v unzip >/dev/null || missing+=(unzip)
command -v mvn >/dev/null || missing+=(maven)
command -v chromium >/dev/null || missing+=(chromium)
command -v promtool >/dev/null || missing+=(prometheus)
command -v systemd-analyze >/dev/null || missing+=(systemd)  # tests score the service unit's sandbox with it
command -v jcmd >/dev/null || missing+=(openjdk-17-jdk-headless)  # tests count the driver JVM's live objects with it
if ((${#missing[@]})); then
  step "apt-get install ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: missing Debian packages: ${missing[*]}; install them as root (sudo $0)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  # Only promtool is wanted: the package's own Prometheus service (:9090) is
  # stopped and disabled, so it neither runs beside the stack nor at boot.
  if [[ " ${missing[*]} " == *" prometheus "* ]]; then
    if [ -d /run/systemd/system ]; then
      systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    else
      invoke-rc.d prometheus stop >/dev/null 2>&1 || true
      update-rc.d prometheus disable >/dev/null 2>&1 || true
    fi
  fi
fi

# Databases and Elasticsearch refuse to run as root: when root, they run as an
# unprivileged service user that owns their data directories.
if [ "$(id -u)" -eq 0 ] && ! id cdcsync >/dev/null 2>&1; then
  step "creating service user cdcsync"
  useradd --system --no-create-home --shell /usr/sbin/nologin cdcsync
fi

# ---- Maven Central ---------------------------------------------------------
# A profile's stamp is keyed on what decides its jars: the pom's properties and
# that profile's element, comments left out. Editing one profile (or a comment)
# re-resolves only that profile, and it resolves into a temporary directory
# that replaces the old one only when Maven succeeded: a broken pom leaves the
# jars of the running stack in place.
profile_key() {  # profile
  python3 - "$here/pom.xml" "$1" <<'PY'
import hashlib, sys, xml.etree.ElementTree as ET
ns = {"m": "http://maven.apache.org/POM/4.0.0"}
root = ET.parse(sys.argv[1]).getroot()  # ElementTree drops comments
parts = [root.find("m:properties", ns)]
parts += [p for p in root.iterfind("m:profiles/m:profile", ns) if p.findtext("m:id", namespaces=ns) == sys.argv[2]]
if len(parts) != 2 or parts[0] is None:
    sys.exit(f"pom.xml has no properties or no profile {sys.argv[2]}")
text = b"".join(ET.tostring(p) for p in parts)
print(hashlib.sha256(text).hexdigest()[:16])
PY
}
mvn_profile() {  # profile, output directory
  local profile=$1 out=$2 key
  key="$(profile_key "$profile")-$profile"
  if [ "$(cat "$stamps/mvn-$profile" 2>/dev/null)" = "$key" ] && [ -d "$out" ]; then
    return
  fi
  step "resolving $profile jars (Maven)"
  rm -rf "$out.partial"
  mkdir -p "$state/logs"
  if ! mvn -B -Dstyle.color=never -s "$here/maven-settings.xml" -f "$here/pom.xml" -P "$profile" \
    -Dmaven.repo.local="$state/m2" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$out.partial" >"$state/logs/mvn-$profile.log" 2>&1; then
    rm -rf "$out.partial"
    echo "error: Maven could not resolve profile $profile; log: $state/logs/mvn-$profile.log" >&2
    grep -E "ERROR" "$state/logs/mvn-$profile.log" | head -5 >&2
    exit 1
  fi
  rm -rf "$out"
  mv "$out.partial" "$out"
  echo "$key" >"$stamps/mvn-$profile"
}
mvn_profile kafka "$state/lib/kafka"
mvn_profile connect "$state/lib/connect"
mvn_profile debezium-postgres "$state/plugins/debezium-postgres"
mvn_profile debezium-mariadb "$state/plugins/debezium-mariadb"
mvn_profile spark "$state/lib/spark"
mvn_profile elasticsearch "$state/lib/elasticsearch"
es_zip="$(ls "$state"/lib/elasticsearch/elasticsearch-*.zip)"
es_dir="$state/opt/$(basename "$es_zip" .zip)"
if [ ! -x "$es_dir/bin/elasticsearch" ]; then
  step "unpacking $(basename "$es_zip")"
  rm -rf "$state"/opt/elasticsearch-*
  unzip -q -o "$es_zip" -d "$state/opt"
fi

# ---- Go module proxy -------------------------------------------------------
# SeaweedFS, the stack's S3 server. `go install MODULE@VERSION` refuses a module
# whose go.mod has replace directives, as SeaweedFS's has, so its source is
# fetched (checked against the checksum database) and built in place, where its
# own go.mod and go.sum pin every dependency. 5 to 10 minutes on 2 cores, once
# per version; the module cache stays in the state directory, the build cache goes.
weed_module="$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import stack; print(stack.ENV["SEAWEEDFS_MODULE"])' "$here")"
weed="$state/opt/seaweedfs-$weed_module/weed"
if [ ! -x "$weed" ]; then
  go_bin="$(command -v go || echo /usr/local/go/bin/go)"
  if [ ! -x "$go_bin" ]; then
    echo "error: SeaweedFS is built with Go (1.21 or newer; it fetches the toolchain SeaweedFS asks for): install it" >&2
    exit 1
  fi
  step "building SeaweedFS $weed_module (Go module proxy, 5-10 min)"
  go_env=(env GOPATH="$state/go" GOCACHE="$state/go/cache" GOFLAGS="${GOFLAGS:-} -modcacherw")
  source_dir="$("${go_env[@]}" "$go_bin" mod download -json "github.com/seaweedfs/seaweedfs@$weed_module" |
    python3 -c 'import json, sys; found = json.load(sys.stdin); print(found.get("Dir") or sys.exit(found.get("Error")))')"
  mkdir -p "$state/logs" "$(dirname "$weed")"
  if ! (cd "$source_dir" && "${go_env[@]}" "$go_bin" build -trimpath -ldflags="-s -w" -o "$weed.partial" ./weed) \
    >"$state/logs/go-seaweedfs.log" 2>&1; then
    echo "error: building SeaweedFS failed; log: $state/logs/go-seaweedfs.log" >&2
    tail -5 "$state/logs/go-seaweedfs.log" >&2
    exit 1
  fi
  mv "$weed.partial" "$weed"
  find "$state/opt" -maxdepth 1 -name 'seaweedfs-*' ! -path "$(dirname "$weed")" -exec rm -rf {} +  # other versions
  "${go_env[@]}" "$go_bin" clean -cache
fi

# ---- PyPI ------------------------------------------------------------------
venv="$state/venv"
key="$(fingerprint "$repo/pyproject.toml")-$repo"
if [ "$(cat "$stamps/venv" 2>/dev/null)" != "$key" ] || [ ! -x "$venv/bin/cdcsync" ]; then
  step "installing cdcsync and its pinned Python dependencies into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  export PIP_CACHE_DIR="$state/pip-cache" PIP_DISABLE_PIP_VERSION_CHECK=1
  "$venv/bin/pip" install -q -e "$repo[dev]"
  echo "$key" >"$stamps/venv"
fi
# Spark's classes in an archive a driver JVM maps at start (cdcsync/class_archive.py): ~4 s less for a
# bootstrap or reindex from the source. Made once per JDK and jar set; without it Spark only starts slower.
if ! "$venv/bin/python" -m cdcsync.class_archive --exists; then
  step "making Spark's class archive (once per JDK and jar set, ~1 min)"
  "$venv/bin/python" -m cdcsync.class_archive || true
fi
# `cdcsync` itself on the PATH, so a newcomer's first `cdcsync --help` after `make demo` works:
# /usr/local/bin as root, ~/.local/bin otherwise (both are on a default PATH).
bin_dir="$HOME/.local/bin"
[ "$(id -u)" = 0 ] && bin_dir=/usr/local/bin
if mkdir -p "$bin_dir" 2>/dev/null && ln -sfn "$venv/bin/cdcsync" "$bin_dir/cdcsync" 2>/dev/null; then
  on_path="$bin_dir/cdcsync -> $venv/bin/cdcsync"
else
  on_path="not linked: run $venv/bin/cdcsync, or add $venv/bin to PATH"
fi
step "installed; state directory: $state; cdcsync: $on_path"
