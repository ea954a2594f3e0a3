package monolock

import (
	"net"
	"os"
	"strconv"
	"strings"
)

// DefaultAddress is used when neither the argument nor $MONOLOCK_ADDRESS
// names a server.
const DefaultAddress = "127.0.0.1:7070"

// AddressEnv is the environment variable read when NewClient gets "".
const AddressEnv = "MONOLOCK_ADDRESS"

// parseAddrs returns the addresses to try, in order: the argument (comma
// separated), else $MONOLOCK_ADDRESS, else DefaultAddress.
func parseAddrs(addrs string) ([]endpoint, error) {
	if strings.TrimSpace(addrs) == "" {
		addrs = os.Getenv(AddressEnv)
		if strings.TrimSpace(addrs) == "" {
			addrs = DefaultAddress
		}
	}
	var out []endpoint
	for _, part := range strings.Split(addrs, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ep, err := parseAddr(part)
		if err != nil {
			return nil, err
		}
		out = append(out, ep)
	}
	if len(out) == 0 {
		return nil, invalid("no server address given in %q", addrs)
	}
	return out, nil
}

// parseAddr checks `host:port` or `[v6]:port`.
func parseAddr(text string) (endpoint, error) {
	if strings.Contains(text, "://") {
		return endpoint{}, invalid("address %q: write host:port, without a scheme", text)
	}
	host, port, err := net.SplitHostPort(text)
	if err != nil {
		if strings.Count(text, ":") > 1 && !strings.HasPrefix(text, "[") {
			return endpoint{}, invalid("server address %q: write an IPv6 host as [addr]:port", text)
		}
		return endpoint{}, invalid("server address %q must be host:port", text)
	}
	if host == "" {
		return endpoint{}, invalid("server address %q has no host: it must be host:port", text)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return endpoint{}, invalid("server address %q has an invalid port %q (1 to 65535)", text, port)
	}
	return endpoint{addr: net.JoinHostPort(host, port), host: host}, nil
}
