package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startServer runs `monolock serve` with an admin listener on free
// loopback ports ($MONOLOCK_BIN, else the repository's debug build).
func startServer(t *testing.T) (addr, admin string) {
	bin := os.Getenv("MONOLOCK_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../../../target/debug/monolock")
	}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s (set MONOLOCK_BIN): %v", bin, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan [2]string, 8)
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			var line struct{ Message, Addr string }
			if json.Unmarshal(lines.Bytes(), &line) == nil {
				select {
				case found <- [2]string{line.Message, line.Addr}:
				default:
				}
			}
		}
	}()
	timeout := time.After(20 * time.Second)
	for addr == "" || admin == "" {
		select {
		case line := <-found:
			switch line[0] {
			case "listening":
				addr = line[1]
			case "admin API listening":
				admin = line[1]
			}
		case <-timeout:
			t.Fatal("monolock serve did not start listening")
		}
	}
	return addr, admin
}

// do runs one command line through the driver and decodes its reply.
func do(t *testing.T, d *driver, line string) map[string]interface{} {
	t.Helper()
	var cmd command
	if err := json.Unmarshal([]byte(line), &cmd); err != nil {
		t.Fatal(err)
	}
	encoded, err := json.Marshal(d.handle(cmd))
	if err != nil {
		t.Fatal(err)
	}
	var reply map[string]interface{}
	if err := json.Unmarshal(encoded, &reply); err != nil {
		t.Fatal(err)
	}
	return reply
}

func expect(t *testing.T, reply map[string]interface{}, fields map[string]interface{}) {
	t.Helper()
	for k, want := range fields {
		got := reply[k]
		if failure, ok := reply["error"].(map[string]interface{}); ok && (k == "kind" || k == "reason") {
			got = failure[k]
		}
		if got != want {
			t.Fatalf("reply %v: %s is %v, want %v", reply, k, got, want)
		}
	}
}

func TestTheDriverSpeaksTheProtocolOverTheClient(t *testing.T) {
	for _, forceV1 := range []string{"false", "true"} {
		t.Run("force_v1="+forceV1, func(t *testing.T) { driverScenario(t, forceV1) })
	}
}

// sessions is the number of protocol v2 sessions open on the server.
func sessions(t *testing.T, admin string) int {
	resp, err := http.Get("http://" + admin + "/api/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Sessions []interface{} }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return len(list.Sessions)
}

func driverScenario(t *testing.T, forceV1 string) {
	addr, admin := startServer(t)
	d := newDriver()
	expect(t, do(t, d, `{"id":1,"cmd":"lock","handle":"a","name":"x","lease_ms":1000}`), map[string]interface{}{"ok": false, "kind": "other"})
	expect(t, do(t, d, `{"id":2,"cmd":"open","address":"`+addr+`","force_v1":`+forceV1+`}`), map[string]interface{}{"ok": true})
	a := do(t, d, `{"id":3,"cmd":"lock","handle":"a","name":"x","lease_ms":1000}`)
	token, _ := a["token"].(string)
	if !strings.HasPrefix(token, "1") || len(token) < 15 {
		t.Fatalf("token %v is not a decimal string", a)
	}
	expect(t, do(t, d, `{"cmd":"token","handle":"a"}`), map[string]interface{}{"token": token})
	expect(t, do(t, d, `{"cmd":"try_lock","handle":"b","name":"x","lease_ms":1000}`), map[string]interface{}{"ok": true, "acquired": false})
	expect(t, do(t, d, `{"cmd":"lock","handle":"b","name":"x","lease_ms":1000,"wait_ms":50}`), map[string]interface{}{"kind": "not_acquired"})
	expect(t, do(t, d, `{"cmd":"is_held","handle":"a"}`), map[string]interface{}{"held": true})
	expect(t, do(t, d, `{"cmd":"check","handle":"a"}`), map[string]interface{}{"ok": true})
	expect(t, do(t, d, `{"cmd":"wait_lost","handle":"a","timeout_ms":20}`), map[string]interface{}{"ok": true, "lost": false})
	wantSessions := 1
	if forceV1 == "true" {
		wantSessions = 0
	}
	if n := sessions(t, admin); n != wantSessions {
		t.Fatalf("force_v1 %s: %d v2 sessions open, want %d", forceV1, n, wantSessions)
	}

	req, err := http.NewRequest("POST", "http://"+admin+"/api/locks/"+url.PathEscape("x")+"/release", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The admin API refuses changes without it (a web page cannot send it).
	req.Header.Set("X-Requested-By", "monolock-go-tests")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("force-release: %v %v", resp, err)
	}
	resp.Body.Close()
	lost := do(t, d, `{"cmd":"wait_lost","handle":"a","timeout_ms":20000}`)
	expect(t, lost, map[string]interface{}{"lost": true, "reason": "forced"})
	if message, _ := lost["message"].(string); !strings.Contains(message, `lock "x" lost (forced): `) {
		t.Fatalf("wait_lost message: %v", lost)
	}
	expect(t, do(t, d, `{"cmd":"is_held","handle":"a"}`), map[string]interface{}{"held": false})
	expect(t, do(t, d, `{"cmd":"check","handle":"a"}`), map[string]interface{}{"kind": "lost", "reason": "forced"})
	expect(t, do(t, d, `{"cmd":"release","handle":"a"}`), map[string]interface{}{"kind": "lost", "reason": "forced"})
	expect(t, do(t, d, `{"cmd":"release","handle":"a"}`), map[string]interface{}{"kind": "unknown_handle"})

	expect(t, do(t, d, `{"cmd":"lock","handle":"c","name":"","lease_ms":1000}`), map[string]interface{}{"kind": "invalid_argument"})
	expect(t, do(t, d, `{"cmd":"lock","handle":"c","name":"x","lease_ms":0}`), map[string]interface{}{"kind": "invalid_argument"})
	fraction := do(t, d, `{"cmd":"try_lock","handle":"c","name":"x","lease_ms":1500.5}`)
	expect(t, fraction, map[string]interface{}{"kind": "invalid_argument"})
	if message := fraction["error"].(map[string]interface{})["message"].(string); !strings.Contains(message, "lease 1.5005s is not a whole number of milliseconds (leases are in ") {
		t.Fatalf("a lease of 1500.5 ms: %v", fraction)
	}
	short := do(t, d, `{"cmd":"lock","handle":"c","name":"x","lease_ms":10}`)
	expect(t, short, map[string]interface{}{"kind": "invalid_argument"})
	if failure := short["error"].(map[string]interface{}); failure["temporary"] != false ||
		!strings.Contains(failure["message"].(string), "below the minimum of 100 ms") {
		t.Fatalf("a 10 ms lease: %v", short)
	}
	expect(t, do(t, d, `{"cmd":"lock","handle":"c","name":"x","lease_ms":1000,"wait_ms":-1}`), map[string]interface{}{"kind": "invalid_argument"})
	expect(t, do(t, d, `{"cmd":"cycles","name":"y","lease_ms":1000,"count":50}`), map[string]interface{}{"ok": true, "count": float64(50)})
	stats := do(t, d, `{"cmd":"stats"}`)
	if stats["goroutines"] == nil || stats["fds"] == nil || stats["threads"] == nil {
		t.Fatalf("stats: %v", stats)
	}
	expect(t, do(t, d, `{"cmd":"bogus"}`), map[string]interface{}{"kind": "other"})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	expect(t, do(t, d, `{"cmd":"open","address":"`+dead+`","force_v1":`+forceV1+`}`), map[string]interface{}{"ok": true})
	reply := do(t, d, `{"cmd":"lock","handle":"c","name":"x","lease_ms":1000}`)
	expect(t, reply, map[string]interface{}{"kind": "connect"})
	if reply["error"].(map[string]interface{})["temporary"] != true {
		t.Fatalf("a refused connection is temporary: %v", reply)
	}
	if !strings.Contains(reply["error"].(map[string]interface{})["message"].(string), dead) {
		t.Fatalf("the connect error does not name %s: %v", dead, reply)
	}
	expect(t, do(t, d, `{"cmd":"open","address":"`+addr+`","tls":{"ca":"/nonexistent/ca.pem"}}`), map[string]interface{}{"kind": "tls"})
	expect(t, do(t, d, `{"cmd":"exit"}`), map[string]interface{}{"ok": true})
}
