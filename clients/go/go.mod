module monolock.dev/go/monolock

go 1.19
