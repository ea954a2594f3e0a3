# monolock-bench's smoke test runs the Redis side of every comparison:
# Debian's redis-server (the bench starts its own instance on loopback).
need_apt redis-server
