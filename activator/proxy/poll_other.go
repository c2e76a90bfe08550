//go:build !linux

package activator

import "errors"

// Without epoll, held HTTP/1.x requests wait in their handlers.
func newPoller(func(uint64)) (poller, error) {
	return nil, errors.New("parking needs epoll (linux)")
}
