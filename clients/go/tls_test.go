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
	lock := must(client.Lock(context.Background(), "go/tls", 200*time.Millisecond))
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
	var lost *monolock.LostError
	if !errors.As(err, &lost) || lost.Reason != monolock.ReasonServerError || lost.Code != 0x18 || monolock.IsTemporary(err) {
		t.Fatalf("an ACL refusal: %v", err)
	}
	contains(t, err, "0x18 (not authorized for lock)")
}

func TestTheWrongPortIsNamed(t *testing.T) {
	p := newPKI(t)
	srv := startServer(t, p.serverArgs(false)...)
	plain := newClient(t, srv.addr)
	_, err := plain.Lock(context.Background(), "go/port", time.Second)
	var lost *monolock.LostError
	if !errors.As(err, &lost) || lost.Reason != monolock.ReasonProtocol || monolock.IsTemporary(err) {
		t.Fatalf("plain TCP to a TLS port: %v", err)
	}
	contains(t, err, "the server speaks TLS: connect with TLS")
	_, err = newClient(t, srv.admin).Lock(context.Background(), "go/port", time.Second)
	contains(t, err, "an HTTP server answered: this is not the lock protocol's port")
}
