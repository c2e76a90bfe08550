package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// forwardingApp serves HTTP/1.1 and h2c and answers with the forwarding
// headers it received, one per line ("-" for one it did not get), and the
// protocol it was reached with.
func forwardingApp(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
			v := "-"
			if vs, ok := r.Header[k]; ok {
				v = strings.Join(vs, "|")
			}
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
		fmt.Fprintf(w, "%s\n", r.Proto)
	})}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestForwardingHeadersPassThrough: the activator is an in-cluster hop, not
// the edge, and treats forwarding headers as the sidecar does, warm or
// cold, over HTTP/1.1 or h2c: X-Forwarded-Host, X-Forwarded-Proto and
// Forwarded reach the app exactly as the client sent them (or not at all),
// and X-Forwarded-For gets the client's address appended. (The activator
// used to set X-Forwarded-Host and X-Forwarded-Proto itself and drop
// Forwarded, so a request reached the app with other headers cold than
// warm, when the sidecar alone is in the path.)
func TestForwardingHeadersPassThrough(t *testing.T) {
	sent := []string{"X-Forwarded-For", "10.1.1.1", "X-Forwarded-Host", "shop.example.com", "X-Forwarded-Proto", "https", "Forwarded", "for=10.1.1.1;proto=https;host=shop.example.com"}
	for _, tc := range []struct {
		name string
		hdr  []string
		want string
	}{{
		name: "sent by the client",
		hdr:  sent,
		want: "X-Forwarded-For: 10.1.1.1, 127.0.0.1\nX-Forwarded-Host: shop.example.com\nX-Forwarded-Proto: https\nForwarded: for=10.1.1.1;proto=https;host=shop.example.com\n",
	}, {
		name: "none sent",
		want: "X-Forwarded-For: 127.0.0.1\nX-Forwarded-Host: -\nX-Forwarded-Proto: -\nForwarded: -\n",
	}} {
		for _, h2c := range []bool{false, true} {
			proto, client := "HTTP/1.1", http.DefaultClient
			if h2c {
				var protos http.Protocols
				protos.SetUnencryptedHTTP2(true)
				proto, client = "HTTP/2.0", &http.Client{Transport: &http.Transport{Protocols: &protos}}
			}
			for _, cold := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/cold=%v", tc.name, proto, cold), func(t *testing.T) {
					rt, url, _ := rigProtocols(t, RouterOptions{ColdStartTimeout: 10 * time.Second}, AppConfig{}, true)
					app := forwardingApp(t)
					if !cold {
						rt.SetEndpoints(shopHello, []Endpoint{{Addr: app, Ready: true}})
					} else {
						go func() {
							waitHeld(t, rt, 1)
							rt.SetEndpoints(shopHello, []Endpoint{{Addr: app, Ready: true}})
						}()
					}
					req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/", nil)
					if err != nil {
						t.Fatal(err)
					}
					req.Host = "hello.test"
					for i := 0; i+1 < len(tc.hdr); i += 2 {
						req.Header.Set(tc.hdr[i], tc.hdr[i+1])
					}
					resp, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if diff := cmp.Diff(tc.want+proto+"\n", string(b)); resp.StatusCode != 200 || diff != "" {
						t.Errorf("%d; what the app saw (-want +got):\n%s", resp.StatusCode, diff)
					}
				})
			}
		}
	}
}

// TestTargetAndTrailersPassAsReceived: the request target reaches the app
// as the client sent it, and a chunked body's trailers reach it too, warm
// and cold (both the engine's now; when cold requests went through
// net/http, it re-escaped the path, dropped query parameters it could not
// parse, and sent the trailers' names without their values).
func TestTargetAndTrailersPassAsReceived(t *testing.T) {
	app := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %q %q", r.Method, r.RequestURI, b, r.Trailer.Get("X-Sum"))
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	for _, tc := range []struct{ head, body, want string }{
		{"GET /p?a=1;b=2&c HTTP/1.1\r\nHost: hello.test\r\n\r\n", "", `GET /p?a=1;b=2&c "" ""`},
		{"GET /a%2Fb/%7e?x=%zz HTTP/1.1\r\nHost: hello.test\r\n\r\n", "", `GET /a%2Fb/%7e?x=%zz "" ""`},
		{"POST /sum HTTP/1.1\r\nHost: hello.test\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n", "4\r\nbody\r\n0\r\nX-Sum: 42\r\n\r\n", `POST /sum "body" "42"`},
	} {
		for _, cold := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cold=%v", strings.Fields(tc.head)[1], cold), func(t *testing.T) {
				rt, url, _ := rig(t, RouterOptions{ColdStartTimeout: 10 * time.Second}, AppConfig{})
				addr := app(t)
				if !cold {
					rt.SetEndpoints(shopHello, []Endpoint{{Addr: addr, Ready: true}})
				} else {
					go func() {
						waitHeld(t, rt, 1)
						rt.SetEndpoints(shopHello, []Endpoint{{Addr: addr, Ready: true}})
					}()
				}
				c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, tc.head+tc.body)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || string(b) != tc.want {
					t.Errorf("%d %q, want 200 %q", resp.StatusCode, b, tc.want)
				}
			})
		}
	}
}
