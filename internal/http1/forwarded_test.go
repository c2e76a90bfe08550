package http1

import (
	"bufio"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSetForwardedAsTheEngine: for the same request, the net/http path's
// forwarding headers (SetForwarded in a ReverseProxy's Rewrite) are the
// engine's, header for header.
func TestSetForwardedAsTheEngine(t *testing.T) {
	keys := []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}
	pick := func(h http.Header) map[string][]string {
		m := map[string][]string{}
		for _, k := range keys {
			if v, ok := h[k]; ok {
				m[k] = v
			}
		}
		return m
	}
	for _, head := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-Host: shop.example.com\r\nX-Forwarded-Proto: https\r\nForwarded: for=1.1.1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.1.1.1\r\nx-forwarded-for: 2.2.2.2, 3.3.3.3\r\nForwarded: for=1.1.1.1\r\nForwarded: for=2.2.2.2\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For:\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: Forwarded, x-forwarded-proto\r\nForwarded: for=1.1.1.1\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: h\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Forwarded-For\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n",
	} {
		cc, _, _, err := parseHeadWith(head, Options{Name: "ebb-test", MaxHeaderBytes: 4096})
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		engine, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(cc.out))))
		if err != nil {
			t.Fatalf("%q: the engine's head %q: %v", head, cc.out, err)
		}

		in, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		in.RemoteAddr = "10.0.0.9:41000" // parseHeadWith's client
		var app http.Header
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "app"
				SetForwarded(pr)
			},
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				app = r.Header
				return &http.Response{StatusCode: 204, Body: http.NoBody, Request: r}, nil
			}),
		}
		rp.ServeHTTP(discardResponse{}, in)
		if diff := cmp.Diff(pick(engine.Header), pick(app)); diff != "" {
			t.Errorf("%q: forwarding headers (-engine +net/http path):\n%s", head, diff)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type discardResponse struct{}

func (discardResponse) Header() http.Header         { return http.Header{} }
func (discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (discardResponse) WriteHeader(int)             {}
