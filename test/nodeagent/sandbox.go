package nodeagent

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Names the agent gives what it creates on the host, so that leftovers of a
// killed run can be found and removed.
const (
	netnsPrefix = "ebb-"
	vethPrefix  = "ebv"
	netnsEtc    = "/etc/netns"
)

// sandbox is a pod's network namespace, wired to the bridge by a veth pair.
type sandbox struct {
	netns string
	veth  string
	ip    netip.Addr
	dir   string // pod's run directory: volumes, hosts file staging
}

func (s *sandbox) hostsPath() string { return filepath.Join(netnsEtc, s.netns, "hosts") }

// ipPool hands out pod addresses from the pod CIDR, skipping x.x.0.x (the
// node's own block).
type ipPool struct {
	mu   sync.Mutex
	next netip.Addr
	cidr netip.Prefix
	used map[netip.Addr]bool
}

func newIPPool(cidr netip.Prefix) *ipPool {
	first := cidr.Masked().Addr().As4()
	first[2], first[3] = 1, 1
	return &ipPool{next: netip.AddrFrom4(first), cidr: cidr, used: map[netip.Addr]bool{}}
}

func (p *ipPool) get() (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 1 << 16 {
		a := p.next
		p.next = a.Next()
		if !p.cidr.Contains(p.next) {
			p.next = newIPPool(p.cidr).next
		}
		b := a.As4()
		if b[3] == 0 || b[3] == 255 || b[2] == 0 || p.used[a] {
			continue
		}
		p.used[a] = true
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s exhausted", p.cidr)
}

func (p *ipPool) put(a netip.Addr) {
	p.mu.Lock()
	delete(p.used, a)
	p.mu.Unlock()
}

// createSandbox makes the pod's namespace: veth peer eth0 with the pod's
// address, lo up, default route via the bridge, and its /etc/netns files.
func createSandbox(id string, addr netip.Addr, cfg *Config) (*sandbox, error) {
	s := &sandbox{netns: netnsPrefix + id, veth: vethPrefix + id, ip: addr, dir: filepath.Join(cfg.RunDir, id)}
	bits := cfg.PodCIDR.Bits()
	steps := [][]string{
		{"netns", "add", s.netns},
		{"link", "add", s.veth, "type", "veth", "peer", "name", "eth0", "netns", s.netns},
		{"link", "set", s.veth, "master", cfg.Bridge, "up"},
		{"-n", s.netns, "addr", "add", fmt.Sprintf("%s/%d", addr, bits), "dev", "eth0"},
		{"-n", s.netns, "link", "set", "eth0", "up"},
		{"-n", s.netns, "link", "set", "lo", "up"},
		{"-n", s.netns, "route", "add", "default", "via", cfg.NodeIP},
	}
	for _, st := range steps {
		if err := ip(st...); err != nil {
			s.remove()
			return nil, fmt.Errorf("create sandbox %s: %w", s.netns, err)
		}
	}
	etc := filepath.Join(netnsEtc, s.netns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		s.remove()
		return nil, fmt.Errorf("create sandbox %s: %w", s.netns, err)
	}
	// A resolver that answers nothing: names resolve from the hosts file only,
	// and unknown names fail at once instead of leaving the machine.
	resolv := "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		s.remove()
		return nil, fmt.Errorf("create sandbox %s: %w", s.netns, err)
	}
	if err := os.WriteFile(s.hostsPath(), nil, 0o644); err != nil {
		s.remove()
		return nil, fmt.Errorf("create sandbox %s: %w", s.netns, err)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		s.remove()
		return nil, fmt.Errorf("create sandbox %s: %w", s.netns, err)
	}
	return s, nil
}

// remove kills anything still inside the namespace and deletes it (the veth
// pair goes with it), its /etc/netns files and the pod's run directory.
func (s *sandbox) remove() {
	killNetnsPids(s.netns)
	_ = ip("netns", "del", s.netns)
	_ = ip("link", "del", s.veth)
	_ = os.RemoveAll(filepath.Join(netnsEtc, s.netns))
	if s.dir != "" {
		unmountUnder(s.dir)
		_ = os.RemoveAll(s.dir)
	}
}

// writeHosts rewrites the hosts file in place: `ip netns exec` bind-mounted
// this inode over the pod's /etc/hosts, so a rename would not be seen.
func (s *sandbox) writeHosts(content []byte) error {
	if err := rewriteInPlace(s.hostsPath(), content); err != nil {
		return fmt.Errorf("write hosts of %s: %w", s.netns, err)
	}
	return nil
}

// rewriteInPlace replaces the content of an existing file keeping its inode.
func rewriteInPlace(path string, content []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write(content)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

func killNetnsPids(netns string) {
	out, err := exec.Command("ip", "netns", "pids", netns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// CleanupLeftovers removes every namespace, veth and /etc/netns entry a
// previous run of the agent left behind (a crashed or killed test).
func CleanupLeftovers() {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && strings.HasPrefix(f[0], netnsPrefix) {
				(&sandbox{netns: f[0]}).remove()
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 {
				name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
				if strings.HasPrefix(name, vethPrefix) {
					_ = ip("link", "del", name)
				}
			}
		}
	}
	if entries, err := os.ReadDir(netnsEtc); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), netnsPrefix) {
				_ = os.RemoveAll(filepath.Join(netnsEtc, e.Name()))
			}
		}
	}
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// unmountUnder lazily unmounts anything the host sees mounted below dir
// (volume mounts live in the containers' own mount namespaces, but be safe).
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
}

// imageProgram maps an image reference to the program it runs:
// "registry/path/name:tag@sha256:..." → "name".
func imageProgram(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, "/"); i >= 0 {
		image = image[i+1:]
	}
	if i := strings.Index(image, ":"); i >= 0 {
		image = image[:i]
	}
	return image
}

// NetnsName is the network namespace the agent gives the pod with this UID,
// so tests can run a program inside a pod (`ip netns exec <name> …`).
func NetnsName(uid string) string {
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return netnsPrefix + uid
}
