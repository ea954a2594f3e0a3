// Command porcupine checks histories of the fault scenarios for
// linearizability with Porcupine (github.com/anishathalye/porcupine),
// an existing checker, as a second opinion beside the suite's own belief
// checker.
//
// The lock is modelled as a mutex with fencing tokens guarding a fenced
// resource. Its state: the holder (if any), the last token granted, and
// the highest token the resource accepted. Operations, on CLOCK_MONOTONIC:
//
//   - acquire(worker) -> token: returned when the worker began to believe
//     (from_ns); its call is left open (time 0), which only widens it;
//     legal when the lock is free and the token is above every earlier one;
//   - release(worker): from the end of the worker's belief (until_ns) to
//     when the checker heard of it (or the end of the run); legal when the
//     worker holds the lock;
//   - write(worker, token) -> accepted: from its send to the resource's
//     decision; accepted exactly when the token is at least the highest
//     accepted so far.
//
// A history in which two beliefs overlap, tokens go backwards, or the
// resource accepts a stale write (or refuses a current one) is not
// linearizable. Each file is one cell of `monolock-peer-faults --history`;
// locks are checked separately (Porcupine's partitions).
//
// Usage: go run . FILE... ; exit status 1 if any history is not
// linearizable or the check timed out.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

type belief struct {
	Lock         string `json:"lock"`
	Worker       string `json:"worker"`
	Token        uint64 `json:"token"`
	FromNs       int64  `json:"from_ns"`
	UntilNs      int64  `json:"until_ns"`
	EndedHeardNs int64  `json:"ended_heard_ns"`
}

type write struct {
	Lock      string `json:"lock"`
	Worker    string `json:"worker"`
	Token     uint64 `json:"token"`
	SentNs    int64  `json:"sent_ns"`
	DecidedNs int64  `json:"decided_ns"`
	Accepted  bool   `json:"accepted"`
}

type history struct {
	Beliefs []belief `json:"beliefs"`
	Writes  []write  `json:"writes"`
}

type kind int

const (
	acquire kind = iota
	release
	writeOp
)

type input struct {
	Lock   string
	Kind   kind
	Worker string
	Token  uint64 // for writes
}

type output struct {
	Token    uint64 // for acquire
	Accepted bool   // for writes
}

type state struct {
	Holder  string
	Last    uint64
	Highest uint64
	Written bool
}

// Model is the mutex with fencing tokens and its fenced resource.
var Model = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byLock := map[string][]porcupine.Operation{}
		var locks []string
		for _, op := range ops {
			lock := op.Input.(input).Lock
			if _, seen := byLock[lock]; !seen {
				locks = append(locks, lock)
			}
			byLock[lock] = append(byLock[lock], op)
		}
		sort.Strings(locks)
		parts := make([][]porcupine.Operation, 0, len(locks))
		for _, lock := range locks {
			parts = append(parts, byLock[lock])
		}
		return parts
	},
	Init: func() interface{} { return state{} },
	Step: func(s, in, out interface{}) (bool, interface{}) {
		st := s.(state)
		i := in.(input)
		o := out.(output)
		switch i.Kind {
		case acquire:
			if st.Holder != "" || (st.Last != 0 && o.Token <= st.Last) {
				return false, st
			}
			st.Holder, st.Last = i.Worker, o.Token
			return true, st
		case release:
			if st.Holder != i.Worker {
				return false, st
			}
			st.Holder = ""
			return true, st
		default:
			fresh := !st.Written || i.Token >= st.Highest
			if o.Accepted != fresh {
				return false, st
			}
			if o.Accepted {
				st.Highest, st.Written = i.Token, true
			}
			return true, st
		}
	},
	Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(input), out.(output)
		switch i.Kind {
		case acquire:
			return fmt.Sprintf("%s acquire -> %d", i.Worker, o.Token)
		case release:
			return fmt.Sprintf("%s release", i.Worker)
		default:
			return fmt.Sprintf("%s write(%d) -> %v", i.Worker, i.Token, o.Accepted)
		}
	},
}

// latest is max for Go 1.19 (Debian bookworm's, which CI uses).
func latest(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// Operations turns a history into Porcupine operations.
func Operations(h history) []porcupine.Operation {
	clients := map[string]int{}
	client := func(worker string) int {
		id, ok := clients[worker]
		if !ok {
			id = len(clients)
			clients[worker] = id
		}
		return id
	}
	var ops []porcupine.Operation
	for _, b := range h.Beliefs {
		id := client(b.Worker)
		ops = append(ops,
			porcupine.Operation{ClientId: id, Input: input{b.Lock, acquire, b.Worker, 0},
				Call: 0, Output: output{Token: b.Token}, Return: b.FromNs},
			porcupine.Operation{ClientId: id, Input: input{b.Lock, release, b.Worker, 0},
				Call: b.UntilNs, Output: output{}, Return: latest(b.EndedHeardNs, b.UntilNs)})
	}
	for _, w := range h.Writes {
		ops = append(ops, porcupine.Operation{ClientId: client(w.Worker),
			Input: input{w.Lock, writeOp, w.Worker, w.Token}, Call: w.SentNs,
			Output: output{Accepted: w.Accepted}, Return: latest(w.DecidedNs, w.SentNs)})
	}
	return ops
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: porcupine HISTORY.json...")
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var h history
		if err := json.Unmarshal(data, &h); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		ops := Operations(h)
		started := time.Now()
		result := porcupine.CheckOperationsTimeout(Model, ops, time.Minute)
		took := time.Since(started)
		verdict := map[porcupine.CheckResult]string{
			porcupine.Ok: "linearizable", porcupine.Illegal: "NOT linearizable",
			porcupine.Unknown: "unknown (timed out)"}[result]
		fmt.Printf("%s: %d beliefs, %d writes, %d operations: %s in %v\n",
			path, len(h.Beliefs), len(h.Writes), len(ops), verdict, took.Round(time.Microsecond))
		failed = failed || result != porcupine.Ok
	}
	if failed {
		os.Exit(1)
	}
}
