# The VRRP failover scenario (crates/monolock-faults, vrrp-failover):
# keepalived from Debian, ip for the network namespaces, curl for the
# health check of deploy/keepalived/monolock-check.sh.
need_apt keepalived iproute2 curl
