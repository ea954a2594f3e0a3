package wire

import (
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The client frames of the extension's worked exchange in docs/protocol.md.
func TestExtClientBytesMatchTheWorkedExchange(t *testing.T) {
	cases := []struct{ got, want string }{
		{hex.EncodeToString(AppendHello(nil, FeatureValues)), "2400000001"},
		{hex.EncodeToString(AppendAcquireValue(nil, 1, ModeWait, "deploy", "10.0.0.7:9000")),
			"25000000010006" + "6465706c6f79" + "000d" + "31302e302e302e373a39303030"},
		{hex.EncodeToString(AppendProclaim(nil, 1, "10.0.0.7:9001")), "2600000001000d" + "31302e302e302e373a39303031"},
		{hex.EncodeToString(AppendObserve(nil, 7, "deploy")), "270000000706" + "6465706c6f79"},
		{hex.EncodeToString(AppendLookup(nil, "deploy")), "2906" + "6465706c6f79"},
		{hex.EncodeToString(AppendUnobserve(nil, 7)), "2800000007"},
		{hex.EncodeToString(AppendAcquireValue(nil, 2, ModeTry, "x", "")), "25000000020101" + "78" + "0000"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s, want %s", c.got, c.want)
		}
	}
}

// The server frames of the extension's worked exchange, whole, and every
// strict prefix of each as incomplete.
func TestExtDecodeTheWorkedExchange(t *testing.T) {
	value := "10.0.0.7:9000"
	cases := []struct {
		bytes string
		want  Frame2
	}{
		{"39 00000001 00000400", Frame2{Kind: Features, Features: 1, MaxWatches: 1024}},
		{"3b 00000007", Frame2{Kind: Observing, Watch: 7}},
		{"3a 00000001", Frame2{Kind: Proclaimed, Claim: 1}},
		{"3c 00000007", Frame2{Kind: Unobserved, Watch: 7}},
		{"3e 00000007 01 01 0006b49d20000000 000001a23bd2cb00 00 000d 31302e302e302e373a39303030",
			Frame2{Kind: State2, Watch: 7, State: State{Event: StateHeld, Flags: FlagInitial,
				Token: 0x0006b49d20000000, SinceMS: 1796300000000, Value: value}}},
		{"3e 00000007 04 00 0006b49d20000000 000001a23bd2d0dc 01 0000",
			Frame2{Kind: State2, Watch: 7, State: State{Event: StateReleased,
				Token: 0x0006b49d20000000, SinceMS: 0x000001a23bd2d0dc, Reason: ReleaseByHolder}}},
		{"3d 01 00 0006b49d20000001 000001a23bd2d0dc 00 000d 31302e302e302e383a39303030",
			Frame2{Kind: LockState, State: State{Event: StateHeld, Token: 0x0006b49d20000001,
				SinceMS: 0x000001a23bd2d0dc, Value: "10.0.0.8:9000"}}},
	}
	for _, c := range cases {
		b := unhex(t, c.bytes)
		for cut := 0; cut < len(b); cut++ {
			if _, n, err := Decode2(b[:cut]); n != 0 || err != nil {
				t.Fatalf("%s cut at %d: n %d, err %v", c.bytes, cut, n, err)
			}
		}
		got, n, err := Decode2(append(b, 0x35))
		if err != nil || n != len(b) || !reflect.DeepEqual(got, c.want) {
			t.Fatalf("%s: %+v (%d bytes, %v), want %+v (%d bytes)", c.bytes, got, n, err, c.want, len(b))
		}
	}
}

func TestAStateWithAnUnknownEventOrReasonIsABadFrame(t *testing.T) {
	for _, s := range []string{
		"3e 00000007 05 00 0000000000000001 0000000000000000 00 0000",
		"3d 04 00 0000000000000001 0000000000000000 05 0000",
	} {
		_, _, err := Decode2(unhex(t, s))
		var bad *BadFrameError
		if !errors.As(err, &bad) {
			t.Fatalf("%s: %v, want a BadFrameError", s, err)
		}
	}
}

func TestValuesAreCheckedByTheirUTF8Bytes(t *testing.T) {
	if why := CheckValue(strings.Repeat("é", 512)); why != "" {
		t.Fatalf("1024 bytes refused: %s", why)
	}
	if why := CheckValue(strings.Repeat("é", 512) + "x"); why != "value of 1025 bytes is above the maximum of 1024 bytes" {
		t.Fatalf("1025 bytes: %q", why)
	}
	if why := CheckValue("\xff"); why == "" {
		t.Fatal("invalid UTF-8 accepted")
	}
}
