// Command monolock-conformance-driver is the Go client's driver for the
// cross-language conformance suite (clients/conformance/DRIVER.md): JSON
// commands, one per line, on standard input; one JSON reply per line on
// standard output, in order. It is a thin shell around the client's
// public API and holds no protocol logic of its own.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"monolock.dev/go/monolock"
)

// maxLine bounds one command line.
const maxLine = 1 << 20

type tlsFiles struct {
	CA         string `json:"ca"`
	Cert       string `json:"cert"`
	Key        string `json:"key"`
	ServerName string `json:"server_name"`
}

type command struct {
	ID        json.RawMessage `json:"id"`
	Cmd       string          `json:"cmd"`
	Address   string          `json:"address"`
	TLS       *tlsFiles       `json:"tls"`
	ForceV1   bool            `json:"force_v1"`
	Handle    string          `json:"handle"`
	Name      string          `json:"name"`
	LeaseMS   float64         `json:"lease_ms"`
	WaitMS    *int64          `json:"wait_ms"`
	TimeoutMS int64           `json:"timeout_ms"`
	Count     int64           `json:"count"`
	Value     *string         `json:"value"`
}

type reply map[string]interface{}

// failure is a command that failed: its reply's error object.
type failure struct {
	kind      string
	reason    interface{} // string or nil
	message   string
	temporary bool // the client's own monolock.IsTemporary
}

func (f *failure) Error() string { return f.message }

func fail(kind, format string, args ...interface{}) *failure {
	return &failure{kind: kind, message: fmt.Sprintf(format, args...)}
}

type driver struct {
	client *monolock.Client
	// Handles of locks, observations and elections: one namespace.
	locks     map[string]*monolock.Lock
	watches   map[string]*monolock.Observation
	elections map[string]*election
}

func newDriver() *driver {
	return &driver{locks: map[string]*monolock.Lock{}, watches: map[string]*monolock.Observation{},
		elections: map[string]*election{}}
}

func main() {
	d := newDriver()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 4096), maxLine)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		var cmd command
		var r reply
		if err := json.Unmarshal([]byte(line), &cmd); err != nil {
			r = failed(&failure{kind: "other", message: "the command is not a JSON object of the driver protocol: " + err.Error()})
		} else {
			r = d.handle(cmd)
		}
		if cmd.ID != nil {
			r["id"] = cmd.ID
		} else {
			r["id"] = nil
		}
		if err := json.NewEncoder(out).Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "driver: cannot encode a reply:", err)
		}
		if err := out.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, "driver: standard output failed:", err)
			break
		}
		if cmd.Cmd == "exit" {
			break
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "driver: reading standard input:", err)
	}
	d.releaseAll()
}

func failed(f *failure) reply {
	return reply{"ok": false, "error": map[string]interface{}{
		"kind": f.kind, "reason": f.reason, "message": f.message, "temporary": f.temporary}}
}

func (d *driver) handle(cmd command) reply {
	fields, err := d.run(cmd)
	if err != nil {
		var f *failure
		if !errors.As(err, &f) {
			f = classify(err)
		}
		return failed(f)
	}
	r := reply{"ok": true}
	for k, v := range fields {
		r[k] = v
	}
	return r
}

func (d *driver) run(cmd command) (reply, error) {
	switch cmd.Cmd {
	case "open":
		return nil, d.open(cmd)
	case "exit":
		d.releaseAll()
		return nil, nil
	case "stats":
		return stats(), nil
	case "set_value", "observe", "next_state", "unobserve", "holder", "elect", "next_election_event", "resign":
		return d.runExt(cmd)
	case "lock", "try_lock", "cycles":
		if d.client == nil {
			return nil, fail("other", "no client: send open first")
		}
		return d.acquire(cmd)
	case "release":
		lock, err := d.lock(cmd.Handle)
		if err != nil {
			return nil, err
		}
		delete(d.locks, cmd.Handle)
		return nil, lock.Release()
	case "is_held":
		lock, err := d.lock(cmd.Handle)
		if err != nil {
			return nil, err
		}
		return reply{"held": lock.Held()}, nil
	case "check":
		lock, err := d.lock(cmd.Handle)
		if err != nil {
			return nil, err
		}
		return nil, lock.Err()
	case "token":
		lock, err := d.lock(cmd.Handle)
		if err != nil {
			return nil, err
		}
		return reply{"token": strconv.FormatUint(lock.Token(), 10)}, nil
	case "wait_lost":
		lock, err := d.lock(cmd.Handle)
		if err != nil {
			return nil, err
		}
		timer := time.NewTimer(time.Duration(cmd.TimeoutMS) * time.Millisecond)
		defer timer.Stop()
		select {
		case <-lock.Done():
			r := reply{"lost": true, "reason": reasonOf(lock.Err())}
			if err := lock.Err(); err != nil && r["reason"] != nil {
				r["message"] = err.Error()
			}
			return r, nil
		case <-timer.C:
			return reply{"lost": false}, nil
		}
	}
	return nil, fail("other", "unknown command %q", cmd.Cmd)
}

func (d *driver) lock(handle string) (*monolock.Lock, error) {
	lock, ok := d.locks[handle]
	if !ok {
		return nil, fail("unknown_handle", "no lock handle %q", handle)
	}
	return lock, nil
}

func (d *driver) open(cmd command) error {
	// force_v1: this client speaks protocol v1 only.
	var opts []monolock.Option
	if cmd.ForceV1 {
		opts = append(opts, monolock.WithProtocolV1())
	}
	if cmd.TLS != nil {
		config, err := tlsConfig(cmd.TLS)
		if err != nil {
			return err
		}
		opts = append(opts, monolock.WithTLS(config))
	}
	client, err := monolock.NewClient(cmd.Address, opts...)
	if err != nil {
		return err
	}
	d.client = client
	return nil
}

func tlsConfig(files *tlsFiles) (*tls.Config, error) {
	config := &tls.Config{ServerName: files.ServerName}
	if files.CA != "" {
		pem, err := os.ReadFile(files.CA)
		if err != nil {
			return nil, fail("tls", "cannot read the TLS CA file: %v", err)
		}
		config.RootCAs = x509.NewCertPool()
		if !config.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fail("tls", "the TLS CA file %s holds no PEM certificate", files.CA)
		}
	}
	if files.Cert != "" || files.Key != "" {
		cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		if err != nil {
			return nil, fail("tls", "the client certificate and key %s and %s: %v", files.Cert, files.Key, err)
		}
		config.Certificates = []tls.Certificate{cert}
	}
	return config, nil
}

func (d *driver) acquire(cmd command) (reply, error) {
	// Milliseconds on the wire, possibly with a fraction: converted
	// exactly, and judged by the client.
	lease := time.Duration(cmd.LeaseMS * 1e6)
	var opts []monolock.LockOption
	if cmd.Value != nil {
		opts = append(opts, monolock.WithValue(*cmd.Value))
	}
	switch cmd.Cmd {
	case "try_lock":
		lock, err := d.client.TryLock(context.Background(), cmd.Name, lease, opts...)
		if errors.Is(err, monolock.ErrNotAcquired) {
			return reply{"acquired": false}, nil
		}
		if err != nil {
			return nil, err
		}
		d.keep(cmd.Handle, lock)
		return reply{"acquired": true, "token": strconv.FormatUint(lock.Token(), 10)}, nil
	case "cycles":
		for i := int64(0); i < cmd.Count; i++ {
			lock, err := d.client.Lock(context.Background(), cmd.Name, lease)
			if err == nil {
				err = lock.Release()
			}
			if err != nil {
				return nil, err
			}
		}
		return reply{"count": cmd.Count}, nil
	}
	ctx := context.Background()
	if cmd.WaitMS != nil {
		if *cmd.WaitMS < 0 {
			return nil, fail("invalid_argument", "wait_ms %d is negative", *cmd.WaitMS)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*cmd.WaitMS)*time.Millisecond)
		defer cancel()
	}
	lock, err := d.client.Lock(ctx, cmd.Name, lease, opts...)
	if err != nil {
		return nil, err
	}
	d.keep(cmd.Handle, lock)
	return reply{"token": strconv.FormatUint(lock.Token(), 10)}, nil
}

// keep files a lock under its handle; a handle named again lets the
// previous lock go.
func (d *driver) keep(handle string, lock *monolock.Lock) {
	if old, ok := d.locks[handle]; ok {
		_ = old.Release()
	}
	d.locks[handle] = lock
}

func (d *driver) releaseAll() {
	for handle, e := range d.elections {
		_ = e.resign()
		delete(d.elections, handle)
	}
	for handle, obs := range d.watches {
		obs.Stop()
		delete(d.watches, handle)
	}
	for handle, lock := range d.locks {
		_ = lock.Release()
		delete(d.locks, handle)
	}
}

// classify maps the client's errors to the driver protocol's kinds.
func classify(err error) *failure {
	f := &failure{kind: "other", message: err.Error(), temporary: monolock.IsTemporary(err)}
	var lost *monolock.LostError
	var tlsErr *monolock.TLSError
	var connect *monolock.ConnectError
	switch {
	case errors.Is(err, monolock.ErrInvalidArgument):
		f.kind = "invalid_argument"
	case errors.Is(err, monolock.ErrNotAcquired):
		f.kind = "not_acquired"
	case errors.Is(err, monolock.ErrUnsupported):
		f.kind = "unsupported"
	case errors.As(err, &tlsErr):
		f.kind = "tls"
	case errors.As(err, &connect):
		f.kind = "connect"
	case errors.As(err, &lost):
		f.kind, f.reason = "lost", lost.Reason.String()
		if lost.Reason == monolock.ReasonServerError {
			f.kind = "server"
		}
	}
	return f
}

func reasonOf(err error) interface{} {
	var lost *monolock.LostError
	if errors.As(err, &lost) {
		return lost.Reason.String()
	}
	return nil
}

func stats() reply {
	r := reply{"goroutines": runtime.NumGoroutine()}
	if entries, err := os.ReadDir("/proc/self/fd"); err == nil {
		r["fds"] = len(entries) - 1 // less the descriptor of the listing itself
	}
	if status, err := os.Open("/proc/self/status"); err == nil {
		defer status.Close()
		lines := bufio.NewScanner(io.LimitReader(status, 1<<16))
		for lines.Scan() {
			if line := lines.Text(); strings.HasPrefix(line, "Threads:") {
				if n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Threads:"))); err == nil {
					r["threads"] = n
				}
			}
		}
	}
	return r
}
