package native

import (
	"errors"

	"github.com/agentkernel/agentkernel/internal/config"
)

// degrade is Ladder for this backend's runs: nil after one warning where
// allowed, the refusal otherwise.
func (r *runState) degrade(protection string, cause error) error {
	var allowed []string
	if r.b.opts.AllowDegraded != nil {
		allowed = r.b.opts.AllowDegraded()
	}
	w, err := Ladder(allowed, protection, cause)
	if err != nil {
		return err
	}
	r.warn(w)
	return nil
}

// errNoLandlock is the cause of a missing Landlock fence.
var errNoLandlock = errors.New("this kernel has no Landlock (landlock_create_ruleset is not available)")

// checkLandlock walks the ladder for a spec that asks for Landlock on a
// kernel without it.
func (r *runState) checkLandlock() error {
	if !r.spec.Security.Landlock || LandlockABI() >= 1 {
		return nil
	}
	return r.degrade(config.DegradeLandlock, errNoLandlock)
}
