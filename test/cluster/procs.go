package cluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Process is a process of a pod as the node runs it: who it runs as, with
// which capabilities, on what root filesystem, in which cgroup limits.
type Process struct {
	PID     int
	Command string // argv[0]
	// ContainerID is the runtime's ID of its container (or its sandbox's),
	// the last element of its cgroup path.
	ContainerID string
	// UID and GID are the effective ones.
	UID, GID int
	// CapEff is the effective capability set, as /proc shows it (hex).
	CapEff string
	// ReadOnlyRoot says its root filesystem is mounted read-only.
	ReadOnlyRoot bool
	// MemoryLimit is its memory cgroup's limit in bytes (cgroup v1's
	// memory.limit_in_bytes: a huge number when unlimited).
	MemoryLimit int64
	// CPUShares is its cpu cgroup's weight (the kubelet's translation of
	// the CPU request), CPUQuota its CFS quota per period in µs, -1 for
	// none (no CPU limit).
	CPUShares, CPUQuota int64
}

// PodProcesses lists the processes of a running pod (its sandbox's and its
// containers').
func PodProcesses(pod *corev1.Pod) ([]Process, error) {
	pids, err := podPIDs(pod)
	if err != nil {
		return nil, err
	}
	procs := make([]Process, 0, len(pids))
	for _, pid := range pids {
		p, err := readProcess(pid)
		if err != nil {
			return nil, fmt.Errorf("processes of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// PodPID is a process of a running pod (its sandbox's or a container's).
func PodPID(pod *corev1.Pod) (int, error) {
	pids, err := podPIDs(pod)
	if err != nil {
		return 0, err
	}
	return pids[0], nil
}

// podPIDs finds a pod's processes by its cgroup under any cluster's
// kubelet cgroup root (<root>/kubepods[/<qos>]/pod<uid>/<container>), in the pids
// hierarchy.
func podPIDs(pod *corev1.Pod) ([]int, error) {
	var pids []int
	var files []string
	for _, pl := range allPlans() {
		for _, qos := range []string{"", "burstable/", "besteffort/"} {
			f, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/pids", pl.cgroupRoot, "kubepods", qos+"pod"+string(pod.UID), "*", "cgroup.procs"))
			files = append(files, f...)
		}
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process of pod %s/%s (uid %s) under the kubelets' cgroup roots", pod.Namespace, pod.Name, pod.UID)
	}
	return pids, nil
}

func readProcess(pid int) (Process, error) {
	p := Process{PID: pid}
	proc := "/proc/" + strconv.Itoa(pid)
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return p, fmt.Errorf("process %d: %w", pid, err)
	}
	p.Command, _, _ = strings.Cut(string(cmdline), "\x00")
	status, err := os.ReadFile(proc + "/status")
	if err != nil {
		return p, fmt.Errorf("process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		switch {
		case k == "Uid" && len(f) > 1:
			p.UID, _ = strconv.Atoi(f[1])
		case k == "Gid" && len(f) > 1:
			p.GID, _ = strconv.Atoi(f[1])
		case k == "CapEff" && len(f) > 0:
			p.CapEff = f[0]
		}
	}
	mounts, err := os.Open(proc + "/mountinfo")
	if err != nil {
		return p, fmt.Errorf("process %d: %w", pid, err)
	}
	defer mounts.Close()
	s := bufio.NewScanner(mounts)
	for s.Scan() {
		// mountinfo: id parent major:minor root mountpoint options ...; the
		// last mount on / is the one the process sees.
		if f := strings.Fields(s.Text()); len(f) > 5 && f[4] == "/" {
			p.ReadOnlyRoot = strings.HasPrefix(f[5], "ro")
		}
	}
	cgroups, err := os.ReadFile(proc + "/cgroup")
	if err != nil {
		return p, fmt.Errorf("process %d: %w", pid, err)
	}
	p.MemoryLimit, p.CPUShares, p.CPUQuota = -1, -1, -1
	for _, line := range strings.Split(strings.TrimSpace(string(cgroups)), "\n") {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			switch ctrl {
			case "pids":
				p.ContainerID = filepath.Base(parts[2])
			case "memory":
				p.MemoryLimit = readInt(filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"))
			case "cpu":
				dir := filepath.Join("/sys/fs/cgroup/cpu", parts[2])
				p.CPUShares, p.CPUQuota = readInt(filepath.Join(dir, "cpu.shares")), readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
			}
		}
	}
	return p, nil
}

// readInt reads a cgroup file holding one integer; -2 if it cannot.
func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return -2
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -2
	}
	return v
}
