//go:build !linux

package proxy

import "errors"

// Without epoll, parked requests are not watched for their client leaving.
func newPoller(func(uint64)) (poller, error) {
	return nil, errors.New("parking needs epoll (linux)")
}
