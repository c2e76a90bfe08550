package sidecar

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// testApp is an in-process stand-in for the app container: HTTP/1.1 and h2c
// on one port, gRPC health with a trailer echo, SSE, WebSocket and body echo.
type testApp struct {
	addr    string
	release chan struct{} // closing it releases /block requests
	started chan struct{} // one value per /block request that started
}

func startTestApp(t testing.TB) *testApp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &testApp{addr: ln.Addr().String(), release: make(chan struct{}), started: make(chan struct{}, 1000)}
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("ebb-echo")) > 0 {
			grpc.SetTrailer(ctx, metadata.Pairs("ebb-echo", md.Get("ebb-echo")[0]))
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, hs)
	up := websocket.Upgrader{}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		switch r.URL.Path {
		case "/":
			fmt.Fprintf(w, "hello %s\n", r.Proto)
		case "/slow":
			d, _ := time.ParseDuration(q.Get("d"))
			time.Sleep(d)
			io.WriteString(w, "slow done\n")
		case "/block":
			a.started <- struct{}{}
			<-a.release
			io.WriteString(w, "released\n")
		case "/sse":
			n, _ := strconv.Atoi(q.Get("n"))
			d, _ := time.ParseDuration(q.Get("interval"))
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range n {
				if i > 0 {
					time.Sleep(d)
				}
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
		case "/ws":
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				mt, m, err := c.ReadMessage()
				if err != nil || c.WriteMessage(mt, m) != nil {
					return
				}
			}
		case "/echo":
			rc := http.NewResponseController(w)
			rc.EnableFullDuplex()
			w.WriteHeader(200)
			rc.Flush()
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					w.Write(buf[:n])
					rc.Flush()
				}
				if err != nil {
					return
				}
			}
		case "/read": // reads the whole body, then answers with it
			b, _ := io.ReadAll(r.Body)
			w.Write(b)
		case "/headers":
			var lines []string
			for k, vs := range r.Header {
				lines = append(lines, k+": "+strings.Join(vs, "|"))
			}
			slices.Sort(lines)
			io.WriteString(w, strings.Join(lines, "\n")+"\n")
		case "/big":
			n, _ := strconv.Atoi(q.Get("n"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			chunk := []byte(strings.Repeat("x", 1000) + "\n")
			for n > 0 {
				k := min(n, len(chunk))
				w.Write(chunk[:k])
				n -= k
			}
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body\n")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Sum", "42")
		default:
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() {
		select {
		case <-a.release:
		default:
			close(a.release)
		}
		srv.Close()
	})
	return a
}
