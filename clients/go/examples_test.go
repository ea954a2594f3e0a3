package monolock_test

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// leaderLine waits for the next line of out that starts with prefix.
func leaderLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the leader exited before saying %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("the leader did not say %q", prefix)
		}
	}
}

func startLeader(t *testing.T, bin string, args ...string) (*exec.Cmd, <-chan string, *bytes.Buffer) {
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout := must(cmd.StdoutPipe())
	noErr(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 64)
	go func(r io.Reader) {
		defer close(lines)
		scanner := bufio.NewScanner(r)
		for scanner.Scan() {
			lines <- scanner.Text()
		}
	}(stdout)
	return cmd, lines, &stderr
}

func tokenOf(t *testing.T, line string) uint64 {
	fields := strings.Fields(line)
	token, err := strconv.ParseUint(fields[len(fields)-1], 10, 64)
	if err != nil {
		t.Fatalf("no token in %q", line)
	}
	return token
}

func TestTheLeaderExampleHandsOverAndReportsALoss(t *testing.T) {
	srv := shared(t)
	bin := filepath.Join(t.TempDir(), "leader")
	build := exec.Command("go", "build", "-o", bin, "./examples/leader")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/leader: %v\n%s", err, out)
	}
	a, aLines, _ := startLeader(t, bin, "-addr", srv.addr, "-name", "go/leader", "-terms", "1", "-term", "300ms")
	first := tokenOf(t, leaderLine(t, aLines, "leading go/leader"))
	b, bLines, bErr := startLeader(t, bin, "-addr", srv.addr, "-name", "go/leader", "-terms", "1")
	// B stands in line and takes over when A's term ends.
	second := tokenOf(t, leaderLine(t, bLines, "leading go/leader"))
	leaderLine(t, aLines, "stepped down")
	noErr(t, a.Wait())
	if second <= first || srv.holderToken("go/leader") != second {
		t.Fatalf("tokens %d then %d", first, second)
	}
	// An operator takes the lock away: B's work stops and it says why.
	srv.forceRelease("go/leader")
	noErr(t, b.Wait())
	if !strings.Contains(bErr.String(), "lost (forced)") {
		t.Fatalf("the leader did not report the forced loss: %q", bErr.String())
	}
}
