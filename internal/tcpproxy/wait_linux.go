package tcpproxy

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// waiter waits until a point in time with the kernel's timer precision.
// Go's own timers wake a goroutine no sooner than about a millisecond
// when the process has nothing else to do, four times a 0.25 ms delay;
// a timerfd read through the runtime's poller wakes it when the timer
// fires, and holds no thread while it waits.
type waiter struct {
	fd   int
	file *os.File
}

func newWaiter() *waiter {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &waiter{fd: -1}
	}
	return &waiter{fd: fd, file: os.NewFile(uintptr(fd), "timerfd")}
}

// until returns at t or soon after.
func (w *waiter) until(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	if w.file == nil {
		time.Sleep(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	if err := unix.TimerfdSettime(w.fd, 0, &spec, nil); err != nil {
		time.Sleep(d)
		return
	}
	// The read returns the number of expirations, always 1 here.
	var expirations [8]byte
	if _, err := w.file.Read(expirations[:]); err != nil {
		time.Sleep(time.Until(t))
	}
}

func (w *waiter) close() {
	if w.file != nil {
		_ = w.file.Close()
	}
}
