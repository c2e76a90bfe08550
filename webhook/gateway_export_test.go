package webhook

import "time"

// The tests' instances look for the Gateway API's HTTPRoutes every 2 s,
// not every minute, so that TestHostsFromHTTPRoute sees them come and go
// quickly.
func init() { gatewayCheckInterval = 2 * time.Second }
