package http1

import (
	"io"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
)

// Forwarding headers: one policy for the whole data path, the engine's
// HTTP/1.1 and the net/http paths (h2c, gRPC, the activator's held
// requests), in the sidecar and in the activator. ebb is an in-cluster hop,
// never the edge (an ingress or a load balancer in front of it sets these
// headers for the app): Forwarded, X-Forwarded-Host and X-Forwarded-Proto
// pass exactly as the client sent them, or stay absent, and
// X-Forwarded-For gets the address of the hop's peer appended (the
// client's values joined with ", ", then the peer's), as
// httputil.ProxyRequest.SetXForwarded does for it. So a request reaches the
// app with the same headers warm (client → sidecar) and cold (client →
// activator → sidecar), X-Forwarded-For aside, which names each hop.

// SetForwarded applies the data path's forwarding policy to a request an
// httputil.ReverseProxy proxies (call it from Rewrite, which gets the
// request without the client's Forwarded and X-Forwarded-* headers): the
// client's Forwarded, X-Forwarded-Host and X-Forwarded-Proto are put back
// as received (unless its Connection header names them, which makes them
// hop-by-hop, as the engine has it), and X-Forwarded-For is built as the
// engine builds it.
func SetForwarded(pr *httputil.ProxyRequest) {
	in, out := pr.In.Header, pr.Out.Header
	for _, k := range [...]string{"Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v, ok := in[k]; ok && !connectionNames(in, k) {
			out[k] = v
		}
	}
	var xff []byte
	for _, v := range in["X-Forwarded-For"] {
		if len(xff) > 0 {
			xff = append(xff, ", "...)
		}
		xff = append(xff, v...)
	}
	if ap, err := netip.ParseAddrPort(pr.In.RemoteAddr); err == nil {
		if len(xff) > 0 {
			xff = append(xff, ", "...)
		}
		xff = ap.Addr().Unmap().AppendTo(xff)
	}
	if len(xff) > 0 {
		out.Set("X-Forwarded-For", string(xff))
	} else {
		out.Del("X-Forwarded-For")
	}
}

// KeepTarget makes a request an httputil.ReverseProxy proxies carry the
// request target exactly as received, as the engine does: net/http would
// re-escape its path from the parsed URL ("/a b" went out as "/a%20b") and
// drop the query parameters it cannot parse ("a=1;b=2"). Call it from
// Rewrite. A path that starts with "//" keeps net/http's form (an opaque
// URL cannot say it).
func KeepTarget(pr *httputil.ProxyRequest) {
	t := pr.In.RequestURI
	if len(t) == 0 || t[0] != '/' || strings.HasPrefix(t, "//") {
		return
	}
	path, query, hasQuery := strings.Cut(t, "?")
	pr.Out.URL.Opaque, pr.Out.URL.RawPath = path, ""
	pr.Out.URL.RawQuery, pr.Out.URL.ForceQuery = query, hasQuery && query == ""
}

// ForwardTrailers makes a request an httputil.ReverseProxy proxies carry
// the client's trailers: the proxy sends a clone of the request, whose
// Trailer map is copied before the body is read, so its values (which
// net/http fills in once the body ends) would go out empty. Call it from
// Rewrite; the values are copied when the body ends, before the transport
// sends the trailers.
func ForwardTrailers(pr *httputil.ProxyRequest) {
	if len(pr.In.Trailer) == 0 || pr.Out.Body == nil {
		return
	}
	pr.Out.Body = &trailerCopier{ReadCloser: pr.Out.Body, from: pr.In.Trailer, to: pr.Out.Trailer}
}

// trailerCopier copies the trailers of the request it reads the body of
// into another request once the body ends.
type trailerCopier struct {
	io.ReadCloser
	from, to http.Header
}

func (t *trailerCopier) Read(b []byte) (int, error) {
	n, err := t.ReadCloser.Read(b)
	if err == io.EOF && t.to != nil {
		for k, v := range t.from {
			t.to[k] = v
		}
	}
	return n, err
}

// connectionNames reports whether h's Connection header names the header
// name.
func connectionNames(h http.Header, name string) bool {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), name) {
				return true
			}
		}
	}
	return false
}
