// Package procmetrics owns the series every ebb binary exports about its
// own process, the same small set in each: the Go runtime's goroutines,
// threads, GC pauses, live heap and limits (GOGC, GOMEMLIMIT, GOMAXPROCS),
// and the process collector's CPU, memory, file descriptors and network
// bytes. It leaves out the Go collector's 25 go_memstats_* gauges, which
// the resident memory and the live heap answer for, and the whole
// runtime/metrics set controller-runtime registers (225 series, most of
// them histograms of the scheduler and the GC).
package procmetrics
