#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian machine, and nothing twice:
#   - Debian's zookeeper package (and through it a Java runtime) when missing, and
#     the packages named as arguments (redis-server, redis-tools, chromium) when missing;
#   - a virtualenv in .venv with the project and its dev, fast, bench and spark
#     extras (dev: the test and lint tools and pdoc for `make docs`; spark:
#     PySpark, which runs on the same Java), rebuilt only when pyproject.toml
#     changed since the last install.
# Used by `make run` and `make test`; safe to run any number of times.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || need_apt+=(zookeeper)
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
for extra in "$@"; do
    case "$extra" in
        redis-tools) command -v redis-benchmark >/dev/null 2>&1 || need_apt+=(redis-tools) ;;
        redis-server) command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server) ;;
        chromium) command -v chromium >/dev/null 2>&1 || need_apt+=(chromium) ;;
    esac
done
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "bootstrap: installing ${need_apt[*]} with apt-get" >&2
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

python=${PYTHON:-python3}
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
    echo "bootstrap: creating .venv with the project and its extras" >&2
    [ -x .venv/bin/python ] || "$python" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e '.[dev,fast,bench,spark]'
    rm -f .venv/.installed-*
    touch "$stamp"
fi
