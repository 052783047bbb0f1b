package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
)

// TestStatusCode checks the one mapping from error classes to kubelet's
// checkpoint status codes: 404 for not found, 500 for everything else.
func TestStatusCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{fmt.Errorf("x: %w", errdefs.ErrNotFound), http.StatusNotFound},
		{checkpoint.ErrDisabled, http.StatusNotFound},
		{fmt.Errorf("checkpoint x: %w", checkpoint.ErrBusy), http.StatusInternalServerError},
		{checkpoint.ErrShuttingDown, http.StatusInternalServerError},
		{errdefs.New(errdefs.ErrNotSupported, "no criu"), http.StatusInternalServerError},
		{errors.New("criu failed"), http.StatusInternalServerError},
	} {
		if got := statusCode(tc.err); got != tc.want {
			t.Errorf("statusCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
