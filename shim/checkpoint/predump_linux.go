package checkpoint

import (
	"context"
	"errors"

	"github.com/nodeshim/nodeshim/criu"
)

// preDumpRounds returns how many of the configured pre-dump rounds a
// container checkpoint runs with bin: all of them where the kernel
// tracks dirty memory, else none and why (criu.CheckPreDump's message).
// The answer is asked once per criu binary and kept; an ended ctx is not
// kept, and runs none.
func (s *Service) preDumpRounds(ctx context.Context, bin criu.Binary, rounds int) (int, string) {
	if rounds <= 0 {
		return 0, ""
	}
	s.mu.Lock()
	err, known := s.preDumpOK[bin.Path]
	s.mu.Unlock()
	if !known {
		err = criu.CheckPreDump(ctx, bin)
		if ctx.Err() != nil && !errors.Is(err, criu.ErrPreDumpUnsupported) {
			return 0, "pre-dump not checked: " + ctx.Err().Error()
		}
		if err == nil || errors.Is(err, criu.ErrPreDumpUnsupported) {
			// A definitive answer; criu that could not run is asked again.
			s.mu.Lock()
			if s.preDumpOK == nil {
				s.preDumpOK = map[string]error{}
			}
			s.preDumpOK[bin.Path] = err
			s.mu.Unlock()
		}
	}
	if err != nil {
		return 0, err.Error()
	}
	return rounds, ""
}
