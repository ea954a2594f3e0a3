# monolock exec's process tests: script(1) gives exec a pseudo-terminal
# (bsdutils), unshare(1) probes for PID namespaces (util-linux). Both are
# essential packages on Debian; listed so that a slimmed image still works.
need_apt bsdutils util-linux
