// Command protocols measures the Go client on protocol v1 against protocol
// v2, side by side in one run against one `monolock serve`:
//
//   - the uncontended lock cycle (Lock then Release, confirmed): p50 and
//     cycles per second with 1 goroutine, and cycles per second with 16
//     goroutines (each on its own lock name);
//   - 1,000 locks held from this process: connections and descriptors it
//     has open, and the CPU it spends over 3 s of holding (heartbeats);
//   - the lock cycle over TLS: cycles per second with 1 goroutine.
//
// Rounds alternate the protocols, and their order, so that a slow moment
// of a shared machine falls on both; the medians of the rounds are printed as a Markdown table
// with the ratio v2 / v1.
//
// It needs the server binary: $MONOLOCK_BIN, else the repository's release
// build (cargo build --release -p monolock).
//
// Usage, from clients/go:
//
//	go run ./bench/protocols [-cycles 3000] [-rounds 3] [-held 1000]
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"monolock.dev/go/monolock"
)

const lease = 10 * time.Second

// figures is one protocol's results in one round.
type figures struct {
	p50      time.Duration
	perSec1  float64
	perSec16 float64
	conns    int
	fds      int
	cpu      time.Duration // over holdFor
	tlsSec   float64
}

const holdFor = 3 * time.Second

func main() {
	cycles := flag.Int("cycles", 3000, "lock cycles per measurement")
	rounds := flag.Int("rounds", 3, "rounds (the protocols alternate within each)")
	held := flag.Int("held", 1000, "locks held at once")
	flag.Parse()
	log.SetFlags(0)

	bin := os.Getenv("MONOLOCK_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../target/release/monolock")
	}
	dir, err := os.MkdirTemp("", "monolock-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	roots, certPath, keyPath := makeCert(dir)

	plain, stopPlain := serve(bin)
	defer stopPlain()
	secure, stopSecure := serve(bin, "--tls-cert", certPath, "--tls-key", keyPath)
	defer stopSecure()

	protocols := []struct {
		label string
		opts  []monolock.Option
	}{
		{"v1", []monolock.Option{monolock.WithProtocolV1()}},
		{"v2", nil},
	}
	results := map[string][]figures{}
	for round := 0; round < *rounds; round++ {
		order := protocols
		if round%2 == 1 {
			order = []struct {
				label string
				opts  []monolock.Option
			}{protocols[1], protocols[0]}
		}
		for _, p := range order {
			client := newClient(plain, p.opts...)
			tlsClient := newClient(secure, append(p.opts, monolock.WithTLS(&tls.Config{RootCAs: roots}))...)
			var f figures
			f.p50, f.perSec1 = cycle(client, *cycles, 1)
			_, f.perSec16 = cycle(client, *cycles, 16)
			// The locks held go to a server of their own, so that the
			// connections to it are the holding client's alone.
			holding, stopHolding := serve(bin)
			f.conns, f.fds, f.cpu = hold(newClient(holding, p.opts...), holding, *held)
			stopHolding()
			_, f.tlsSec = cycle(tlsClient, *cycles/3, 1)
			results[p.label] = append(results[p.label], f)
			log.Printf("round %d %s: %+v", round+1, p.label, f)
		}
	}
	v1, v2 := median(results["v1"]), median(results["v2"])
	fmt.Printf("Go %s, GOMAXPROCS %d, %d cycles per measurement, %d rounds (medians), %d locks held, lease %v\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), *cycles, *rounds, *held, lease)
	fmt.Println("| measure | v1 | v2 | v2 / v1 |")
	fmt.Println("|---|---|---|---|")
	row := func(what string, a, b float64, format string) {
		ratio := "-"
		if a != 0 {
			ratio = fmt.Sprintf("%.2f", b/a)
		}
		fmt.Printf("| %s | "+format+" | "+format+" | %s |\n", what, a, b, ratio)
	}
	row("cycle p50 (µs), 1 goroutine", us(v1.p50), us(v2.p50), "%.1f")
	row("cycles/s, 1 goroutine", v1.perSec1, v2.perSec1, "%.0f")
	row("cycles/s, 16 goroutines", v1.perSec16, v2.perSec16, "%.0f")
	row(fmt.Sprintf("%d locks held: connections", *held), float64(v1.conns), float64(v2.conns), "%.0f")
	row(fmt.Sprintf("%d locks held: descriptors", *held), float64(v1.fds), float64(v2.fds), "%.0f")
	row(fmt.Sprintf("%d locks held: client CPU over %v (ms)", *held, holdFor), ms(v1.cpu), ms(v2.cpu), "%.0f")
	row("TLS cycles/s, 1 goroutine", v1.tlsSec, v2.tlsSec, "%.0f")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func newClient(addr string, opts ...monolock.Option) *monolock.Client {
	client, err := monolock.NewClient(addr, opts...)
	if err != nil {
		log.Fatal(err)
	}
	return client
}

// cycle runs n Lock/Release cycles spread over the goroutines, each on its
// own name, and returns the p50 of one cycle and the cycles per second.
func cycle(client *monolock.Client, n, goroutines int) (time.Duration, float64) {
	ctx := context.Background()
	samples := make([][]time.Duration, goroutines)
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			name := fmt.Sprintf("bench/cycle/%d", g)
			for i := 0; i < n/goroutines; i++ {
				t := time.Now()
				lock, err := client.Lock(ctx, name, lease)
				if err != nil {
					log.Fatal(err)
				}
				if err := lock.Release(); err != nil {
					log.Fatal(err)
				}
				samples[g] = append(samples[g], time.Since(t))
			}
		}(g)
	}
	wg.Wait()
	total := time.Since(start)
	var all []time.Duration
	for _, s := range samples {
		all = append(all, s...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return all[len(all)/2], float64(len(all)) / total.Seconds()
}

// hold takes n locks at once with a fresh client and returns the
// connections to the server at addr and the descriptors this process
// added while holding them, and the CPU it spends in holdFor.
func hold(client *monolock.Client, addr string, n int) (conns, fds int, cpu time.Duration) {
	ctx := context.Background()
	runtime.GC()
	_, baseFDs := descriptors()
	locks := make([]*monolock.Lock, 0, n)
	for i := 0; i < n; i++ {
		lock, err := client.Lock(ctx, fmt.Sprintf("bench/held/%d", i), lease)
		if err != nil {
			log.Fatalf("lock %d of %d: %v", i, n, err)
		}
		locks = append(locks, lock)
	}
	_, f := descriptors()
	c := connectionsTo(addr)
	before := cpuTime()
	time.Sleep(holdFor) // the measured span: heartbeats only
	cpu = cpuTime() - before
	for _, lock := range locks {
		if err := lock.Release(); err != nil {
			log.Fatal(err)
		}
	}
	return c, f - baseFDs, cpu
}

// connectionsTo counts this process's TCP connections to addr (a
// 127.0.0.1 port): its socket descriptors whose inode /proc/net/tcp lists
// with that remote address.
func connectionsTo(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	var portNum int
	fmt.Sscan(port, &portNum)
	remote := fmt.Sprintf("0100007F:%04X", portNum)
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		fields := strings.Fields(line)
		if len(fields) > 9 && fields[2] == remote {
			inodes["socket:["+fields[9]+"]"] = true
		}
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, entry := range entries {
		if link, err := os.Readlink("/proc/self/fd/" + entry.Name()); err == nil && inodes[link] {
			n++
		}
	}
	return n
}

func descriptors() (sockets, all int) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, 0
	}
	for _, entry := range entries {
		if link, err := os.Readlink("/proc/self/fd/" + entry.Name()); err == nil && strings.HasPrefix(link, "socket:") {
			sockets++
		}
	}
	return sockets, len(entries)
}

func cpuTime() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

func median(fs []figures) figures {
	pick := func(get func(f figures) float64) float64 {
		values := make([]float64, len(fs))
		for i, f := range fs {
			values[i] = get(f)
		}
		sort.Float64s(values)
		return values[len(values)/2]
	}
	return figures{
		p50:      time.Duration(pick(func(f figures) float64 { return float64(f.p50) })),
		perSec1:  pick(func(f figures) float64 { return f.perSec1 }),
		perSec16: pick(func(f figures) float64 { return f.perSec16 }),
		conns:    int(pick(func(f figures) float64 { return float64(f.conns) })),
		fds:      int(pick(func(f figures) float64 { return float64(f.fds) })),
		cpu:      time.Duration(pick(func(f figures) float64 { return float64(f.cpu) })),
		tlsSec:   pick(func(f figures) float64 { return f.tlsSec }),
	}
}

// serve starts `monolock serve` on a free loopback port and returns its
// address, learnt from its JSON startup log.
func serve(bin string, extra ...string) (string, func()) {
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json"}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatalf("starting %s (set MONOLOCK_BIN, or cargo build --release -p monolock): %v", bin, err)
	}
	addr := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			var line struct{ Message, Addr string }
			if json.Unmarshal(lines.Bytes(), &line) == nil && line.Message == "listening" {
				select {
				case addr <- line.Addr:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return a, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		log.Fatal("monolock serve did not start listening")
	}
	return "", nil
}

// makeCert writes a throwaway self-signed certificate for 127.0.0.1.
func makeCert(dir string) (*x509.CertPool, string, string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		log.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write := func(path, kind string, der []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			log.Fatal(err)
		}
	}
	write(certPath, "CERTIFICATE", der)
	write(keyPath, "PRIVATE KEY", keyDER)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return roots, certPath, keyPath
}
