// Package errdefs defines the classes of error that nodeshim's facilities
// return and its node API turns into status codes, in the style of
// containerd's errdefs: an error belongs to a class when it wraps the
// class's sentinel, and callers test with errors.Is.
package errdefs

import "errors"

// The error classes.
var (
	// ErrNotFound: the named object (container, pod, cgroup) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrBusy: the object is in use by another operation of the same kind.
	ErrBusy = errors.New("busy")
	// ErrUnavailable: the service cannot take the request now (shutting
	// down, a dependency unreachable); the same request may succeed later.
	ErrUnavailable = errors.New("unavailable")
	// ErrNotSupported: the node lacks what the operation needs (a kernel
	// feature, a filesystem, a tool).
	ErrNotSupported = errors.New("not supported")
	// ErrInvalidArgument: the input itself is refused (a hostile or
	// malformed archive, a value outside its grammar); the same request
	// fails again.
	ErrInvalidArgument = errors.New("invalid argument")
)

// classed is an error of a class with a message of its own.
type classed struct {
	msg   string
	class error
}

func (e *classed) Error() string { return e.msg }
func (e *classed) Unwrap() error { return e.class }

// New returns an error whose message is msg and which belongs to class
// (one of the Err variables): a facility's own sentinel error.
func New(class error, msg string) error { return &classed{msg: msg, class: class} }
