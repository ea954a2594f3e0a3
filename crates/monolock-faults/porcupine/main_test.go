package main

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func check(t *testing.T, h history) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(Model, Operations(h), 10*time.Second)
}

func TestHandoverWithFencingIsLinearizable(t *testing.T) {
	h := history{
		Beliefs: []belief{
			{"l", "a", 5, 10, 50, 60},
			{"l", "b", 7, 70, 100, 110},
		},
		Writes: []write{
			{"l", "a", 5, 20, 25, true},
			{"l", "b", 7, 80, 85, true},
			{"l", "a", 5, 90, 95, false}, // late, refused
		},
	}
	if got := check(t, h); got != porcupine.Ok {
		t.Fatalf("want linearizable, got %v", got)
	}
}

func TestOverlappingBeliefsAreNot(t *testing.T) {
	h := history{Beliefs: []belief{
		{"l", "a", 5, 10, 80, 90},
		{"l", "b", 7, 70, 100, 110},
	}}
	if got := check(t, h); got != porcupine.Illegal {
		t.Fatalf("want illegal, got %v", got)
	}
}

func TestAcceptedStaleWriteIsNot(t *testing.T) {
	h := history{
		Beliefs: []belief{{"l", "a", 5, 10, 50, 60}, {"l", "b", 7, 70, 100, 110}},
		Writes: []write{
			{"l", "b", 7, 80, 85, true},
			{"l", "a", 5, 90, 95, true},
		},
	}
	if got := check(t, h); got != porcupine.Illegal {
		t.Fatalf("want illegal, got %v", got)
	}
}

func TestTokensGoingBackIsNot(t *testing.T) {
	h := history{Beliefs: []belief{{"l", "a", 7, 10, 50, 60}, {"l", "b", 5, 70, 100, 110}}}
	if got := check(t, h); got != porcupine.Illegal {
		t.Fatalf("want illegal, got %v", got)
	}
}
