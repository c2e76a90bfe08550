// Package suggest finds what a user probably meant by a key ebb does not
// read: the known key closest to it, for "did you mean" in a message.
package suggest

import "strings"

// Nearest returns the key of known closest to word, ignoring case, if it is
// close enough to be a slip of the keyboard: at most one edit (an insertion,
// a deletion, a substitution or two adjacent letters swapped) for keys of
// up to five letters, two for longer ones. It returns "" otherwise.
func Nearest(word string, known []string) string {
	best, bestD := "", -1
	w := strings.ToLower(word)
	for _, k := range known {
		d := distance(w, strings.ToLower(k))
		limit := 2
		if len(k) <= 5 {
			limit = 1
		}
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b (bytes).
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
