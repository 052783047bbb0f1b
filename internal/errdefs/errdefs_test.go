package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestNew(t *testing.T) {
	classes := []error{ErrNotFound, ErrBusy, ErrUnavailable, ErrNotSupported, ErrInvalidArgument}
	for _, class := range classes {
		t.Run(class.Error(), func(t *testing.T) {
			err := fmt.Errorf("checkpoint x: %w", New(class, "a message of its own"))
			if err.Error() != "checkpoint x: a message of its own" {
				t.Errorf("message %q", err)
			}
			for _, other := range classes {
				if errors.Is(err, other) != (other == class) {
					t.Errorf("errors.Is(%v, %v) = %v", err, other, !(other == class))
				}
			}
		})
	}
}
