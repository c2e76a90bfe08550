package sidecarapi

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// okHead is the head of a sidecar's answer, as net/http writes it.
const okHead = "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Type: text/plain; version=ebb1\r\nDate: Thu, 26 Nov 2026 00:00:00 GMT\r\n"

// ct is the one Content-Type read.
const ct = "Content-Type: text/plain; version=ebb1\r\n"

// TestReadStatsResponse: what a sidecar sends is read; every leniency net/http
// allows and the sidecar never sends is refused with its reason.
func TestReadStatsResponse(t *testing.T) {
	for name, tc := range map[string]struct {
		in     string
		body   string
		keep   bool
		reason string // "" when accepted
	}{
		"sidecar":                 {in: okHead + "Content-Length: 13\r\n\r\nebb1 1 2 3 4\n", body: "ebb1 1 2 3 4\n", keep: true},
		"chunked":                 {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n7\r\nebb1 1 \r\n6\r\n2 3 4\n\r\n0\r\n\r\n", body: "ebb1 1 2 3 4\n", keep: true},
		"empty reason":            {in: "HTTP/1.1 200 \r\n" + ct + "Content-Length: 0\r\n\r\n", keep: true},
		"HTTP/1.0 closes":         {in: "HTTP/1.0 200 OK\r\n" + ct + "Content-Length: 2\r\n\r\nab", body: "ab"},
		"Connection close":        {in: "HTTP/1.1 200 OK\r\n" + ct + "Connection: close\r\nContent-Length: 2\r\n\r\nab", body: "ab"},
		"bytes after the answer":  {in: "HTTP/1.1 200 OK\r\n" + ct + "Content-Length: 2\r\n\r\nabHTTP/1.1 200 OK\r\n", body: "ab"},
		"keep-alive":              {in: "HTTP/1.1 200 OK\r\n" + ct + "Connection: keep-alive\r\nContent-Length: 2\r\n\r\nab", body: "ab", keep: true},
		"404":                     {in: "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", reason: ReasonStatus},
		"100 continue":            {in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", reason: ReasonStatus},
		"no reason SP":            {in: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", reason: ReasonHTTP},
		"HTTP/2.0":                {in: "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n", reason: ReasonHTTP},
		"garbage":                 {in: "\x00\xff SSH-2.0-OpenSSH_9.6\r\n", reason: ReasonHTTP},
		"bare LF":                 {in: "HTTP/1.1 200 OK\nContent-Length: 0\n\n", reason: ReasonHTTP},
		"obs-fold":                {in: "HTTP/1.1 200 OK\r\n" + ct + "X-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", reason: ReasonHTTP},
		"space before colon":      {in: "HTTP/1.1 200 OK\r\n" + ct + "Content-Length : 0\r\n\r\n", reason: ReasonHTTP},
		"control in value":        {in: "HTTP/1.1 200 OK\r\n" + ct + "X-A: a\x01b\r\nContent-Length: 0\r\n\r\n", reason: ReasonHTTP},
		"two lengths":             {in: "HTTP/1.1 200 OK\r\n" + ct + "Content-Length: 2\r\nContent-Length: 2\r\n\r\nab", reason: ReasonHTTP},
		"length list":             {in: "HTTP/1.1 200 OK\r\n" + ct + "Content-Length: 2, 2\r\n\r\nab", reason: ReasonHTTP},
		"signed length":           {in: "HTTP/1.1 200 OK\r\n" + ct + "Content-Length: +2\r\n\r\nab", reason: ReasonHTTP},
		"length and chunked":      {in: "HTTP/1.1 200 OK\r\n" + ct + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", reason: ReasonHTTP},
		"gzip, chunked":           {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", reason: ReasonHTTP},
		"chunked in HTTP/1.0":     {in: "HTTP/1.0 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", reason: ReasonHTTP},
		"delimited by close":      {in: "HTTP/1.1 200 OK\r\n" + ct + "\r\nebb1 1 2 3 4\n", reason: ReasonHTTP},
		"chunk extension":         {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n2;x=y\r\nab\r\n0\r\n\r\n", reason: ReasonHTTP},
		"chunk size padded":       {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n2 \r\nab\r\n0\r\n\r\n", reason: ReasonHTTP},
		"chunk size leading 0s":   {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n00000000000000000000000000004\r\nabcd\r\n0\r\n\r\n", reason: ReasonHTTP},
		"chunk without CRLF":      {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n", reason: ReasonHTTP},
		"trailer":                 {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\nX-T: 1\r\n\r\n", reason: ReasonHTTP},
		"1 GiB length":            {in: "HTTP/1.1 200 OK\r\n" + ct + "Content-Length: 1073741824\r\n\r\n999", reason: ReasonTooLong},
		"huge length":             {in: "HTTP/1.1 200 OK\r\n" + ct + "Content-Length: 9999999999999999999\r\n\r\n", reason: ReasonTooLong},
		"1 GiB chunk":             {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n40000000\r\n999", reason: ReasonTooLong},
		"chunk size of 16 digits": {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n", reason: ReasonHTTP},
		"many small chunks":       {in: "HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1\r\nx\r\n", MaxBody+1) + "0\r\n\r\n", reason: ReasonTooLong},
		"long line":               {in: "HTTP/1.1 200 OK\r\n" + ct + "X-Pad: " + strings.Repeat("x", 600) + "\r\n\r\n", reason: ReasonTooLong},
		"endless head":            {in: "HTTP/1.1 200 OK\r\n" + ct + strings.Repeat("X-Pad: xxxxxxxxxx\r\n", 100), reason: ReasonTooLong},
		"too many fields":         {in: "HTTP/1.1 200 OK\r\n" + ct + strings.Repeat("A: b\r\n", MaxFields+1) + "\r\n", reason: ReasonTooLong},
		"another version":         {in: "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=ebb2\r\nContent-Length: 13\r\n\r\nebb2 1 2 3 4\n", reason: ReasonFormat},
		"no Content-Type":         {in: "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nebb1 1 2 3 4\n", reason: ReasonFormat},
		"plain text":              {in: "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 13\r\n\r\nebb1 1 2 3 4\n", reason: ReasonFormat},
		"two Content-Types":       {in: "HTTP/1.1 200 OK\r\n" + ct + ct + "Content-Length: 13\r\n\r\nebb1 1 2 3 4\n", reason: ReasonFormat},
	} {
		t.Run(name, func(t *testing.T) {
			var body [MaxBody]byte
			n, keep, err := ReadStatsResponse(bufio.NewReaderSize(strings.NewReader(tc.in), 512), body[:])
			if tc.reason != "" {
				var re *ResponseError
				if !errors.As(err, &re) || re.Reason != tc.reason {
					t.Fatalf("ReadStatsResponse = %q, %v, %v; want refused as %s", body[:n], keep, err, tc.reason)
				}
				return
			}
			if err != nil || string(body[:n]) != tc.body || keep != tc.keep {
				t.Fatalf("ReadStatsResponse = %q, keep %v, %v; want %q, keep %v", body[:n], keep, err, tc.body, tc.keep)
			}
		})
	}
}

// TestReadStatsResponseCut: an answer cut anywhere is a connection error
// (io.ErrUnexpectedEOF or io.EOF), not a refusal: the pod may be stopping.
func TestReadStatsResponseCut(t *testing.T) {
	full := okHead + "Content-Length: 13\r\n\r\nebb1 1 2 3 4\n"
	for i := range len(full) {
		var body [MaxBody]byte
		_, _, err := ReadStatsResponse(bufio.NewReaderSize(strings.NewReader(full[:i]), 512), body[:])
		var re *ResponseError
		if err == nil || errors.As(err, &re) || !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d: %v, want an EOF", i, err)
		}
	}
}

// FuzzReadStatsResponse: whatever ReadStatsResponse accepts, net/http's
// http.ReadResponse accepts too, as a 200 with the same body, ending at the
// same byte, on a connection it would keep as well when ours keeps it; and
// ReadStatsResponse never consumes more than its bounds.
func FuzzReadStatsResponse(f *testing.F) {
	for _, s := range []string{
		okHead + "Content-Length: 13\r\n\r\nebb1 1 2 3 4\n",
		"HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n7\r\nebb1 1 \r\n6\r\n2 3 4\n\r\n0\r\n\r\n",
		"HTTP/1.0 200 OK\r\n" + ct + "Connection: keep-alive\r\nContent-Length: 2\r\n\r\nab",
		"HTTP/1.1 200 OK\r\n" + ct + "Transfer-Encoding: chunked\r\n\r\n2;x\r\nab\r\n0\r\nA: b\r\n\r\n",
		"HTTP/1.1 200 OK\r\n" + ct + "Content-Length: 2\r\nContent-Length: 2\r\n\r\nabGET",
		"HTTP/1.1 204 No Content\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		br := bufio.NewReaderSize(r, 512)
		var body [MaxBody]byte
		n, keep, err := ReadStatsResponse(br, body[:])
		consumed := len(in) - r.Len() - br.Buffered()
		if bound := MaxHead + 2*MaxBody + (MaxBody+1)*(maxChunkSizeDigits+4) + 2; consumed > bound {
			t.Fatalf("consumed %d bytes, bound %d", consumed, bound)
		}
		if err != nil {
			return
		}
		r2 := bytes.NewReader(in)
		br2 := bufio.NewReader(r2)
		resp, err := http.ReadResponse(br2, &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatalf("ours read %q from %q; net/http refuses it: %v", body[:n], in, err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("ours read %q from %q; net/http's body: %v", body[:n], in, err)
		}
		if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body[:n]) {
			t.Fatalf("from %q ours read 200 %q, net/http %d %q", in, body[:n], resp.StatusCode, got)
		}
		if consumed2 := len(in) - r2.Len() - br2.Buffered(); consumed2 != consumed {
			t.Fatalf("from %q ours consumed %d bytes, net/http %d", in, consumed, consumed2)
		}
		if keep && resp.Close {
			t.Fatalf("from %q ours keeps the connection, net/http closes it", in)
		}
	})
}
