package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RemoveLeftovers removes what any local cluster on this machine left
// behind, when it stopped or was killed: every cluster's node
// (removeNodeLeftovers) and network (removeNetwork), etcd's data in memory,
// and the kernel settings the clusters changed. It returns an error naming
// what it could not remove. Start calls it first (cluster 0 only: another
// runs beside it); call it only while holding the machine lock.
func RemoveLeftovers() error {
	for _, p := range allPlans() {
		removeNodeLeftovers(p)
		removeNetwork(p)
	}
	etcd, _ := filepath.Glob(etcdDataGlob)
	for _, d := range etcd {
		_ = os.RemoveAll(d)
	}
	err := restoreSysctls()
	if left := Leftovers(); len(left) > 0 {
		return errors.Join(err, fmt.Errorf("a local cluster's leftovers could not all be removed: %s", strings.Join(left, "; ")))
	}
	return err
}

// etcdDataGlob matches the in-memory data directories of local clusters'
// etcd.
const etcdDataGlob = "/dev/shm/ebb-etcd-*"

// Leftovers describes what local clusters left on this machine: container
// processes, shims, mounts, state directories, cgroups, etcd's data, the
// bridge, network namespaces and veths, kube-proxy's tables and the tests' (sweptTables) and the saved
// kernel settings not yet restored. It is empty when nothing is left.
func Leftovers() []string {
	var left []string
	for _, p := range allPlans() {
		left = append(left, nodeLeftovers(p)...)
		if p.netns != "" {
			if _, err := os.Stat("/run/netns/" + p.netns); err == nil {
				left = append(left, "network namespace "+p.netns)
			}
			if _, err := os.Stat("/sys/class/net/" + p.hostLink); err == nil {
				left = append(left, "link "+p.hostLink)
			}
		}
	}
	etcd, _ := filepath.Glob(etcdDataGlob)
	for _, d := range append([]string{sysctlSavePath}, etcd...) {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + BridgeName); err == nil {
		left = append(left, "link "+BridgeName)
	}
	for _, t := range sweptTables {
		if exec.Command("nft", "list", "table", t[0], t[1]).Run() == nil {
			left = append(left, "nftables table "+t[0]+" "+t[1])
		}
	}
	return left
}

// nodeLeftovers is what one cluster's node left: processes in its cgroups,
// its containerd's shims, mounts and directories under its state paths.
func nodeLeftovers(p plan) []string {
	var left []string
	if n := len(cgroupProcesses(p)); n > 0 {
		left = append(left, fmt.Sprintf("%d processes in cgroup %s", n, p.cgroupRoot))
	}
	if n := len(shims(p)); n > 0 {
		left = append(left, fmt.Sprintf("%d containerd shims of %s", n, p.containerdSock()))
	}
	for _, m := range mountPoints() {
		if under(m, p.containerdRoot, p.containerdState, p.kubeletRoot) {
			left = append(left, "mount "+m)
		}
	}
	for _, d := range append([]string{p.containerdState, p.kubeletRoot, p.cniState, p.containerdRoot}, cgroupDirs(p)...) {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	return left
}

// removeNodeLeftovers undoes what the node's programs leave behind when
// they stop or are killed: every container process (found by its cgroup
// under cgroupRoot), containerd's shims, the mounts under the node's state
// directories (overlay roots, pod volumes, network namespaces), those
// directories, and the pods' cgroups. A directory that still has a mount
// under it is left alone (RemoveAll would delete through the mount). It
// touches nothing outside the paths this package owns and is safe to call
// when nothing is left.
func removeNodeLeftovers(p plan) {
	killContainers(p)
	killShims(p)
	unmountUnder(p.containerdRoot, p.containerdState, p.kubeletRoot)
	mounts := mountPoints()
	for _, d := range []string{p.containerdState, p.kubeletRoot, p.cniState, p.containerdRoot} {
		if !slices.ContainsFunc(mounts, func(m string) bool { return under(m, d) }) {
			_ = os.RemoveAll(d)
		}
	}
	// A cgroup goes once its last process has exited, which can take a
	// moment after SIGKILL.
	for range 20 {
		if removeCgroups(p); len(cgroupDirs(p)) == 0 {
			return
		}
		killCgroupProcesses(p)
		time.Sleep(100 * time.Millisecond)
	}
}

// killContainers SIGKILLs the processes in cgroups under cgroupRoot until
// none is left, for at most 5 s.
func killContainers(p plan) {
	for range 50 {
		if killCgroupProcesses(p) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1 controllers and
// the unified one).
func cgroupHierarchies() []string {
	var roots []string
	for _, m := range mountPoints() {
		if strings.HasPrefix(m, "/sys/fs/cgroup/") {
			roots = append(roots, m)
		}
	}
	return roots
}

// cgroupDirs are cgroupRoot in every hierarchy that has it.
func cgroupDirs(p plan) []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, p.cgroupRoot)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// makeCgroupRoot creates cgroupRoot in every hierarchy, which the kubelet
// requires before it starts; a v1 cpuset gets its parent's CPUs and memory
// nodes, without which no process could join it.
func makeCgroupRoot(p plan) error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, p.cgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("cgroup %s: %w", d, err)
				}
			}
		}
	}
	return nil
}

// cgroupProcesses are the processes in a cgroup under cgroupRoot.
func cgroupProcesses(p plan) []int {
	var pids []int
	for _, root := range cgroupDirs(p) {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range bytes.Fields(b) {
				if pid, err := strconv.Atoi(string(f)); err == nil && pid > 1 {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// killCgroupProcesses SIGKILLs every process in a cgroup under cgroupRoot
// and returns how many it found.
func killCgroupProcesses(p plan) int {
	pids := cgroupProcesses(p)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// shims are the runc shims started by this package's containerd (they
// name its socket on their command line).
func shims(pl plan) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("containerd-shim")) || !bytes.Contains(b, []byte(pl.containerdSock())) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killShims SIGKILLs the shims.
func killShims(p plan) {
	for _, pid := range shims(p) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// mountPoints lists this mount namespace's mount points in mount order.
func mountPoints() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 {
			points = append(points, unescapeMount(fields[4]))
		}
	}
	return points
}

// unescapeMount decodes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below the given directories,
// the most recent first.
func unmountUnder(dirs ...string) {
	points := mountPoints()
	slices.Reverse(points)
	for _, m := range points {
		if under(m, dirs...) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
}

// under reports whether path is one of dirs or below one.
func under(path string, dirs ...string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// removeCgroups removes the cgroups under cgroupRoot, children first.
func removeCgroups(p plan) {
	for _, root := range cgroupDirs(p) {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			_ = syscall.Rmdir(d)
		}
	}
}
