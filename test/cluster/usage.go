package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Usage is what a pod or a program has used: CPU time since it started,
// and resident memory now.
type Usage struct {
	CPU time.Duration
	// RSS is the sum of its processes' resident set sizes (VmRSS), bytes.
	RSS int64
}

// PodUsage reads a running pod's CPU time from its cgroup (cpuacct.usage of
// pod<uid> under a kubelet's cgroup root: every container's and the
// sandbox's) and the resident memory of its processes (one that exits
// between the cgroup's list and its own status holds none: it is skipped).
func PodUsage(pod *corev1.Pod) (Usage, error) {
	var u Usage
	var found bool
	for _, pl := range allPlans() {
		for _, qos := range []string{"", "burstable/", "besteffort/"} {
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", pl.cgroupRoot, "kubepods", qos+"pod"+string(pod.UID), "cpuacct.usage"))
			if err != nil {
				continue
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return u, fmt.Errorf("cpuacct.usage of pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			u.CPU, found = time.Duration(ns), true
		}
	}
	if !found {
		return u, fmt.Errorf("no cpuacct cgroup of pod %s/%s (uid %s) under the kubelets' cgroup roots", pod.Namespace, pod.Name, pod.UID)
	}
	pids, err := podPIDs(pod)
	if err != nil {
		return u, err
	}
	for _, pid := range pids {
		rss, err := vmRSS(pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited since the cgroup listed it
		}
		if err != nil {
			return u, err
		}
		u.RSS += rss
	}
	return u, nil
}

// ProcessUsage reads the CPU time (user and system, every thread) and the
// resident memory of one of the cluster's programs as Start ran it:
// "kube-apiserver", "keda-operator", "keda-adapter", "etcd", ... The
// program is the process Start made (nsenter and unshare exec it).
func (c *Cluster) ProcessUsage(name string) (Usage, error) {
	p := c.procs[name]
	if p == nil {
		return Usage{}, fmt.Errorf("no program %q in this cluster", name)
	}
	pid := p.cmd.Process.Pid
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Usage{}, fmt.Errorf("usage of %s: %w", name, err)
	}
	// pid (comm) state ppid ...: the fields after comm, which may hold
	// spaces, start at its closing parenthesis; utime and stime are the
	// 14th and 15th fields, in clock ticks (USER_HZ, 100 on Linux).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return Usage{}, fmt.Errorf("usage of %s: short /proc/%d/stat", name, pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return Usage{}, fmt.Errorf("usage of %s: /proc/%d/stat: %q %q", name, pid, f[11], f[12])
	}
	rss, err := vmRSS(pid)
	if err != nil {
		return Usage{}, err
	}
	return Usage{CPU: time.Duration(utime+stime) * 10 * time.Millisecond, RSS: rss}, nil
}

// vmRSS is a process's VmRSS in bytes (0 for a kernel thread or a zombie).
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process %d: VmRSS %q", pid, v)
			}
			return kb << 10, nil
		}
	}
	return 0, nil
}
