package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func acquired(token uint64) []byte {
	return []byte{0x12, byte(token >> 56), byte(token >> 48), byte(token >> 40), byte(token >> 32),
		byte(token >> 24), byte(token >> 16), byte(token >> 8), byte(token)}
}

func TestAcquireBytesMatchTheProtocolPage(t *testing.T) {
	got := hex.EncodeToString(AppendAcquire(nil, "deploy", 2000))
	if want := "01010000" + "07d0" + "0006" + "6465706c6f79"; got != want {
		t.Fatalf("ACQUIRE = %s, want %s", got, want)
	}
	if !bytes.Equal(Heartbeat, []byte{0x02}) {
		t.Fatalf("HEARTBEAT = %x", Heartbeat)
	}
}

func TestDecodeWholeFramesOnly(t *testing.T) {
	cases := []struct {
		in   []byte
		want Frame
		n    int
	}{
		{nil, Frame{}, 0},
		{[]byte{0x11}, Frame{Kind: Waiting}, 1},
		{acquired(7)[:5], Frame{}, 0},
		{acquired(7), Frame{Kind: Acquired, Token: 7}, 9},
		{append(acquired(1<<60), 0x11), Frame{Kind: Acquired, Token: 1 << 60}, 9},
		{[]byte("\x13\x02\x03ab"), Frame{}, 0},
		{[]byte("\x13\x02"), Frame{}, 0},
		{[]byte("\x13\x02\x03abc"), Frame{Kind: Error, Code: 2, Reason: "abc"}, 6},
		{[]byte("\x13\x01\x00"), Frame{Kind: Error, Code: 1}, 3},
	}
	for _, c := range cases {
		got, n, err := Decode(c.in)
		if err != nil || n != c.n || got != c.want {
			t.Errorf("Decode(%x) = %v, %d, %v; want %v, %d", c.in, got, n, err, c.want, c.n)
		}
	}
	_, _, err := Decode([]byte{0x7f})
	var unknown *UnknownTypeError
	if !errors.As(err, &unknown) || unknown.Byte != 0x7f {
		t.Fatalf("Decode(7f) error = %v", err)
	}
	if err.Error() != "unexpected message type 0x7f from server" {
		t.Fatalf("message: %v", err)
	}
}

func TestNamesAreCheckedAsTheServerChecksThem(t *testing.T) {
	for _, good := range []string{"a", strings.Repeat("a", 255), " a", "nightly/import", strings.Repeat("é", 127)} {
		if why := CheckName(good); why != "" {
			t.Errorf("CheckName(%q) = %q", good, why)
		}
	}
	for bad, says := range map[string]string{
		"":                       "empty",
		strings.Repeat("a", 256): "256 bytes long",
		strings.Repeat("é", 128): "256 bytes long",
		"\xff":                   "not valid UTF-8",
	} {
		if why := CheckName(bad); !strings.Contains(why, says) {
			t.Errorf("CheckName(%q) = %q, want it to say %q", bad, why, says)
		}
	}
}

func TestDescribeCode(t *testing.T) {
	if got := DescribeCode(0x02, "force-release"); got != "0x02 (closed by administrator): force-release" {
		t.Fatal(got)
	}
	if got := DescribeCode(0x7f, ""); got != "0x7f" {
		t.Fatal(got)
	}
}
