package monolock

import (
	"testing"

	"monolock.dev/go/monolock/internal/core"
)

func TestReasonsMirrorTheCores(t *testing.T) {
	pairs := map[core.Reason]Reason{
		core.ReasonExpired:     ReasonExpired,
		core.ReasonForced:      ReasonForced,
		core.ReasonShutdown:    ReasonShutdown,
		core.ReasonServerError: ReasonServerError,
		core.ReasonConnection:  ReasonConnection,
		core.ReasonProtocol:    ReasonProtocol,
	}
	for inner, public := range pairs {
		if Reason(inner) != public {
			t.Errorf("core reason %d is public %s (%d)", inner, public, public)
		}
	}
	names := map[Reason]string{ReasonExpired: "expired", ReasonForced: "forced", ReasonShutdown: "shutdown",
		ReasonServerError: "server_error", ReasonConnection: "connection", ReasonProtocol: "protocol"}
	for reason, name := range names {
		if reason.String() != name {
			t.Errorf("%d is %q, want %q", reason, reason, name)
		}
	}
}
