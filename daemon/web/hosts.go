package web

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gridmgr/gridmgr/internal/text"
)

// HostCheck decides which Host headers the server answers. A browser
// tricked by DNS rebinding (a page whose name the attacker pointed at
// this address) sends the attacker's name as Host, and counts the answer
// as the attacker's origin; refusing every name the manager was not given
// keeps such a page from reading the grid or streaming its events.
//
// A request may name, with the listen port: the listen address itself;
// localhost, if the listener is on loopback or on every address; for a
// listener on every address (0.0.0.0, ::), any address of the host's
// interfaces when the check was made, and the address the request's
// connection arrived at. It may also name one of the names given to
// NewHostCheck: with their port if they have one, else with any port.
// A Host without a port means port 80.
//
// The zero HostCheck takes each connection's local address as the listen
// address: the address the client connected to, and localhost if that is
// on loopback.
type HostCheck struct {
	listen    netip.AddrPort      // the listener's; not valid: the connection's
	ifaces    map[netip.Addr]bool // with a listener on every address
	withPort  map[string]bool     // given names with a port, "host:port"
	wholeHost map[string]bool     // given names without one
}

// NewHostCheck makes the check for a server listening on listen (host:port
// as the listener reports it, with the port chosen: an IP address, or ""
// for the zero HostCheck's behaviour), answering also to names (http_hosts:
// host names or IP addresses, each with an optional port). With a listener
// on every address, the host's interface addresses are read now.
func NewHostCheck(listen string, names []string) (*HostCheck, error) {
	c := &HostCheck{withPort: map[string]bool{}, wholeHost: map[string]bool{}}
	if listen != "" {
		ap, err := netip.ParseAddrPort(listen)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: want IP:port as the listener reports it: %v", listen, err)
		}
		c.listen = netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
		if c.listen.Addr().IsUnspecified() {
			c.ifaces = map[netip.Addr]bool{}
			addrs, err := net.InterfaceAddrs()
			if err != nil {
				// Not fatal: the address a connection arrives at still
				// passes.
				addrs = nil
			}
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						c.ifaces[ip.Unmap()] = true
					}
				}
			}
		}
	}
	for _, s := range names {
		host, port, ok := splitHost(s)
		if !ok {
			return nil, fmt.Errorf("host %q: want a host name or address with an optional port", s)
		}
		if port == "" {
			c.wholeHost[host] = true
		} else {
			c.withPort[net.JoinHostPort(host, port)] = true
		}
	}
	return c, nil
}

// splitHost reads a Host header (or a name given to NewHostCheck): the
// host in lower case (an IP address as netip writes it, without zone) and
// the port as a number without leading zeros ("" if none).
func splitHost(s string) (host, port string, ok bool) {
	host = s
	switch {
	case s == "":
		return "", "", false
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false
		}
		host = s[1:end]
		switch rest := s[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			port = rest[1:]
		default:
			return "", "", false
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return "", "", false // brackets hold IPv6 only
		}
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
	}
	if host == "" {
		return "", "", false
	}
	if port != "" || strings.HasSuffix(s, ":") {
		n, err := strconv.Atoi(port)
		if err != nil || n < 0 || n > 65535 || port[0] == '+' {
			return "", "", false
		}
		port = strconv.Itoa(n)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("").String(), port, true
	}
	host = strings.ToLower(host)
	if strings.ContainsAny(host, ":[]/@ \t") {
		return "", "", false
	}
	return host, port, true
}

// Check says why r's Host is refused (nil if it is not).
func (c *HostCheck) Check(r *http.Request) error {
	host, port, ok := splitHost(r.Host)
	if ok {
		if c.wholeHost[host] {
			return nil
		}
		if port == "" {
			port = "80"
		}
		if c.withPort[net.JoinHostPort(host, port)] || c.local(r, host, port) {
			return nil
		}
	}
	return &apiError{status: http.StatusMisdirectedRequest, msg: fmt.Sprintf(
		"this manager's web UI does not answer to the host %s, so that a web page whose name was pointed at this address "+
			"(DNS rebinding) cannot read the grid; use the address the manager listens on, or add the name to http_hosts "+
			"in its properties file if it is one of this manager's (a proxy or DNS name)",
		strconv.Quote(text.Clip(r.Host, maxQuoted)))}
}

// local says whether host:port is the listener's own address.
func (c *HostCheck) local(r *http.Request, host, port string) bool {
	conn := netip.AddrPort{}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			conn = netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
		}
	}
	listen := c.listen
	if !listen.IsValid() {
		listen = conn
	}
	if !listen.IsValid() || port != strconv.Itoa(int(listen.Port())) {
		return false
	}
	every := listen.Addr().IsUnspecified()
	if host == "localhost" {
		return every || listen.Addr().IsLoopback()
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip == listen.Addr() || every && (c.ifaces[ip] || conn.IsValid() && ip == conn.Addr())
}

// Wrap serves next only to requests whose Host passes Check; the others
// get 421 Misdirected Request with a JSON error.
func (c *HostCheck) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.Check(r); err != nil {
			writeJSONError(w, http.StatusMisdirectedRequest, err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}
