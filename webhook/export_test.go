package webhook

import "time"

// The tests' instances look for KEDA's API every 2 s, not every minute, so
// that TestScaledByKEDA sees it appear quickly.
func init() { kedaCheckInterval = 2 * time.Second }
