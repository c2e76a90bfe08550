package injecttest

import "testing"

// TestKubeletExpand holds KubeletExpand to the kubelet's documented
// examples, so that the contract tests see what the sidecar sees.
func TestKubeletExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "EMPTY": ""}
	for in, want := range map[string]string{
		"$(A)": "a", "x$(A)y": "xay", "$$(A)": "$(A)", "$$$(A)": "$a", "$$": "$", "$": "$",
		"$(B)": "$(B)", "$(A": "$(A", "$A": "$A", "X$$A": "X$A", "$(EMPTY)": "", "a$$$$b": "a$$b",
	} {
		if got := KubeletExpand(in, vars); got != want {
			t.Errorf("KubeletExpand(%q) = %q, want %q", in, got, want)
		}
	}
}
