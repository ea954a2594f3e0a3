// Command cycle measures the uncontended lock cycle of the Go client side
// by side with the Rust and Python clients, in one run against one
// `monolock serve`: p50, p99 and cycles per second, one client at a time.
//
// The Go client runs twice: with the default GOMAXPROCS, and with one
// thread for Go code, as the Rust program's current-thread runtime.
//
// A cycle is Lock then Release, on the client's default protocol (v2: an
// ACQUIRE and a RELEASE on a pooled session); bench/protocols compares it
// with protocol v1. Rounds alternate the clients so that a slow
// moment of a shared machine falls on all of them; the medians of the
// rounds are printed as a Markdown table with ratios to the Rust client.
//
// It needs: the release server (cargo build --release -p monolock), the
// Rust cycle program of the Python client's bench (cargo build --release
// --manifest-path clients/python/bench/rust-cycle/Cargo.toml), and
// python3. A client whose program is missing is left out, with a line
// saying why.
//
// Usage, from clients/go:
//
//	go run ./bench/cycle [-cycles 5000] [-rounds 3]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"monolock.dev/go/monolock"
)

const (
	warmUp = 200
	name   = "bench/cycle"
	lease  = 60 * time.Second
)

// pythonCycles is the Python client's loop, the same as the Go one.
const pythonCycles = `
import statistics, sys, time
sys.path.insert(0, sys.argv[1])
import monolock
client = monolock.Client(sys.argv[2])
n = int(sys.argv[3])
for _ in range(200):
    with client.lock("bench/cycle", lease=60.0):
        pass
samples = []
start = time.perf_counter()
for _ in range(n):
    t = time.perf_counter()
    with client.lock("bench/cycle", lease=60.0):
        pass
    samples.append(time.perf_counter() - t)
total = time.perf_counter() - start
samples.sort()
at = lambda q: samples[(len(samples) - 1) * q // 100] * 1e6
print(at(50), at(99), n / total)
`

// result is one client's figures in one round.
type result struct {
	p50, p99 float64 // microseconds
	perSec   float64
}

type client struct {
	label string
	run   func(addr string, cycles int) (result, error)
}

func main() {
	cycles := flag.Int("cycles", 5000, "measured cycles per client and round, after 200 warm-up")
	rounds := flag.Int("rounds", 3, "rounds; each runs every client once, in a rotating order")
	flag.Parse()
	if *cycles < 1 || *rounds < 1 {
		log.Fatal("-cycles and -rounds must be at least 1")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		log.Fatal(err)
	}
	target := os.Getenv("CARGO_TARGET_DIR")
	if target == "" {
		target = filepath.Join(repo, "target")
	}
	serverBin := os.Getenv("MONOLOCK_BIN")
	if serverBin == "" {
		serverBin = filepath.Join(target, "release", "monolock")
	}
	addr, stop, err := startServer(serverBin)
	if err != nil {
		log.Fatalf("%v (build it: cargo build --release -p monolock, or set MONOLOCK_BIN)", err)
	}
	defer stop()

	clients := []client{
		{"Go client (`monolock.dev/go/monolock`)", goCycles},
		{"Go client, GOMAXPROCS=1", func(addr string, n int) (result, error) {
			// One thread for Go code, as the Rust program's current-thread
			// runtime: no hand-off between OS threads on each wake-up.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			return goCycles(addr, n)
		}},
	}
	rustBin := filepath.Join(target, "release", "monolock-rust-cycle")
	if _, err := os.Stat(rustBin); err == nil {
		clients = append(clients, client{"Rust client (`monolock-client`)", func(addr string, n int) (result, error) {
			return rustCycles(rustBin, addr, n)
		}})
	} else {
		fmt.Println("Rust row left out: build clients/python/bench/rust-cycle --release first")
	}
	if _, err := exec.LookPath("python3"); err == nil {
		src := filepath.Join(repo, "clients", "python", "src")
		clients = append(clients, client{"Python client, sync (`monolock.Client`)", func(addr string, n int) (result, error) {
			return pythonRun(src, addr, n)
		}})
	} else {
		fmt.Println("Python row left out: no python3")
	}

	all := make([][]result, len(clients))
	for r := 0; r < *rounds; r++ {
		for i := range clients {
			c := (i + r) % len(clients)
			res, err := clients[c].run(addr, *cycles)
			if err != nil {
				log.Fatalf("%s: %v", clients[c].label, err)
			}
			all[c] = append(all[c], res)
			fmt.Printf("round %d: %s: p50 %.1f µs, p99 %.1f µs, %.0f cycles/s\n",
				r+1, clients[c].label, res.p50, res.p99, res.perSec)
		}
	}
	fmt.Printf("\n%s %s/%s, %d cycles per client and round after %d warm-up, %d rounds, medians of the rounds, one client at a time\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, *cycles, warmUp, *rounds)
	med := make([]result, len(clients))
	for i := range clients {
		med[i] = median(all[i])
	}
	base := med[0]
	baseLabel := "Go client"
	for i, c := range clients {
		if strings.HasPrefix(c.label, "Rust") {
			base, baseLabel = med[i], "Rust client"
		}
	}
	fmt.Printf("| client | cycle p50 | cycle p99 | cycles/s | p50 / %s |\n|---|---|---|---|---|\n", baseLabel)
	for i, c := range clients {
		fmt.Printf("| %s | %.1f µs | %.0f µs | %.0f | %.2f |\n", c.label, med[i].p50, med[i].p99, med[i].perSec, med[i].p50/base.p50)
	}
}

// goCycles runs the cycles in this process with the Go client.
func goCycles(addr string, n int) (result, error) {
	client, err := monolock.NewClient(addr)
	if err != nil {
		return result{}, err
	}
	ctx := context.Background()
	cycle := func() error {
		lock, err := client.Lock(ctx, name, lease)
		if err != nil {
			return err
		}
		return lock.Release()
	}
	for i := 0; i < warmUp; i++ {
		if err := cycle(); err != nil {
			return result{}, err
		}
	}
	samples := make([]time.Duration, n)
	start := time.Now()
	for i := range samples {
		t := time.Now()
		if err := cycle(); err != nil {
			return result{}, err
		}
		samples[i] = time.Since(t)
	}
	total := time.Since(start)
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	at := func(q int) float64 { return float64(samples[(len(samples)-1)*q/100]) / 1e3 }
	return result{p50: at(50), p99: at(99), perSec: float64(n) / total.Seconds()}, nil
}

// rustCycles runs the Rust cycle program, which prints p50 and p99. Its
// rate comes from two runs, of n and of 2n cycles: the difference of their
// wall times is n cycles without the process start and the warm-up.
func rustCycles(bin, addr string, n int) (result, error) {
	run := func(count int) ([]float64, time.Duration, error) {
		start := time.Now()
		out, err := exec.Command(bin, addr, strconv.Itoa(count)).Output()
		took := time.Since(start)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", bin, err)
		}
		figures, err := floats(string(out), 2)
		return figures, took, err
	}
	figures, once, err := run(n)
	if err != nil {
		return result{}, err
	}
	_, twice, err := run(2 * n)
	if err != nil {
		return result{}, err
	}
	res := result{p50: figures[0], p99: figures[1]}
	if twice > once {
		res.perSec = float64(n) / (twice - once).Seconds()
	}
	return res, nil
}

func pythonRun(src, addr string, n int) (result, error) {
	out, err := exec.Command("python3", "-c", pythonCycles, src, addr, strconv.Itoa(n)).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, exit.Stderr)
		}
		return result{}, err
	}
	f, err := floats(string(out), 3)
	if err != nil {
		return result{}, err
	}
	return result{p50: f[0], p99: f[1], perSec: f[2]}, nil
}

func floats(out string, n int) ([]float64, error) {
	fields := strings.Fields(out)
	if len(fields) != n {
		return nil, fmt.Errorf("expected %d figures, got %q", n, out)
	}
	values := make([]float64, n)
	for i, f := range fields {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("expected %d figures, got %q", n, out)
		}
		values[i] = v
	}
	return values, nil
}

func median(rs []result) result {
	pick := func(get func(result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = get(r)
		}
		sort.Float64s(vs)
		return vs[len(vs)/2]
	}
	return result{
		p50:    pick(func(r result) float64 { return r.p50 }),
		p99:    pick(func(r result) float64 { return r.p99 }),
		perSec: pick(func(r result) float64 { return r.perSec }),
	}
}

// startServer starts `monolock serve` on a free loopback port and learns
// the port from its JSON startup log.
func startServer(bin string) (string, func(), error) {
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	found := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			var line struct{ Message, Addr string }
			if json.Unmarshal(lines.Bytes(), &line) == nil && line.Message == "listening" {
				select {
				case found <- line.Addr:
				default:
				}
			}
		}
	}()
	select {
	case addr := <-found:
		return addr, stop, nil
	case <-time.After(20 * time.Second):
		stop()
		return "", nil, fmt.Errorf("%s did not start listening", bin)
	}
}
