package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// changedSysctls are the kernel settings a local cluster changes: the
// host network turns on ip_forward, and the kubelet rewrites the others at
// every start (its setupKernelTunables). Their values before the first
// start are saved in sysctlSavePath and restored at clean-up.
var changedSysctls = []string{
	"net/ipv4/ip_forward",
	"vm/overcommit_memory", "vm/panic_on_oom",
	"kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// sysctlSavePath keeps the machine's own values across a killed run.
const sysctlSavePath = "/run/ebb-local-cluster.sysctl"

// saveSysctls records the machine's values of changedSysctls unless a
// killed run already did (then the values on file are the machine's own,
// and the current ones are the cluster's).
func saveSysctls() error {
	if _, err := os.Stat(sysctlSavePath); err == nil {
		return nil
	}
	var b strings.Builder
	for _, k := range changedSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if errors.Is(err, os.ErrNotExist) {
			continue // this kernel has no such setting; nothing will change it
		}
		if err != nil {
			return fmt.Errorf("read sysctl %s: %w", k, err)
		}
		fmt.Fprintf(&b, "%s=%s\n", k, strings.TrimSpace(string(v)))
	}
	if err := os.WriteFile(sysctlSavePath, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("save sysctls: %w", err)
	}
	return nil
}

// restoreSysctls writes back what saveSysctls recorded, and forgets it
// only once every value is back.
func restoreSysctls() error {
	b, err := os.ReadFile(sysctlSavePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore sysctls: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v+"\n"), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return os.Remove(sysctlSavePath)
}
