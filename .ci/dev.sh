#!/usr/bin/env bash
# The one bootstrap script behind the README's quickstart, on Debian/Ubuntu:
#
#   bash .ci/dev.sh demo [demo options]   # workers race for one lock on a throwaway ZooKeeper
#   bash .ci/dev.sh test [pytest args]    # ruff, mypy, import circles, mkdocs, wheel smoke, pytest
#   bash .ci/dev.sh bench [run.py args]   # aiozklock vs aiozk, kazoo, Curator, etcd, Redis
#   bash .ci/dev.sh setup                 # only install what is missing
#
# It installs what it needs: ZooKeeper and a Java runtime from apt (unless $ZOOKEEPER_HOME or
# Debian's jars are there), PostgreSQL's server binaries and redis-server for the fencing
# tests ('setup' and 'test'; the tests start their own servers on free ports), python3-venv if
# needed, and the package with its dev dependency group into .venv. A second run skips the
# install while pyproject.toml is unchanged (the
# stamp is .venv/.aiozklock-installed). Works without stdin and with CI=true. 'bench' also
# installs the 'bench' group (stamp .venv/.aiozklock-bench-installed) and, for the Curator
# column, Debian's libcurator-recipes-java and a JDK (javac) when apt has them ('test'
# installs those two as well, for the interoperability tests' Curator peer), and for the
# etcd and Redis columns etcd-server and redis-server.
#
# Environment: PYTHON (interpreter for .venv, >= 3.11; default: the first of python3,
# python3.13, python3.12, python3.11 that is recent enough), ZOOKEEPER_HOME,
# AIOZKLOCK_ZK_HOSTS (tests use these servers instead of starting their own),
# AIOZKLOCK_PG_DSN (the fence tests use this PostgreSQL instead of starting their own),
# AIOZKLOCK_REDIS_URL (likewise for Redis: redis://host:port/db),
# AIOZKLOCK_DOCS_SITE (set by 'test' for pytest: the site it built, which
# tests/test_docs_api.py reads instead of building its own),
# AIOZKLOCK_TEST_TIMEOUT (bound for the whole pytest run in seconds, default 2700; 0: none),
# AIOZKLOCK_TEST_WORKERS (pytest-xdist workers, default 4, each with its own ZooKeeper: the
# tests mostly wait on servers and clocks, so 4 fit on 2 cores; 5 stalled event loops and
# servers past a 2 s session's silence bound; 0: one process).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
STAMP="$VENV/.aiozklock-installed"
MIN_PYTHON="3.11"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
# Bytecode goes to a cache outside the tree (the tree stays clean), pytest's rewritten modules
# too: its workers then load them instead of each rewriting about 440 (its plugins'
# distributions, aiozklock's included, and the tests): 19 -> 4 s of collection each.
# (PYTHONDONTWRITEBYTECODE, which a CI machine's environment may set, would keep it empty.)
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-${TMPDIR:-/tmp}/aiozklock-pycache-$(id -un)}"
unset PYTHONDONTWRITEBYTECODE

if [ -t 2 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
say() { printf '%s==> %s%s\n' "$BOLD" "$*" "$PLAIN" >&2; }
die() { printf 'dev.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

# ---------------------------------------------------------------- system packages (apt)

APT_UPDATED=0
SUDO=()
apt_prepare() {  # check that apt can be used, and run 'apt-get update' once
    command -v apt-get >/dev/null 2>&1 \
        || die "need to install '$*' but apt-get is not available: install it by hand"
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to apt-get install $*"
        SUDO=(sudo -n)  # never prompt: there may be no stdin (CI)
    fi
    if [ "$APT_UPDATED" -eq 0 ]; then
        say "apt-get update"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q \
            || die "apt-get update failed (no sudo rights? run: sudo apt-get update)"
        APT_UPDATED=1
    fi
}

apt_install() {
    apt_prepare "$@"
    say "apt-get install $*"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "$@" \
        || die "apt-get install $* failed"
}

apt_has() {  # apt_has PACKAGE: apt can install PACKAGE (updates the lists first)
    command -v apt-get >/dev/null 2>&1 || return 1
    apt_prepare "$1"
    local policy
    policy="$(apt-cache policy "$1" 2>/dev/null || true)"
    grep -q '^ *Candidate: [^(]' <<<"$policy"
}

have_zookeeper() {
    if [ -n "${ZOOKEEPER_HOME:-}" ]; then
        compgen -G "$ZOOKEEPER_HOME/zookeeper*.jar" >/dev/null \
            || compgen -G "$ZOOKEEPER_HOME/lib/zookeeper*.jar" >/dev/null
    else
        [ -f /usr/share/java/zookeeper.jar ]
    fi
}

have_java() {
    if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then return 0; fi
    command -v java >/dev/null 2>&1
}

ensure_zookeeper() {
    if ! have_zookeeper; then
        if [ -n "${ZOOKEEPER_HOME:-}" ]; then
            die "ZOOKEEPER_HOME=$ZOOKEEPER_HOME holds no zookeeper*.jar (nor lib/zookeeper*.jar)"
        fi
        # Debian's 'zookeeper' holds the jars only (the service is 'zookeeperd'): nothing
        # starts on port 2181. It depends on a Java runtime.
        apt_install zookeeper
        have_zookeeper || die "apt-get installed zookeeper but /usr/share/java/zookeeper.jar is missing"
    fi
    if ! have_java; then
        apt_install default-jre-headless
    fi
}

ensure_etcd() {  # the benchmarks' etcd columns: the runner starts its own servers on free ports
    command -v etcd >/dev/null 2>&1 && return 0
    # Debian's package also enables a service where systemd runs; the runner never uses it.
    if ! apt_has etcd-server; then
        say "apt has no etcd-server: the benchmarks will skip the etcd columns"
        return 0
    fi
    apt_install etcd-server
}

ensure_redis() {  # the fencing tests start throwaway redis-servers (aiozklock.testing.RedisServer)
    command -v redis-server >/dev/null 2>&1 && return 0
    # Debian's package also enables a service on port 6379 where systemd runs; the tests
    # never use it (they start their own on free ports).
    apt_install redis-server
    command -v redis-server >/dev/null 2>&1 || die "apt-get installed redis-server but it is not on PATH"
}

have_postgres() {
    compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || command -v pg_ctl >/dev/null 2>&1
}

ensure_postgres() {  # the fence tests start their own server with initdb + pg_ctl
    have_postgres && return 0
    # Debian's package also creates the 'postgres' user that the server runs as when we are
    # root (it refuses root); the cluster it sets up is left alone (no service is needed).
    apt_install postgresql
    have_postgres || die "apt-get installed postgresql but no pg_ctl was found"
}

have_curator() { [ -f /usr/share/java/curator-recipes.jar ]; }

ensure_curator() {  # optional: without it the benchmarks skip Curator, and so do the interop tests
    local packages=()
    have_curator || packages+=(libcurator-recipes-java)
    command -v javac >/dev/null 2>&1 || packages+=(default-jdk-headless)
    [ "${#packages[@]}" -gt 0 ] || return 0
    local package
    for package in "${packages[@]}"; do
        if ! apt_has "$package"; then
            say "apt has no $package: the benchmarks will skip Apache Curator"
            return 0
        fi
    done
    apt_install "${packages[@]}"
}

# ---------------------------------------------------------------- python and .venv

python_ok() {  # python_ok EXE: EXE runs and is >= MIN_PYTHON
    "$1" -c "import sys; sys.exit(sys.version_info < (${MIN_PYTHON/./, }))" >/dev/null 2>&1
}

find_python() {  # prints the interpreter to build .venv with, or fails
    local candidate
    if [ -n "${PYTHON:-}" ]; then
        echo "$PYTHON"
        return
    fi
    for candidate in python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
            echo "$candidate"
            return
        fi
    done
    return 1
}

venv_ok() { [ -x "$VENV/bin/python" ] && python_ok "$VENV/bin/python"; }

make_venv() {
    local python="$1" version
    version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    rm -rf "$VENV"
    say "creating .venv with $python (Python $version)"
    if "$python" -m venv "$VENV" >/dev/null 2>&1; then return 0; fi
    # Debian/Ubuntu ship venv's ensurepip separately, in python3-venv / python3.X-venv.
    rm -rf "$VENV"
    local packages=() package
    for package in python3-venv "python$version-venv"; do
        if apt_has "$package"; then packages+=("$package"); fi
    done
    [ "${#packages[@]}" -gt 0 ] || die "'$python -m venv' fails and apt has no python3-venv"
    apt_install "${packages[@]}"
    "$python" -m venv "$VENV" || die "'$python -m venv' fails even after installing ${packages[*]}"
}

install_requirements_without_group() {  # install_requirements_without_group GROUP
    # pip < 25.1 has no --group: resolve the PEP 735 group from pyproject.toml ourselves.
    local requirements
    requirements="$("$VENV/bin/python" - "$1" <<'EOF'
import sys
import tomllib

groups = tomllib.load(open("pyproject.toml", "rb")).get("dependency-groups", {})

def resolve(name, seen=()):
    for item in groups[name]:
        if isinstance(item, dict):
            yield from resolve(item["include-group"], (*seen, name))
        else:
            yield item

print("\n".join(dict.fromkeys(resolve(sys.argv[1]))))
EOF
)"
    local args=()
    mapfile -t args <<<"$requirements"
    "$VENV/bin/python" -m pip install -q -e . "${args[@]}"
}

stamp_value() {
    # What the install depends on: the dependencies, and the interpreter inside .venv.
    { cat pyproject.toml; "$VENV/bin/python" -VV; } | sha256sum | cut -d' ' -f1
}

ensure_venv() {
    if venv_ok && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_value)" ]; then
        return 0  # set up already, and pyproject.toml unchanged since
    fi
    if ! venv_ok; then
        local python
        if [ -n "${PYTHON:-}" ] && ! python_ok "$PYTHON"; then
            die "PYTHON=$PYTHON is not a Python >= $MIN_PYTHON"
        fi
        if ! python="$(find_python)" && apt_has python3.11; then
            apt_install python3.11  # e.g. Ubuntu 22.04, whose python3 is 3.10
        fi
        python="$(find_python)" || die "aiozklock needs Python >= $MIN_PYTHON, but python3 is \
$(python3 -V 2>&1 || echo missing) and no python3.11+ was found. Install one (Debian 12 and \
Ubuntu 24.04 have it as python3) and run again, e.g.: PYTHON=python3.12 bash .ci/dev.sh $1"
        make_venv "$python"
    fi
    say "installing aiozklock (editable) with the dev dependency group into .venv"
    rm -f "$STAMP"
    "$VENV/bin/python" -m pip install -q -U pip || die "could not upgrade pip in .venv"
    local pip_help  # captured first: 'grep -q' closing a pipe early would trip pipefail
    pip_help="$("$VENV/bin/python" -m pip install --help 2>/dev/null || true)"
    if grep -q -- '--group' <<<"$pip_help"; then
        "$VENV/bin/python" -m pip install -q -e . --group dev
    else
        say "this pip has no --group: installing the 'dev' group from pyproject.toml by hand"
        install_requirements_without_group dev
    fi
    stamp_value >"$STAMP"
}

ensure_bench_group() {  # the benchmark-only peers and tools, on top of ensure_venv
    local stamp="$VENV/.aiozklock-bench-installed"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(stamp_value)" ]; then
        return 0
    fi
    say "installing the bench dependency group (kazoo, matplotlib, py-spy, trio, aetcd, redis) into .venv"
    rm -f "$stamp"
    local pip_help
    pip_help="$("$VENV/bin/python" -m pip install --help 2>/dev/null || true)"
    if grep -q -- '--group' <<<"$pip_help"; then
        "$VENV/bin/python" -m pip install -q -e . --group bench \
            || die "could not install the bench dependency group into .venv"
    else
        install_requirements_without_group bench \
            || die "could not install the bench dependency group into .venv"
    fi
    stamp_value >"$stamp"
}

# ---------------------------------------------------------------- commands

run_tests() {
    local failed=() rc=0
    say "ruff check"
    "$VENV/bin/ruff" check . || failed+=("ruff check")
    say "ruff format --check"
    "$VENV/bin/ruff" format --check . || failed+=("ruff format --check")
    say "mypy (strict, see pyproject.toml)"
    "$VENV/bin/mypy" || failed+=("mypy")
    # tests/test_import_graph.py checks it too; here a circle fails fast, with the list.
    say "import graph: no circle among the package's modules"
    "$VENV/bin/python" "$ROOT/.ci/import_graph.py" || failed+=("import graph")
    # Meanwhile, one collection fills the bytecode cache with pytest's rewritten modules (on a
    # fresh machine each worker would rewrite them all at once) and makes the servers'
    # class-data archive (tests/_jvm_archive.py). Its verdict is the run's, below.
    "$VENV/bin/python" -m pytest --collect-only -q -p no:xdist >/dev/null 2>&1 &
    local warm=$!
    # Not --quiet: mkdocs 1.6 then drops the warnings that --strict counts, and passes.
    say "mkdocs build --strict (the documentation site: broken references fail)"
    # The site built here is the one tests/test_docs_api.py reads (AIOZKLOCK_DOCS_SITE): the
    # suite does not build it a second time. Removed once pytest is done.
    local site docs_site=()
    site="$(mktemp -d)"
    if NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --site-dir "$site"; then
        docs_site=(env "AIOZKLOCK_DOCS_SITE=$site")
    else
        failed+=("mkdocs build --strict")
    fi
    # The sdist and the wheel as PyPI gets them, smoke-tested in a clean venv (about 20 s).
    say "wheel smoke: build, twine check --strict, install into a clean venv, run"
    bash "$ROOT/.ci/wheel-smoke.sh" || failed+=("wheel smoke")
    wait "$warm" || true
    say "pytest $*"
    # A hard bound for the whole run (pytest-timeout bounds single tests, but not every kind
    # of hang): SIGINT first, so pytest reports and its ZooKeeper servers are stopped.
    local bound="${AIOZKLOCK_TEST_TIMEOUT:-2700}" runner=()
    if [ "$bound" != 0 ] && command -v timeout >/dev/null 2>&1; then
        runner=(timeout --signal=INT --kill-after=60 "$bound")
    fi
    # Workers first: a '-n' among the caller's arguments wins.
    local workers=(-n "${AIOZKLOCK_TEST_WORKERS:-4}" --dist worksteal)
    "${runner[@]}" "${docs_site[@]}" "$VENV/bin/python" -m pytest "${workers[@]}" "$@" || rc=$?
    rm -rf "$site"
    case "$rc" in
        0) ;;
        5) failed+=("pytest (no test was collected)") ;;
        124) failed+=("pytest (still running after ${bound} s: AIOZKLOCK_TEST_TIMEOUT)") ;;
        *) failed+=("pytest (exit $rc)") ;;
    esac
    if [ "${#failed[@]}" -gt 0 ]; then
        local joined
        joined="$(printf '%s, ' "${failed[@]}")"
        printf 'dev.sh test: FAILED: %s\n' "${joined%, }" >&2
        exit 1
    fi
    say "all checks passed"
}

main() {
    [ "$#" -ge 1 ] || usage
    local command="$1"
    shift
    case "$command" in
        demo)
            local arg needs_local_zk=1
            for arg in "$@"; do
                case "$arg" in --hosts | --hosts=* | -h | --help) needs_local_zk=0 ;; esac
            done
            [ "$needs_local_zk" -eq 0 ] || ensure_zookeeper
            ensure_venv "$command"
            exec "$VENV/bin/python" -m aiozklock demo "$@"
            ;;
        test)
            [ -n "${AIOZKLOCK_ZK_HOSTS:-}" ] || ensure_zookeeper
            [ -n "${AIOZKLOCK_REDIS_URL:-}" ] || ensure_redis
            [ -n "${AIOZKLOCK_PG_DSN:-}" ] || ensure_postgres
            ensure_curator  # the interoperability tests' Curator peer (they skip without)
            ensure_venv "$command"
            run_tests "$@"
            ;;
        bench)
            local arg needs_local_zk=1
            for arg in "$@"; do
                case "$arg" in --hosts | --hosts=* | -h | --help) needs_local_zk=0 ;; esac
            done
            [ "$needs_local_zk" -eq 0 ] || ensure_zookeeper
            ensure_curator
            ensure_etcd   # the etcd and Redis columns (the runner starts both on free ports)
            ensure_redis
            ensure_venv "$command"
            ensure_bench_group
            exec "$VENV/bin/python" benchmarks/run.py "$@"
            ;;
        setup)
            ensure_zookeeper
            ensure_redis
            ensure_postgres
            ensure_venv "$command"
            ;;
        -h | --help | help) usage ;;
        *) printf 'dev.sh: unknown command %q\n\n' "$command" >&2; usage ;;
    esac
}

main "$@"
