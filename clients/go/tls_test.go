package monolock_test

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"monolock.dev/go/monolock"
)

func TestTLS(t *testing.T) {
	p := newPKI(t)
	srv := startServer(t, p.serverArgs(false)...)
	client := newClient(t, srv.addr, monolock.WithTLS(p.config(false)))
	// A lease short enough for several heartbeats in a second, long enough
	// (a 800 ms deadline) that a loaded machine's stall does not lose it.
	lock := must(client.Lock(context.Background(), "go/tls", time.Second))
	if !lock.Held() || srv.holderToken("go/tls") != lock.Token() {
		t.Fatal("not held over TLS")
	}
	// Heartbeats over TLS: each read that waits for the next one times out
	// and resumes.
	for i := 0; i < 5; i++ {
		confirmedAfter(t, lock)
	}
	if !lock.Held() {
		t.Fatalf("lost over TLS: %v", lock.Err())
	}
	// A waiter over TLS is pushed the lock.
	granted := make(chan *monolock.Lock, 1)
	go func() {
		next, err := client.Lock(context.Background(), "go/tls", 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		granted <- next
	}()
	eventually(t, "the TLS waiter to queue", func() bool { return srv.waiters("go/tls") == 1 })
	noErr(t, lock.Release())
	next := <-granted
	if next == nil || next.Token() <= lock.Token() {
		t.Fatal("the waiter was not granted after the release")
	}
	noErr(t, next.Release())

	// The server's certificate names 127.0.0.1 and localhost.
	config := p.config(false)
	config.ServerName = "localhost"
	noErr(t, must(newClient(t, srv.addr, monolock.WithTLS(config)).Lock(context.Background(), "go/tls", time.Second)).Release())
	config.ServerName = "elsewhere.example"
	_, err := newClient(t, srv.addr, monolock.WithTLS(config)).Lock(context.Background(), "go/tls", time.Second)
	var hostname x509.HostnameError
	if !errors.As(err, &hostname) {
		t.Fatalf("a wrong server name: %v", err)
	}
}

func TestAnUntrustedServerIsAPermanentConnectError(t *testing.T) {
	p := newPKI(t)
	srv := startServer(t, p.serverArgs(false)...)
	config := p.config(false)
	config.RootCAs = p.otherCA
	// A standby behind it is not tried: the same handshake fails the same way.
	client := newClient(t, srv.addr+","+srv.addr, monolock.WithTLS(config))
	_, err := client.Lock(context.Background(), "go/untrusted", time.Second)
	var connect *monolock.ConnectError
	var tlsErr *monolock.TLSError
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &connect) || !errors.As(err, &tlsErr) || !errors.As(err, &unknown) {
		t.Fatalf("an untrusted server: %v", err)
	}
	if len(connect.Attempts) != 1 || monolock.IsTemporary(err) {
		t.Fatalf("attempts %d, temporary %t", len(connect.Attempts), monolock.IsTemporary(err))
	}
	contains(t, err, srv.addr, "TLS handshake")
}

func TestMutualTLSIdentityAndRefusal(t *testing.T) {
	p := newPKI(t)
	srv := startServer(t, p.serverArgs(true)...)
	client := newClient(t, srv.addr, monolock.WithTLS(p.config(true)))
	lock := must(client.Lock(context.Background(), "go/mtls", 5*time.Second))
	holder := srv.lock("go/mtls")["holder"].(map[string]interface{})
	if holder["identity"] != clientIdentity || uint64(holder["token"].(float64)) != lock.Token() {
		t.Fatalf("the server sees %v", holder)
	}
	noErr(t, lock.Release())

	anonymous := newClient(t, srv.addr, monolock.WithTLS(p.config(false)))
	_, err := anonymous.Lock(context.Background(), "go/mtls", 5*time.Second)
	var connect *monolock.ConnectError
	var tlsErr *monolock.TLSError
	if !errors.As(err, &connect) || !errors.As(err, &tlsErr) || monolock.IsTemporary(err) {
		t.Fatalf("a client without a certificate: %v", err)
	}
	contains(t, err, srv.addr)
}

func TestAnACLRefusalIsAPermanentLoss(t *testing.T) {
	p := newPKI(t)
	acl := filepath.Join(p.dir, "acl.json")
	noErr(t, os.WriteFile(acl, []byte(`{"rules": [{"identity": "`+clientIdentity+`", "locks": ["allowed/*"]}]}`), 0o600))
	srv := startServer(t, append(p.serverArgs(true), "--acl-file", acl)...)
	client := newClient(t, srv.addr, monolock.WithTLS(p.config(true)))
	noErr(t, must(client.Lock(context.Background(), "allowed/job", 5*time.Second)).Release())
	_, err := client.Lock(context.Background(), "denied", 5*time.Second)
	code, says := uint8(0x24), "0x24 (not authorized for lock)"
	if v1Pass() {
		code, says = 0x18, "0x18 (not authorized for lock)"
	}
	var lost *monolock.LostError
	if !errors.As(err, &lost) || lost.Reason != monolock.ReasonServerError || lost.Code != code || monolock.IsTemporary(err) {
		t.Fatalf("an ACL refusal: %v", err)
	}
	contains(t, err, says)
	// The refusal is one claim's: the same client goes on.
	noErr(t, must(client.Lock(context.Background(), "allowed/job", 5*time.Second)).Release())
}

// A wrong port is a connect error naming the problem and the address,
// never a loss, and it is not temporary.
func TestTheWrongPortIsAConnectErrorNamingTheProblem(t *testing.T) {
	p := newPKI(t)
	tlsSrv := startServer(t, p.serverArgs(false)...)
	plainSrv := shared(t)
	permanent := func(what string, err error, parts ...string) {
		t.Helper()
		var connect *monolock.ConnectError
		var lost *monolock.LostError
		if !errors.As(err, &connect) || errors.As(err, &lost) || monolock.IsTemporary(err) {
			t.Fatalf("%s: %v", what, err)
		}
		contains(t, err, parts...)
	}
	_, err := newClient(t, tlsSrv.addr).Lock(context.Background(), "go/port", time.Second)
	permanent("plain TCP to a TLS port", err, tlsSrv.addr+" expects TLS")
	_, err = newClient(t, tlsSrv.admin).Lock(context.Background(), "go/port", time.Second)
	permanent("the admin HTTP port", err, tlsSrv.admin+" is not a monolock server: an HTTP server answered")
	_, err = newClient(t, plainSrv.addr, monolock.WithTLS(p.config(false))).Lock(context.Background(), "go/port", time.Second)
	var tlsErr *monolock.TLSError
	if !errors.As(err, &tlsErr) {
		t.Fatalf("TLS to a plain port: %v", err)
	}
	permanent("TLS to a plain port", err, plainSrv.addr+" does not speak TLS")
}
