#!/bin/sh
# keepalived health check for monolock (deploy/keepalived/keepalived.conf).
#
# Usage: monolock-check.sh [OPS_ADDRESS [VIP]]
#   OPS_ADDRESS  the local --ops-listen address (default 127.0.0.1:9090)
#   VIP          the virtual IP; when it is not on this node, monolock is
#                not meant to run here (keepalived starts it on takeover),
#                so there is nothing to check
#
# Exit 0 when the local monolock answers /readyz with 200 (also during the
# startup grace, when it accepts and queues), non-zero when it is down or
# shutting down.
ops=${1:-127.0.0.1:9090}
vip=${2:-}
if [ -n "$vip" ] && ! ip -o addr show | grep -q " ${vip%/*}/"; then
	exit 0
fi
exec curl --silent --fail --output /dev/null --max-time 1 "http://$ops/readyz"
