package monolock_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// patience bounds every wait on an event: long enough that only a real
// hang trips it.
const patience = 20 * time.Second

// monolockBin is the server executable: $MONOLOCK_BIN, else the
// repository's debug build.
func monolockBin(t testing.TB) string {
	if bin := os.Getenv("MONOLOCK_BIN"); bin != "" {
		return bin
	}
	bin, err := filepath.Abs("../../target/debug/monolock")
	if err == nil {
		if _, err = os.Stat(bin); err == nil {
			return bin
		}
	}
	t.Fatalf("no monolock binary: set MONOLOCK_BIN to a built `monolock` (cargo build -p monolock): %v", err)
	return ""
}

// server is `monolock serve` on free loopback ports, its addresses learnt
// from its JSON startup log.
type server struct {
	t     testing.TB
	cmd   *exec.Cmd
	addr  string
	admin string
	lines chan map[string]interface{}
	once  *sync.Once
}

func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-format", "json"}, extra...)
	cmd := exec.Command(monolockBin(t), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	s := &server{t: t, cmd: cmd, lines: make(chan map[string]interface{}, 1024), once: new(sync.Once)}
	t.Cleanup(s.stop)
	go s.follow(bufio.NewScanner(stderr))
	end := time.Now().Add(patience)
	for s.addr == "" || s.admin == "" {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("monolock serve exited before listening")
			}
			addr, _ := line["addr"].(string)
			switch line["message"] {
			case "listening":
				s.addr = addr
			case "admin API listening":
				s.admin = addr
			}
		case <-time.After(time.Until(end)):
			t.Fatalf("monolock serve did not start listening")
		}
	}
	return s
}

func (s *server) follow(lines *bufio.Scanner) {
	defer close(s.lines)
	for lines.Scan() {
		var line map[string]interface{}
		if json.Unmarshal(lines.Bytes(), &line) != nil {
			line = map[string]interface{}{"message": lines.Text()}
		}
		select {
		case s.lines <- line:
		default: // nobody reads the log now: drop the line
		}
	}
}

func (s *server) signal(sig syscall.Signal) {
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v: %v", sig, err)
	}
}

func (s *server) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
}

// waitExit waits for the server to exit by itself.
func (s *server) waitExit() {
	done := make(chan struct{})
	go func() {
		for range s.lines {
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(patience):
		s.t.Fatalf("monolock serve did not exit")
	}
}

var adminClient = &http.Client{Timeout: patience}

// request calls the admin API; nil for a 404.
func (s *server) request(method, path string) map[string]interface{} {
	s.t.Helper()
	req, err := http.NewRequest(method, "http://"+s.admin+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	// The admin API refuses changes without it (a web page cannot send it).
	req.Header.Set("X-Requested-By", "monolock-go-tests")
	resp, err := adminClient.Do(req)
	if err != nil {
		s.t.Fatalf("admin API %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	var body map[string]interface{}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		s.t.Fatalf("admin API %s %s: status %d, %v", method, path, resp.StatusCode, err)
	}
	return body
}

// lock is the admin API's view of one lock; nil when it has no holder.
func (s *server) lock(name string) map[string]interface{} {
	return s.request("GET", "/api/locks/"+url.PathEscape(name))
}

func (s *server) holderToken(name string) uint64 {
	s.t.Helper()
	lock := s.lock(name)
	if lock == nil {
		s.t.Fatalf("lock %q has no holder", name)
	}
	token, _ := lock["holder"].(map[string]interface{})["token"].(float64)
	return uint64(token)
}

func (s *server) waiters(name string) int {
	lock := s.lock(name)
	if lock == nil {
		return 0
	}
	waiters, _ := lock["waiters"].([]interface{})
	return len(waiters)
}

func (s *server) forceRelease(name string) {
	if s.request("POST", "/api/locks/"+url.PathEscape(name)+"/release") == nil {
		s.t.Fatalf("force-release of %q: no holder", name)
	}
}

// eventually polls state that is only visible by asking (the admin API)
// until it holds, at most patience.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The shared server of the tests that need nothing special.
var (
	sharedOnce   sync.Once
	sharedServer *server
)

func shared(t *testing.T) *server {
	sharedOnce.Do(func() {
		sharedServer = startServer(&cleanupFree{t})
	})
	if sharedServer == nil {
		t.Fatal("the shared server did not start")
	}
	// The same process, with failures reported to the test asking.
	view := *sharedServer
	view.t = t
	return &view
}

// cleanupFree keeps the shared server alive past the first test that asks
// for it; TestMain stops it.
type cleanupFree struct{ *testing.T }

func (c *cleanupFree) Cleanup(func()) {}

// pki is a throwaway PKI written to a temporary directory: a server CA
// and a server certificate for 127.0.0.1, a client CA and a client
// certificate with a URI identity.
type pki struct {
	dir         string
	serverCA    *x509.CertPool
	clientCert  tls.Certificate
	otherCA     *x509.CertPool
	certPath    string
	keyPath     string
	clientsCA   string
	serverCAPEM string
}

const clientIdentity = "spiffe://test/go-client"

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

var serial int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func newCA(t testing.TB, name string) issuer {
	key := newKey(t)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return issuer{cert: cert, key: key, der: der}
}

func (ca issuer) leaf(t testing.TB, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey) {
	key := newKey(t)
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func keyDER(t testing.TB, key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func newPKI(t testing.TB) *pki {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := newCA(t, "go test server CA"), newCA(t, "go test client CA"), newCA(t, "stranger CA")
	serverDER, serverKey := serverCA.leaf(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	identity, _ := url.Parse(clientIdentity)
	clientDER, clientKey := clientCA.leaf(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "go client"},
		URIs:        []*url.URL{identity},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	p := &pki{dir: dir, serverCA: x509.NewCertPool(), otherCA: x509.NewCertPool()}
	p.serverCA.AddCert(serverCA.cert)
	p.otherCA.AddCert(otherCA.cert)
	p.certPath, p.keyPath = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	p.clientsCA, p.serverCAPEM = filepath.Join(dir, "clients-ca.pem"), filepath.Join(dir, "ca.pem")
	writePEM(t, p.certPath, "CERTIFICATE", serverDER)
	writePEM(t, p.keyPath, "PRIVATE KEY", keyDER(t, serverKey))
	writePEM(t, p.clientsCA, "CERTIFICATE", clientCA.der)
	writePEM(t, p.serverCAPEM, "CERTIFICATE", serverCA.der)
	writePEM(t, filepath.Join(dir, "client.pem"), "CERTIFICATE", clientDER)
	writePEM(t, filepath.Join(dir, "client.key"), "PRIVATE KEY", keyDER(t, clientKey))
	p.clientCert = tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey}
	return p
}

// serverArgs turns TLS on (and mTLS if mutual).
func (p *pki) serverArgs(mutual bool) []string {
	args := []string{"--tls-cert", p.certPath, "--tls-key", p.keyPath}
	if mutual {
		args = append(args, "--tls-client-ca", p.clientsCA)
	}
	return args
}

func (p *pki) config(withCert bool) *tls.Config {
	config := &tls.Config{RootCAs: p.serverCA, MinVersion: tls.VersionTLS12}
	if withCert {
		config.Certificates = []tls.Certificate{p.clientCert}
	}
	return config
}

// must returns v, and panics (failing the test) on an error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func contains(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one saying %q", parts)
	}
	for _, part := range parts {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("error %q does not say %q", err, part)
		}
	}
}
