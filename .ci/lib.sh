# Helpers for the setup steps in .ci/setup.d/ (sourced, not run).

# need_apt PACKAGE... : install the Debian packages that are not installed yet.
# Runs `apt-get update` once per run of .ci/test; needs root (or sudo).
need_apt() {
    local missing=()
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "setup: the tests need the Debian packages ${missing[*]}: install them as root" >&2
            return 1
        }
        sudo=(sudo)
    fi
    if [ -z "${MONOLOCK_APT_UPDATED:-}" ]; then
        "${sudo[@]}" apt-get update -qq
        export MONOLOCK_APT_UPDATED=1
    fi
    echo "setup: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
