package wire

import (
	"encoding/hex"
	"strings"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The client frames of the worked exchange in docs/protocol.md.
func TestV2ClientBytesMatchTheWorkedExchange(t *testing.T) {
	cases := []struct{ got, want string }{
		{hex.EncodeToString(AppendOpen(nil, 2000)), "0102000007d0"},
		{hex.EncodeToString(AppendAcquireV2(nil, 1, ModeWait, "deploy")), "21000000010006" + "6465706c6f79"},
		{hex.EncodeToString(AppendAcquireV2(nil, 2, ModeTry, "deploy")), "21000000020106" + "6465706c6f79"},
		{hex.EncodeToString(AppendRelease(nil, 1)), "2200000001"},
		{hex.EncodeToString(Ping), "23"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s, want %s", c.got, c.want)
		}
	}
}

// The server frames of the worked exchange, whole, and every strict
// prefix of each as incomplete.
func TestV2DecodeTheWorkedExchange(t *testing.T) {
	cases := []struct {
		bytes string
		want  Frame2
	}{
		{"30 0000000000000001 00000400", Frame2{Kind: Opened, Session: 1, MaxClaims: 1024}},
		{"31 00000001 0006b49d20000000", Frame2{Kind: Acquired2, Claim: 1, Token: 0x0006b49d20000000}},
		{"33 00000002", Frame2{Kind: Busy, Claim: 2}},
		{"32 00000003", Frame2{Kind: Waiting2, Claim: 3}},
		{"35", Frame2{Kind: Pong}},
		{"37 00000003 0006b49d20000002", Frame2{Kind: Granted, Claim: 3, Token: 0x0006b49d20000002}},
		{"34 00000001", Frame2{Kind: Released, Claim: 1}},
		{"36 00000009 20 13 756e6b6e6f776e20636c61696d2069643a2039",
			Frame2{Kind: Refused, Claim: 9, Code: 0x20, Reason: "unknown claim id: 9"}},
		{"38 00000003 08 0d 666f7263652d72656c65617365",
			Frame2{Kind: Revoked, Claim: 3, Code: 0x08, Reason: "force-release"}},
		{"13 01 00", Frame2{Kind: Error2, Code: 0x01}},
	}
	for _, c := range cases {
		b := unhex(t, c.bytes)
		for cut := 0; cut < len(b); cut++ {
			if _, n, err := Decode2(b[:cut]); n != 0 || err != nil {
				t.Fatalf("%s cut at %d: n %d, err %v", c.bytes, cut, n, err)
			}
		}
		got, n, err := Decode2(append(b, 0x35))
		if err != nil || n != len(b) || got != c.want {
			t.Fatalf("%s: %+v, %d, %v; want %+v", c.bytes, got, n, err, c.want)
		}
	}
	if _, _, err := Decode2([]byte{0x12}); err == nil {
		t.Fatal("a v1 ACQUIRED decoded as a v2 frame")
	}
}
