package bmc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Power changes a node's power and returns only once the BMC reports the
// result, or fails when it does not within timeout: a BMC accepting a
// command says nothing about whether the machine followed. It returns
// the final power state. Reboot restarts a running machine with the
// BMC's restart (or off, wait, on where there is none) and powers on a
// machine that is off.
func Power(ctx context.Context, cl Client, target string, timeout time.Duration, poll time.Duration) (string, error) {
	if poll <= 0 {
		poll = time.Second
	}
	deadline := time.Now().Add(timeout)
	switch target {
	case PowerOn, PowerOff, SoftPowerOff:
		want := PowerOn
		if target != PowerOn {
			want = PowerOff
		}
		if err := cl.SetPower(ctx, target); err != nil {
			return "", err
		}
		return want, waitPower(ctx, cl, target, timeout, want, deadline, poll)
	case Rebooting, SoftRebooting:
		soft := target == SoftRebooting
		st, err := cl.PowerState(ctx)
		if err != nil {
			return "", err
		}
		if st == PowerOff {
			if err := cl.SetPower(ctx, PowerOn); err != nil {
				return "", err
			}
			return PowerOn, waitPower(ctx, cl, target, timeout, PowerOn, deadline, poll)
		}
		err = cl.Restart(ctx, soft)
		if errors.Is(err, ErrUnsupported) {
			off := PowerOff
			if soft {
				off = SoftPowerOff
			}
			if err := cl.SetPower(ctx, off); err != nil {
				return "", err
			}
			if err := waitPower(ctx, cl, target, timeout, PowerOff, deadline, poll); err != nil {
				return "", err
			}
			err = cl.SetPower(ctx, PowerOn)
		}
		if err != nil {
			return "", err
		}
		return PowerOn, waitPower(ctx, cl, target, timeout, PowerOn, deadline, poll)
	}
	return "", &Error{Op: "setting power " + target, Kind: ErrUnsupported}
}

func waitPower(ctx context.Context, cl Client, target string, timeout time.Duration, want string, deadline time.Time, poll time.Duration) error {
	var last string
	for {
		st, err := cl.PowerState(ctx)
		if err == nil && st == want {
			return nil
		}
		if err != nil && !Retryable(err) {
			return err
		}
		last = st
		if time.Now().Add(poll).After(deadline) {
			seen := "the BMC still reports " + last
			if last == "" {
				seen = "the BMC did not answer"
			}
			return &Error{Op: target, Kind: ErrPowerTimeout,
				Reason: fmt.Sprintf("waited %s for %s; %s", timeout, want, seen)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// AwaitBMC waits, after a BMC reset, until the BMC answers again: a
// restarting BMC goes away for a while (a minute or more on real ones)
// and the next step would find it gone. It gives the BMC one poll to
// begin its restart, then reads the power state until a read succeeds or
// timeout passes.
func AwaitBMC(ctx context.Context, cl Client, timeout, poll time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		_, err := cl.PowerState(ctx)
		if err == nil {
			return nil
		}
		if time.Now().Add(poll).After(deadline) {
			return fmt.Errorf("the BMC did not answer within %s of its reset: %w", timeout, err)
		}
	}
}
