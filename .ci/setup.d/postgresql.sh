# The recipes in examples/ are tested against a real PostgreSQL: the tests
# start a throwaway cluster with the server binaries (initdb, pg_ctl) of
# Debian's package, as the unprivileged `postgres` user it creates.
need_apt postgresql
