package bmc

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"
)

// SOL is a BMC's serial console (IPMI serial-over-LAN), as Ironic's
// ipmitool console interfaces drive it.
type SOL interface {
	// ActivateSOL runs one console session: what in carries goes to the
	// machine's serial port and what the port sends goes to out, until
	// ctx ends, in ends or the BMC closes the session.
	ActivateSOL(ctx context.Context, in io.Reader, out io.Writer) error
	// DeactivateSOL ends whatever SOL session the BMC has open, as
	// Ironic does before each activation: a session left by a client
	// that went away would otherwise refuse the next one.
	DeactivateSOL(ctx context.Context) error
}

// ActivateSOL runs "ipmitool sol activate" with in as its input and out
// as its output. ipmitool's own complaints (it has no terminal to set
// up) are kept from out and only reported when the session fails.
func (c *ipmiClient) ActivateSOL(ctx context.Context, in io.Reader, out io.Writer) error {
	cmd, err := c.command(ctx, "sol", "activate")
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, &stderr
	// When ctx ends ipmitool is killed; the copy from in may still be
	// blocked on a client that says nothing, so Wait gives up on it.
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if err == nil || ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return c.explain(strings.TrimSpace(stderr.String()), err)
}

// DeactivateSOL runs "ipmitool sol deactivate"; a BMC with no session
// open answers an error, which is what was wanted.
func (c *ipmiClient) DeactivateSOL(ctx context.Context) error {
	_, err := c.run(ctx, "ending the serial console session", "sol", "deactivate")
	var e *Error
	if errors.As(err, &e) && e.Kind == ErrBMC {
		return nil
	}
	return err
}
