# The Go client's tests (crates/monolock/tests/go_client.rs runs `go vet`
# and `go test` in clients/go): the Go toolchain from Debian's golang-go
# (1.19 on bookworm; the module needs nothing but the standard library, so
# nothing is downloaded).
need_apt golang-go
