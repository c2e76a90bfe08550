package proxy

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// epoller watches parked connections for the client hanging up
// (EPOLLRDHUP, EPOLLHUP, EPOLLERR) in an epoll set of its own, next to the
// Go runtime's: it never asks for EPOLLIN, so a request body waiting in the
// socket does not wake it, and nothing is read. One goroutine serves every
// parked connection.
type epoller struct {
	epfd  int
	wake  [2]int // a pipe; a byte on it stops the loop
	onHup func(token uint64)
}

func newPoller(onHup func(uint64)) (poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	e := &epoller{epfd: epfd, onHup: onHup}
	if err := unix.Pipe2(e.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN} // token 0
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, e.wake[0], &ev); err != nil {
		e.closeFDs()
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	go e.loop()
	return e, nil
}

func (e *epoller) closeFDs() {
	unix.Close(e.epfd)
	unix.Close(e.wake[0])
	unix.Close(e.wake[1])
}

func (e *epoller) loop() {
	var evs [128]unix.EpollEvent
	for {
		n, err := unix.EpollWait(e.epfd, evs[:], -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range evs[:n] {
			token := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if token == 0 {
				e.closeFDs()
				return
			}
			e.onHup(token)
		}
	}
}

func control(c net.Conn, f func(fd int)) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%T has no file descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { f(int(fd)) })
}

func (e *epoller) add(c net.Conn, token uint64) error {
	var err error
	cerr := control(c, func(fd int) {
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(uint32(token)), Pad: int32(uint32(token >> 32))}
		err = unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
	})
	return errors.Join(cerr, err)
}

func (e *epoller) del(c net.Conn) {
	control(c, func(fd int) { unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, fd, nil) })
}

// close stops the loop, which closes the epoll set.
func (e *epoller) close() { unix.Write(e.wake[1], []byte{0}) }
