package sidecar

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestForwardingHeadersPassThrough: ebb is an in-cluster hop, never the
// edge: X-Forwarded-Host, X-Forwarded-Proto and Forwarded reach the app as
// the client sent them (or not at all), and X-Forwarded-For gets the
// client's address appended, over HTTP/1.1 and over h2c alike (h2c used to
// set X-Forwarded-Host and X-Forwarded-Proto itself and drop Forwarded).
func TestForwardingHeadersPassThrough(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	for _, tc := range []struct {
		name string
		hdr  []string
		want string
	}{{
		name: "sent",
		hdr:  []string{"X-Forwarded-For", "10.1.1.1", "X-Forwarded-Host", "shop.example.com", "X-Forwarded-Proto", "https", "Forwarded", "for=10.1.1.1;proto=https"},
		want: "Forwarded: for=10.1.1.1;proto=https\nX-Forwarded-For: 10.1.1.1, 127.0.0.1\nX-Forwarded-Host: shop.example.com\nX-Forwarded-Proto: https\n",
	}, {
		name: "none sent",
		want: "X-Forwarded-For: 127.0.0.1\n",
	}} {
		for proto, c := range map[string]*http.Client{"HTTP/1.1": http.DefaultClient, "h2c": h2c} {
			code, body := get(t, c, "http://"+r.addr+"/headers", tc.hdr...)
			var got []string
			for _, l := range strings.Split(body, "\n") {
				if strings.HasPrefix(l, "X-Forwarded-") || strings.HasPrefix(l, "Forwarded:") {
					got = append(got, l+"\n")
				}
			}
			if diff := cmp.Diff(tc.want, strings.Join(got, "")); code != 200 || diff != "" {
				t.Errorf("%s, %s: %d; forwarding headers the app saw (-want +got):\n%s", tc.name, proto, code, diff)
			}
		}
	}
}
