package bmc

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/bmc-toolbox/bmclib/v2/constants"
	"github.com/bmc-toolbox/bmclib/v2/providers"
	"github.com/bmc-toolbox/common"
)

// FirmwarePusher is a BMC that cannot pull a firmware image from a URL:
// Anvil pushes the image's bytes to it, through the vendor's own upload
// and install flow, and does around it what the vendor asks.
type FirmwarePusher interface {
	Firmware
	// FirmwarePlan says what the vendor needs around component's update.
	FirmwarePlan(ctx context.Context, component string) (FirmwarePlan, error)
	// PushFirmware uploads image and starts installing it on component,
	// returning the task FirmwareTask follows.
	PushFirmware(ctx context.Context, component string, image *os.File) (string, error)
}

// FirmwarePlan is what a vendor's firmware flow needs beyond upload,
// install and task status, as bmclib's install steps name it.
type FirmwarePlan struct {
	// PowerOffHost: the host must be off before the upload.
	PowerOffHost bool
	// ResetBMCAfter: the BMC must be reset once the install completes.
	ResetBMCAfter bool
	// ResetBMCOnFailure: a failed install leaves the BMC in flash mode
	// until it is reset.
	ResetBMCOnFailure bool
}

// bmclibFirmwareComponents are the components each vendor provider's
// firmware flow takes, as bmclib v2.3.5's FirmwareInstallSteps accept
// them (ASRockRack's refuses the BIOS, though it can upload one).
var bmclibFirmwareComponents = map[string][]string{
	"dell":       {"bios", "bmc"},
	"supermicro": {"bios", "bmc"},
	"openbmc":    {"bios", "bmc"},
	"asrockrack": {"bmc"},
}

// BmclibFirmwareComponents lists the components provider updates; none
// for a provider without a vendor push flow.
func BmclibFirmwareComponents(provider string) []string {
	if !bmclibPushes(provider) {
		return nil
	}
	return bmclibFirmwareComponents[provider]
}

// bmclibPushes reports whether bmclib says provider has a firmware push
// flow: its install steps, task status, and either one upload that
// starts the install or an upload and a separate install.
func bmclibPushes(provider string) bool {
	p, ok := bmclibProviders[provider]
	if !ok {
		return false
	}
	f := p.features
	base := slices.Contains(f, providers.FeatureFirmwareInstallSteps) && slices.Contains(f, providers.FeatureFirmwareTaskStatus)
	oneCall := slices.Contains(f, providers.FeatureFirmwareUploadInitiateInstall)
	twoCalls := slices.Contains(f, providers.FeatureFirmwareUpload) && slices.Contains(f, providers.FeatureFirmwareInstallUploaded)
	return base && (oneCall || twoCalls)
}

// bmclibUploadTimeout bounds one image upload: images are up to a few
// hundred MiB over a BMC's slow link, and bmclib's Dell and OpenBMC
// providers refuse to start with less than ten minutes left.
const bmclibUploadTimeout = 30 * time.Minute

// bmclibFwTask is one update in progress: the bmclib task followed now
// and the phase it is in (upload-status, then install-status).
type bmclibFwTask struct {
	component string
	phase     constants.FirmwareInstallStep
	id        string
}

func slug(component string) string {
	switch component {
	case "bios":
		return common.SlugBIOS
	case "bmc":
		return common.SlugBMC
	}
	return strings.ToUpper(component)
}

// installSteps asks the provider for component's steps, refusing any
// Anvil does not know how to carry out rather than skipping it.
func (c *bmclibClient) installSteps(ctx context.Context, component string) ([]constants.FirmwareInstallStep, error) {
	op := "updating " + component + " firmware"
	if !slices.Contains(BmclibFirmwareComponents(c.provider), component) {
		return nil, &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "the " + c.provider + " provider does not update " + component + " firmware"}
	}
	if s, ok := c.fwSteps[component]; ok {
		return s, nil
	}
	var steps []constants.FirmwareInstallStep
	err := c.do(ctx, op, func(ctx context.Context) (err error) {
		steps, err = c.cl.FirmwareInstallSteps(ctx, slug(component))
		return err
	})
	if err != nil {
		return nil, err
	}
	known := []constants.FirmwareInstallStep{constants.FirmwareInstallStepUploadInitiateInstall, constants.FirmwareInstallStepInstallStatus,
		constants.FirmwareInstallStepUpload, constants.FirmwareInstallStepUploadStatus, constants.FirmwareInstallStepInstallUploaded,
		constants.FirmwareInstallStepPowerOffHost, constants.FirmwareInstallStepResetBMCPostInstall, constants.FirmwareInstallStepResetBMCOnInstallFailure}
	for _, s := range steps {
		if !slices.Contains(known, s) {
			return nil, &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: fmt.Sprintf("bmclib's %s provider asks for step %q, which Anvil does not carry out", c.provider, s)}
		}
	}
	if c.fwSteps == nil {
		c.fwSteps = map[string][]constants.FirmwareInstallStep{}
	}
	c.fwSteps[component] = steps
	return steps, nil
}

func (c *bmclibClient) FirmwarePlan(ctx context.Context, component string) (FirmwarePlan, error) {
	steps, err := c.installSteps(ctx, component)
	if err != nil {
		return FirmwarePlan{}, err
	}
	return FirmwarePlan{
		PowerOffHost:      slices.Contains(steps, constants.FirmwareInstallStepPowerOffHost),
		ResetBMCAfter:     slices.Contains(steps, constants.FirmwareInstallStepResetBMCPostInstall),
		ResetBMCOnFailure: slices.Contains(steps, constants.FirmwareInstallStepResetBMCOnInstallFailure),
	}, nil
}

// long runs one upload through the provider: once, however it fails (a
// retried upload could flash twice), with the upload's own time limit.
func (c *bmclibClient) long(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, bmclibUploadTimeout)
	defer cancel()
	if err := c.explain(op, c.try(ctx, fn)); err != nil {
		return classify(op, c.where, err, c.secrets)
	}
	return nil
}

// PushFirmware follows the provider's steps in their order: one call
// that uploads and starts the install, or an upload, then (once the BMC
// has verified it, where the provider has an upload status) the install.
func (c *bmclibClient) PushFirmware(ctx context.Context, component string, image *os.File) (string, error) {
	op := "updating " + component + " firmware"
	steps, err := c.installSteps(ctx, component)
	if err != nil {
		return "", err
	}
	t := &bmclibFwTask{component: component, phase: constants.FirmwareInstallStepInstallStatus}
	switch {
	case slices.Contains(steps, constants.FirmwareInstallStepUploadInitiateInstall):
		err = c.long(ctx, op, func(ctx context.Context) (err error) {
			t.id, err = c.cl.FirmwareInstallUploadAndInitiate(ctx, slug(component), image)
			return err
		})
	case slices.Contains(steps, constants.FirmwareInstallStepUpload):
		err = c.long(ctx, op, func(ctx context.Context) (err error) {
			t.id, err = c.cl.FirmwareUpload(ctx, slug(component), image)
			return err
		})
		if err == nil && slices.Contains(steps, constants.FirmwareInstallStepUploadStatus) {
			t.phase = constants.FirmwareInstallStepUploadStatus
		} else if err == nil {
			err = c.installUploaded(ctx, t)
		}
	default:
		return "", &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "bmclib's " + c.provider + " provider names no upload step"}
	}
	if err != nil {
		return "", err
	}
	if c.fwTasks == nil {
		c.fwTasks = map[string]*bmclibFwTask{}
	}
	handle := fmt.Sprintf("%s-%d", component, len(c.fwTasks)+1)
	c.fwTasks[handle] = t
	return handle, nil
}

// installUploaded starts installing what the upload left on the BMC.
func (c *bmclibClient) installUploaded(ctx context.Context, t *bmclibFwTask) error {
	return c.do(ctx, "updating "+t.component+" firmware", func(ctx context.Context) (err error) {
		id, err := c.cl.FirmwareInstallUploaded(ctx, slug(t.component), t.id)
		if err == nil {
			t.id, t.phase = id, constants.FirmwareInstallStepInstallStatus
		}
		return err
	})
}

// StartFirmwareUpdate: the vendor BMCs bmclib drives cannot pull from a
// URL; the conductor pushes through PushFirmware instead.
func (c *bmclibClient) StartFirmwareUpdate(context.Context, string, string) (string, error) {
	return "", errUnsupported("updating firmware from a URL", c.where)
}

// FirmwareTask reads the task's bmclib state as a Redfish TaskState; the
// status text is the BMC's own words. A verified upload starts its
// install here, and the task goes on as the install's.
func (c *bmclibClient) FirmwareTask(ctx context.Context, handle string) (Task, error) {
	t, ok := c.fwTasks[handle]
	if !ok {
		return Task{}, &Error{Op: "following the firmware update", Where: c.where, Kind: ErrBMC, Reason: "no such update in progress"}
	}
	var state constants.TaskState
	var status string
	err := c.do(ctx, "following the "+t.component+" firmware update", func(ctx context.Context) (err error) {
		state, status, err = c.cl.FirmwareTaskStatus(ctx, t.phase, slug(t.component), t.id, "")
		return err
	})
	if err != nil {
		return Task{}, err
	}
	out := Task{Message: truncate(mask(status, c.secrets), 300)}
	switch state {
	case constants.Complete:
		out.State = "Completed"
		if t.phase == constants.FirmwareInstallStepUploadStatus {
			if err := c.installUploaded(ctx, t); err != nil {
				return Task{}, err
			}
			out.State = "Running"
		}
	case constants.Failed:
		out.State = "Exception"
	case constants.Queued:
		out.State = "Pending"
	case constants.Initializing:
		out.State = "Starting"
	case constants.PowerCycleHost:
		out.State, out.PowerCycle = "Pending", true
	default:
		// running, and bmclib's unknown (a BMC between answers): the
		// step's overall time limit bounds the wait.
		out.State = "Running"
	}
	return out, nil
}

// FirmwareVersions reads the BIOS and BMC versions from bmclib's
// inventory; a provider without one, or that leaves a version out,
// reports none for it.
func (c *bmclibClient) FirmwareVersions(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if !slices.Contains(bmclibProviders[c.provider].features, providers.FeatureInventoryRead) {
		return out, nil
	}
	err := c.do(ctx, "reading firmware versions", func(ctx context.Context) error {
		d, err := c.cl.Inventory(ctx)
		if err != nil {
			return err
		}
		if d.BIOS != nil && d.BIOS.Firmware != nil {
			out["bios"] = d.BIOS.Firmware.Installed
		}
		if d.BMC != nil && d.BMC.Firmware != nil {
			out["bmc"] = d.BMC.Firmware.Installed
		}
		return nil
	})
	for k, v := range out {
		if v == "" {
			delete(out, k)
		}
	}
	return out, err
}
