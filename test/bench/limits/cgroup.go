package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's conversions (pkg/kubelet/cm/helpers_linux.go).
const (
	minShares   = 2
	quotaPeriod = 100000 // µs
	minQuota    = 1000   // µs
)

// cgroupValues are what the kubelet's cgroupfs driver writes for a
// container's resources.
type cgroupValues struct {
	shares   int64 // cpu.shares
	quota    int64 // cpu.cfs_quota_us per quotaPeriod; -1: no CPU limit
	memLimit int64 // bytes; 0: no memory limit
}

func kubeletValues(r corev1.ResourceRequirements) cgroupValues {
	// The API server defaults a missing request to the limit.
	req, ok := r.Requests[corev1.ResourceCPU]
	if !ok {
		req = r.Limits[corev1.ResourceCPU]
	}
	v := cgroupValues{shares: milliCPUToShares(req.MilliValue()), quota: -1}
	if lim, ok := r.Limits[corev1.ResourceCPU]; ok && !lim.IsZero() {
		v.quota = max(minQuota, lim.MilliValue()*quotaPeriod/1000)
	}
	if lim, ok := r.Limits[corev1.ResourceMemory]; ok {
		v.memLimit = lim.Value()
	}
	return v
}

func milliCPUToShares(milli int64) int64 { return max(minShares, milli*1024/1000) }

// sharesToWeight is runc's CpuSharesToCpuWeight, which the kubelet uses on
// cgroup v2.
func sharesToWeight(shares int64) int64 { return 1 + (shares-2)*9999/262142 }

func (v cgroupValues) String() string {
	quota, mem := "none", "none"
	if v.quota >= 0 {
		quota = fmt.Sprintf("%d µs", v.quota)
	}
	if v.memLimit > 0 {
		mem = fmt.Sprintf("%d Mi", v.memLimit>>20)
	}
	return fmt.Sprintf("%d / %s / %s", v.shares, quota, mem)
}

// hierarchy is where the bench's cgroups go: ebb-bench-limits under the
// bench's own cgroup in the cpu and memory hierarchies (cgroup v1) or in the
// unified one (v2).
type hierarchy struct {
	v2       bool
	cpu, mem string // the ebb-bench-limits directories; the same on v2
}

const cgroupName = "ebb-bench-limits"

// openHierarchy finds where the bench's cgroups go and makes
// ebb-bench-limits there; on error it leaves nothing behind.
func openHierarchy() (h hierarchy, err error) {
	own, err := ownCgroups()
	if err != nil {
		return h, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.remove(nil))
		}
	}()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		// A cgroup with processes in it cannot hand controllers to its
		// children (v2's no-internal-process rule): ebb-bench-limits goes
		// next to the bench's own cgroup.
		parent := filepath.Join("/sys/fs/cgroup", path.Dir(own[""]))
		h = hierarchy{v2: true, cpu: filepath.Join(parent, cgroupName), mem: filepath.Join(parent, cgroupName)}
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+cpu +memory"); err != nil {
			return h, err
		}
	} else {
		h = hierarchy{
			cpu: filepath.Join("/sys/fs/cgroup/cpu", own["cpu"], cgroupName),
			mem: filepath.Join("/sys/fs/cgroup/memory", own["memory"], cgroupName),
		}
	}
	for _, dir := range h.dirs() {
		if err := makeCgroup(dir); err != nil {
			return h, err
		}
	}
	// ebb-bench-limits weighs against the rest of the machine as the
	// kubelet's kubepods cgroup does: by the node's allocatable CPUs (here
	// every CPU).
	kubepods := milliCPUToShares(int64(runtime.NumCPU()) * 1000)
	if h.v2 {
		if err := writeFile(filepath.Join(h.cpu, "cgroup.subtree_control"), "+cpu +memory"); err != nil {
			return h, err
		}
		return h, writeFile(filepath.Join(h.cpu, "cpu.weight"), strconv.FormatInt(sharesToWeight(kubepods), 10))
	}
	return h, writeFile(filepath.Join(h.cpu, "cpu.shares"), strconv.FormatInt(kubepods, 10))
}

// ownCgroups maps each controller to the bench's cgroup in its hierarchy,
// from /proc/self/cgroup; "" is the unified hierarchy.
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("own cgroups: %w", err)
	}
	defer f.Close()
	own := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			own[c] = f[2]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("own cgroups: %w", err)
	}
	return own, nil
}

func (h hierarchy) dirs() []string {
	if h.v2 {
		return []string{h.cpu}
	}
	return []string{h.cpu, h.mem}
}

// remove removes the configurations' cgroups, then ebb-bench-limits. Their
// processes must have exited.
func (h hierarchy) remove(cgs []cgroup) error {
	var errs []error
	for _, cg := range cgs {
		for _, dir := range cg.dirs() {
			errs = append(errs, removeCgroup(dir))
		}
	}
	for _, dir := range h.dirs() {
		errs = append(errs, removeCgroup(dir))
	}
	return errors.Join(errs...)
}

// cgroup is one configuration's cgroup.
type cgroup struct {
	h    hierarchy
	name string
}

// newCgroup makes the cgroup name and writes v into it.
func (h hierarchy) newCgroup(name string, v cgroupValues) (cgroup, error) {
	cg := cgroup{h: h, name: name}
	for _, dir := range cg.dirs() {
		if err := makeCgroup(dir); err != nil {
			return cg, err
		}
	}
	cpu, mem := cg.cpuDir(), cg.memDir()
	var files [][2]string // file, value, in order
	if h.v2 {
		cpuMax, memMax := "max", "max"
		if v.quota >= 0 {
			cpuMax = strconv.FormatInt(v.quota, 10)
		}
		if v.memLimit > 0 {
			memMax = strconv.FormatInt(v.memLimit, 10)
		}
		files = [][2]string{
			{filepath.Join(cpu, "cpu.weight"), strconv.FormatInt(sharesToWeight(v.shares), 10)},
			{filepath.Join(cpu, "cpu.max"), fmt.Sprintf("%s %d", cpuMax, quotaPeriod)},
			{filepath.Join(mem, "memory.max"), memMax},
		}
	} else {
		files = [][2]string{
			{filepath.Join(cpu, "cpu.shares"), strconv.FormatInt(v.shares, 10)},
			{filepath.Join(cpu, "cpu.cfs_period_us"), strconv.Itoa(quotaPeriod)},
			{filepath.Join(cpu, "cpu.cfs_quota_us"), strconv.FormatInt(v.quota, 10)},
		}
		if v.memLimit > 0 {
			files = append(files, [2]string{filepath.Join(mem, "memory.limit_in_bytes"), strconv.FormatInt(v.memLimit, 10)})
		}
	}
	for _, f := range files {
		if err := writeFile(f[0], f[1]); err != nil {
			return cg, err
		}
	}
	return cg, nil
}

func (cg cgroup) cpuDir() string { return filepath.Join(cg.h.cpu, cg.name) }
func (cg cgroup) memDir() string { return filepath.Join(cg.h.mem, cg.name) }

func (cg cgroup) dirs() []string {
	if cg.h.v2 {
		return []string{cg.cpuDir()}
	}
	return []string{cg.cpuDir(), cg.memDir()}
}

// procsFiles are the files a process is moved in with.
func (cg cgroup) procsFiles() []string {
	var out []string
	for _, dir := range cg.dirs() {
		out = append(out, filepath.Join(dir, "cgroup.procs"))
	}
	return out
}

// throttling is the CFS bandwidth counters of cpu.stat.
type throttling struct {
	periods, throttled int64 // periods with the quota in force; those that ran out of it
}

func (cg cgroup) throttling() (throttling, error) {
	b, err := os.ReadFile(filepath.Join(cg.cpuDir(), "cpu.stat"))
	if err != nil {
		return throttling{}, fmt.Errorf("cgroup %s: %w", cg.name, err)
	}
	var t throttling
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(v, 10, 64) // every field is an integer; a malformed one counts 0
		switch k {
		case "nr_periods":
			t.periods = n
		case "nr_throttled":
			t.throttled = n
		}
	}
	return t, nil
}

func (t throttling) sub(u throttling) throttling {
	return throttling{periods: t.periods - u.periods, throttled: t.throttled - u.throttled}
}

func (t throttling) add(u throttling) throttling {
	return throttling{periods: t.periods + u.periods, throttled: t.throttled + u.throttled}
}

// memoryPeak is the most memory the cgroup has used, in bytes.
func (cg cgroup) memoryPeak() (int64, error) {
	file := "memory.max_usage_in_bytes"
	if cg.h.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(cg.memDir(), file))
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", cg.name, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: %s: %w", cg.name, file, err)
	}
	return n, nil
}

// makeCgroup makes dir, first removing an empty one an interrupted run may
// have left.
func makeCgroup(dir string) error {
	os.Remove(dir) // fails unless it exists and is empty; Mkdir then says why
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("make cgroup: %w", err)
	}
	return nil
}

// removeCgroup removes dir, waiting up to 2 s for the processes that have
// just exited to leave it.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func writeFile(name, value string) error {
	if err := os.WriteFile(name, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %q: %w", value, err)
	}
	return nil
}
