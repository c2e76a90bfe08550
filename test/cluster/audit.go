package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// auditPolicy logs every request at the Metadata level (user, user agent,
// verb, resource, namespace, name, response code; no bodies): once when a
// long-running request (a watch, logs, exec) starts answering
// (ResponseStarted) and once when any request is complete
// (ResponseComplete). RequestReceived is left out: it would double every
// line and says nothing a reader of rates needs. Nothing is exempted, so
// the log shows every client, the control plane's own included.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// writeAuditPolicy writes the audit policy into the cluster's directory
// and sets AuditLogPath, which startAPIServer then passes on.
func (c *Cluster) writeAuditPolicy() error {
	if err := os.WriteFile(filepath.Join(c.Dir, "audit-policy.yaml"), []byte(auditPolicy), 0o600); err != nil {
		return fmt.Errorf("write audit policy: %w", err)
	}
	c.AuditLogPath = filepath.Join(c.Dir, "logs", "audit.log")
	return nil
}

// auditArgs are the API server's audit flags: JSON lines, written as each
// event happens (the log backend's blocking mode), and never rotated
// within a cluster's life (4 GiB, far above what a run writes), so a
// reader can keep its offset.
func (c *Cluster) auditArgs() []string {
	return []string{
		"--audit-policy-file", filepath.Join(c.Dir, "audit-policy.yaml"),
		"--audit-log-path", c.AuditLogPath,
		"--audit-log-format", "json",
		"--audit-log-mode", "blocking",
		"--audit-log-maxsize", "4096",
		"--audit-log-maxbackup", "1",
		"--audit-log-maxage", "1",
	}
}
