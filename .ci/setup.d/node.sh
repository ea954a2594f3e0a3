# The Node.js client (clients/node) is built and tested with Node.js 20 or
# newer and npm: crates/monolock/tests/node_client.rs runs its suite, and
# examples/tests/fenced_postgres.rs its Node form. Debian bookworm's own
# nodejs is 18: a machine without Node 20 gets Debian's packages only to
# find npm, and the Node tests then fail saying which version they need.
node_major() { node --version 2>/dev/null | sed -n 's/^v\([0-9]*\)\..*/\1/p'; }
if [ -z "$(node_major)" ] || ! command -v npm >/dev/null 2>&1; then
    need_apt nodejs npm
fi
if [ -z "$(node_major)" ] || [ "$(node_major)" -lt 20 ]; then
    echo "setup: the Node client needs Node.js 20 or newer; found $(node --version 2>/dev/null || echo none)" >&2
else
    # TypeScript and Node's type declarations, pinned by
    # clients/node/package-lock.json (development dependencies only), for
    # the tests; the package itself ships its build (dist/src) and needs
    # none of them to install.
    if [ ! -d clients/node/node_modules/typescript ]; then
        echo "setup: npm ci in clients/node"
        (cd clients/node && npm ci --no-audit --no-fund --loglevel=error)
    fi
    # The Node form of the fenced-postgres recipe (examples/node): pg, and
    # the client linked from clients/node.
    if [ ! -d examples/node/node_modules/pg ]; then
        echo "setup: npm ci in examples/node"
        (cd examples/node && npm ci --no-audit --no-fund --loglevel=error)
    fi
fi
unset -f node_major
