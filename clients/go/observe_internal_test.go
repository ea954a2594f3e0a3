package monolock

import (
	"context"
	"errors"
	"testing"
)

// A reader that falls behind gets the latest state, flagged coalesced,
// in place of a queue that would grow without bound; the session's
// goroutine never waits for it.
func TestASlowReaderIsGivenTheLatestStateCoalesced(t *testing.T) {
	obs := newObservation("x", func() {})
	obs.unobserve = func() {}
	obs.push(LockState{Held: true, Token: 1, Value: "a", Event: StateHeld, Initial: true})
	for token := uint64(2); token < 2+2*maxQueuedStates; token += 2 {
		obs.push(LockState{Token: token - 1, Event: StateReleased, Reason: ReleaseByHolder})
		obs.push(LockState{Held: true, Token: token, Value: "v", Event: StateGranted})
	}
	last := uint64(2*maxQueuedStates + 1)
	obs.push(LockState{Token: last - 1, Event: StateReleased, Reason: ReleaseForced})
	obs.mu.Lock()
	queued := len(obs.queue)
	obs.mu.Unlock()
	if queued > maxQueuedStates {
		t.Fatalf("%d states queued", queued)
	}
	obs.end(errors.New("session over"))
	go obs.pump(context.Background())
	var got []LockState
	for st := range obs.States() {
		got = append(got, st)
	}
	coalesced := 0
	for _, st := range got {
		if st.Coalesced {
			coalesced++
			if st.Held != (st.Event == StateHeld) || (st.Event != StateHeld && st.Event != StateFree) || st.Reason != "" {
				t.Fatalf("a coalesced state is a state, not a change: %v", st)
			}
		}
	}
	if coalesced == 0 || len(got) > maxQueuedStates {
		t.Fatalf("%d states delivered, %d coalesced", len(got), coalesced)
	}
	if final := got[len(got)-1]; final.Event != StateReleased || final.Token != last-1 || final.Reason != ReleaseForced {
		t.Fatalf("the last state %v, want the last pushed", final)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Token < got[i-1].Token {
			t.Fatalf("state %d goes back: %v after %v", i, got[i], got[i-1])
		}
	}
	if obs.Err() == nil {
		t.Fatal("the end's error was lost")
	}
}

// Cancelling the ctx closes States at once, says nothing in Err, and
// tells the session.
func TestCancellingAnObservationUnobservesOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	obs := newObservation("x", cancel)
	told := make(chan struct{}, 2)
	obs.unobserve = func() { told <- struct{}{} }
	go obs.pump(ctx)
	obs.push(LockState{Event: StateFree, Initial: true})
	obs.Stop()
	obs.Stop()
	if _, ok := <-obs.States(); ok {
		// The initial state may have been taken before the stop; the
		// channel closes right after.
		if _, ok := <-obs.States(); ok {
			t.Fatal("States open after Stop")
		}
	}
	if obs.Err() != nil || len(told) != 1 {
		t.Fatalf("err %v, told %d times", obs.Err(), len(told))
	}
	select {
	case <-obs.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
}
