// Package targets holds fuzz targets for test/fuzz's own tests: one that
// never fails and one that fails on an input its seed corpus holds.
package targets

import "testing"

func FuzzNeverFails(f *testing.F) {
	f.Add([]byte("a"))
	f.Fuzz(func(t *testing.T, b []byte) {})
}

func FuzzFailsOnX(f *testing.F) {
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if string(b) == "x" {
			t.Fatal("the input x")
		}
	})
}
