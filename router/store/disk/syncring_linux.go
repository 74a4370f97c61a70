package disk

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// syncRing syncs the write-ahead log through an io_uring (Linux 5.4 and later): the sync is
// queued to the kernel, which runs it on a worker of its own, and the goroutine that asked
// waits for its completion in Go's network poller. A plain fdatasync is a system call that
// keeps its goroutine's P (the Go scheduler's processor) while it lasts, 150–300 µs on this
// kind of disk, and every goroutine readied onto that P meanwhile waits it out unless another
// P is idle to take it (the runtime's monitor takes such a P back after 20 µs at the soonest
// and up to 10 ms): with deliveries keeping the other cores busy, the publishers the last
// sync's commit answered waited for the next sync before they could write their answers
// (README, Durability: "Where the ack's median goes while deliveries run"). Through the ring
// the P runs them while the disk syncs.
//
// One ring serves a store for its lifetime, one sync at a time (pebble syncs one log at a
// time). Where the kernel refuses io_uring (before 5.4, kernel.io_uring_disabled, a seccomp
// profile such as Docker's default one), newSyncRing fails and the store syncs with
// fdatasync as before.
type syncRing struct {
	mu     sync.Mutex
	closed bool
	fd     int
	ev     *os.File      // an eventfd the kernel signals on each completion, read through the poller
	ring   []byte        // the submission and completion rings (one mapping)
	sqes   []byte        // the submission queue entries
	user   uint64        // the user data of the last submission
	syncs  atomic.Uint64 // syncs completed through the ring

	sqHead, sqTail, sqMask *uint32
	sqArray                unsafe.Pointer
	cqHead, cqTail, cqMask *uint32
	cqes                   unsafe.Pointer
}

// The kernel's ABI (include/uapi/linux/io_uring.h).
const (
	ioringOpFsync         = 3
	ioringFsyncDatasync   = 1
	ioringRegisterEventfd = 4
	ioringFeatSingleMmap  = 1
	ioringOffSQRing       = 0
	ioringOffSQEs         = 0x10000000
	sqeSize               = 64
	cqeSize               = 16
	ringEntries           = 2
)

// ioUringParams is struct io_uring_params.
type ioUringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// newSyncRing sets up a ring for syncs, or says why the kernel gives none.
func newSyncRing() (*syncRing, error) {
	var p ioUringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, ringEntries, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &syncRing{fd: int(fd)}
	if p.features&ioringFeatSingleMmap == 0 {
		_ = unix.Close(r.fd)
		return nil, errors.New("io_uring: the kernel maps the rings separately (before 5.4)")
	}
	size := max(int(p.sqOff.array)+int(p.sqEntries)*4, int(p.cqOff.cqes)+int(p.cqEntries)*cqeSize)
	var err error
	if r.ring, err = unix.Mmap(r.fd, ioringOffSQRing, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		_ = unix.Close(r.fd)
		return nil, fmt.Errorf("io_uring: mapping the rings: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, ioringOffSQEs, int(p.sqEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.release()
		return nil, fmt.Errorf("io_uring: mapping the entries: %w", err)
	}
	at := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&r.ring[off])) }
	r.sqHead, r.sqTail, r.sqMask = at(p.sqOff.head), at(p.sqOff.tail), at(p.sqOff.ringMask)
	r.sqArray = unsafe.Pointer(&r.ring[p.sqOff.array])
	r.cqHead, r.cqTail, r.cqMask = at(p.cqOff.head), at(p.cqOff.tail), at(p.cqOff.ringMask)
	r.cqes = unsafe.Pointer(&r.ring[p.cqOff.cqes])
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		r.release()
		return nil, fmt.Errorf("io_uring: eventfd: %w", err)
	}
	e := int32(efd)
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), ioringRegisterEventfd, uintptr(unsafe.Pointer(&e)), 1, 0, 0); errno != 0 {
		_ = unix.Close(efd)
		r.release()
		return nil, fmt.Errorf("io_uring: registering the eventfd: %w", errno)
	}
	r.ev = os.NewFile(uintptr(efd), "io_uring completions") // non-blocking: read through the poller
	return r, nil
}

func (r *syncRing) release() {
	if r.sqes != nil {
		_ = unix.Munmap(r.sqes)
	}
	if r.ring != nil {
		_ = unix.Munmap(r.ring)
	}
	_ = unix.Close(r.fd)
}

// close releases the ring; syncs after it are plain fdatasyncs.
func (r *syncRing) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.shut()
	}
}

// shut releases the ring, r.mu held.
func (r *syncRing) shut() {
	r.closed = true
	_ = r.ev.Close()
	r.release()
}

// datasync is fdatasync(fd) through the ring.
func (r *syncRing) datasync(fd uintptr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ignoringEINTR(func() error { return unix.Fdatasync(int(fd)) })
	}
	r.user++
	tail := atomic.LoadUint32(r.sqTail)
	idx := tail & *r.sqMask
	sqe := r.sqes[idx*sqeSize : (idx+1)*sqeSize]
	clear(sqe)
	sqe[0] = ioringOpFsync
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
	*(*uint32)(unsafe.Pointer(&sqe[28])) = ioringFsyncDatasync
	*(*uint64)(unsafe.Pointer(&sqe[32])) = r.user
	*(*uint32)(unsafe.Add(r.sqArray, 4*uintptr(idx))) = idx
	atomic.StoreUint32(r.sqTail, tail+1)
	// Submitted once the kernel's head has passed the entry; an io_uring_enter cut by a
	// signal may or may not have taken it, so the head is what counts.
	for atomic.LoadUint32(r.sqHead) != tail+1 {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 0, 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			// Not queued: the entry stays in the ring unsubmitted, so the ring is given up
			// and this sync and the later ones are plain fdatasyncs.
			r.shut()
			return ignoringEINTR(func() error { return unix.Fdatasync(int(fd)) })
		}
	}
	var buf [8]byte
	for {
		head := atomic.LoadUint32(r.cqHead)
		if head != atomic.LoadUint32(r.cqTail) {
			cqe := unsafe.Add(r.cqes, cqeSize*uintptr(head&*r.cqMask))
			user, res := *(*uint64)(cqe), *(*int32)(unsafe.Add(cqe, 8))
			atomic.StoreUint32(r.cqHead, head+1)
			if user != r.user {
				continue // not ours (none should be)
			}
			r.syncs.Add(1)
			if res < 0 {
				return syscall.Errno(-res)
			}
			return nil
		}
		// Wait for the kernel's signal in the poller: the P runs other goroutines meanwhile.
		if _, err := r.ev.Read(buf[:]); err != nil {
			return fmt.Errorf("io_uring: waiting for the sync: %w", err)
		}
	}
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}
