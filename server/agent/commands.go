package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Command statuses as the agent reports them.
const (
	Running   = "RUNNING"
	Succeeded = "SUCCEEDED"
	Failed    = "FAILED"
)

// Command is one entry of the agent's command list, or the answer to a
// command just sent.
type Command struct {
	ID     string          `json:"id"`
	Name   string          `json:"command_name"` // without the extension: "prepare_image"
	Status string          `json:"command_status"`
	Error  json.RawMessage `json:"command_error"`
	Result json.RawMessage `json:"command_result"`
}

// Done tells whether the command has ended, either way.
func (c *Command) Done() bool { return c.Status != Running }

// Step is a clean, deploy or service step as the agent lists and runs
// them.
type Step struct {
	Step            string         `json:"step"`
	Interface       string         `json:"interface"`
	Priority        int            `json:"priority"`
	RebootRequested bool           `json:"reboot_requested,omitempty"`
	Abortable       bool           `json:"abortable,omitempty"`
	Args            map[string]any `json:"args,omitempty"`
	ArgsInfo        map[string]any `json:"argsinfo,omitempty"`
}

// Steps is the answer of get_{clean,deploy,service}_steps: the steps per
// hardware manager, and the managers' versions, which the conductor
// stores and sends back with each step so the agent can refuse to run
// steps after its hardware changed.
type Steps struct {
	ByManager map[string][]Step
	Versions  map[string]any
}

// All is every step, whichever manager offers it.
func (s *Steps) All() []Step {
	var out []Step
	for _, l := range s.ByManager {
		out = append(out, l...)
	}
	return out
}

// Find returns the step of that interface and name, if any manager has it.
func (s *Steps) Find(iface, name string) (Step, bool) {
	for _, st := range s.All() {
		if st.Interface == iface && st.Step == name {
			return st, true
		}
	}
	return Step{}, false
}

// ImageInfo is what Ironic sends the agent to write an image (its
// image_info): the agent downloads one of URLs itself and checks the
// hash. Root device hints do not travel here: the agent reads them from
// the node it was last given (with lookup or a step), from
// instance_info.root_device or properties.root_device.
type ImageInfo struct {
	ID              string   `json:"id"`
	URLs            []string `json:"urls"`
	DiskFormat      string   `json:"disk_format,omitempty"`      // raw, qcow2
	ContainerFormat string   `json:"container_format,omitempty"` // bare
	ImageType       string   `json:"image_type,omitempty"`       // whole-disk (default) or partition
	OSHashAlgo      string   `json:"os_hash_algo,omitempty"`
	OSHashValue     string   `json:"os_hash_value,omitempty"`
	// Checksum is the legacy MD5 field, used only without OSHash*.
	Checksum        string `json:"checksum,omitempty"`
	StreamRawImages bool   `json:"stream_raw_images"`
	NodeUUID        string `json:"node_uuid,omitempty"`
	DeployBootMode  string `json:"deploy_boot_mode,omitempty"`
	BootOption      string `json:"boot_option,omitempty"`
}

// Command sends name ("ext.command") with params. With wait the agent
// answers when the command has ended; without, at once with RUNNING and
// the caller follows it with LastCommand or Wait. A command that ended
// FAILED is a *CommandError.
func (c *Client) Command(ctx context.Context, name string, params map[string]any, wait bool) (*Command, error) {
	if params == nil {
		params = map[string]any{}
	}
	var cmd Command
	body := map[string]any{"name": name, "params": params}
	if err := c.do(ctx, name, http.MethodPost, c.commandsURL(&wait), body, &cmd); err != nil {
		return nil, err
	}
	if cmd.Status == Failed {
		return &cmd, c.commandError(name, &cmd)
	}
	return &cmd, nil
}

// commandError reads command_error, which the agent sends as its error
// object {type, code, message, details} or, for some, a bare string.
func (c *Client) commandError(name string, cmd *Command) error {
	e := &CommandError{Node: c.node, Command: name}
	var obj struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Details string `json:"details"`
	}
	var text string
	switch {
	case len(cmd.Error) == 0 || string(cmd.Error) == "null":
		e.Message = "the agent reported no error"
	case json.Unmarshal(cmd.Error, &obj) == nil:
		e.Type = obj.Type
		e.Message = obj.Message
		if obj.Details != "" {
			e.Message += ": " + obj.Details
		}
	case json.Unmarshal(cmd.Error, &text) == nil:
		e.Message = text
	default:
		e.Message = string(cmd.Error)
	}
	e.Type, e.Message = c.clean(e.Type), c.clean(e.Message)
	return e
}

// GetCommandsStatus is the agent's command list, oldest first: one cheap
// read, which the conductor makes on each heartbeat.
func (c *Client) GetCommandsStatus(ctx context.Context) ([]Command, error) {
	var out struct {
		Commands []Command `json:"commands"`
	}
	if err := c.do(ctx, "reading the command status", http.MethodGet, c.commandsURL(nil), nil, &out); err != nil {
		return nil, err
	}
	return out.Commands, nil
}

// LastCommand is the latest run of name ("ext.command" or "command"),
// as Ironic's agent_base reads it: RUNNING is returned as is (check
// Done), SUCCEEDED with its result, FAILED as a *CommandError; a command
// the agent does not list wraps ErrNoCommand.
func (c *Client) LastCommand(ctx context.Context, name string) (*Command, error) {
	cmds, err := c.GetCommandsStatus(ctx)
	if err != nil {
		return nil, err
	}
	short := name
	if _, after, ok := strings.Cut(name, "."); ok {
		short = after
	}
	for i := len(cmds) - 1; i >= 0; i-- {
		if cmds[i].Name != short {
			continue
		}
		if cmds[i].Status == Failed {
			return &cmds[i], c.commandError(name, &cmds[i])
		}
		return &cmds[i], nil
	}
	return nil, fmt.Errorf("node %s: agent command %s: %w", c.node, name, ErrNoCommand)
}

// Wait polls LastCommand every interval until name ends or ctx is done.
// An agent that does not answer for a moment (busy writing an image) is
// polled again; a refusal or a failed command ends the wait.
func (c *Client) Wait(ctx context.Context, name string, interval time.Duration) (*Command, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		cmd, err := c.LastCommand(ctx, name)
		var ce *ConnectionError
		switch {
		case err == nil && cmd.Done():
			return cmd, nil
		case err != nil && !errors.As(err, &ce):
			return cmd, err
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return nil, fmt.Errorf("node %s: agent command %s did not end before the deadline: %w", c.node, name, err)
			}
			return cmd, fmt.Errorf("node %s: agent command %s did not end before the deadline: %w", c.node, name, ctx.Err())
		case <-t.C:
		}
	}
}

// stepParams is what Ironic sends with the step commands: the node and
// its ports as the API shows them to the conductor (secrets masked).
func stepParams(node map[string]any, ports []map[string]any) map[string]any {
	if ports == nil {
		ports = []map[string]any{}
	}
	return map[string]any{"node": node, "ports": ports}
}

func (c *Client) getSteps(ctx context.Context, kind string, node map[string]any, ports []map[string]any) (*Steps, error) {
	name := kind + ".get_" + kind + "_steps"
	cmd, err := c.Command(ctx, name, stepParams(node, ports), true)
	if err != nil {
		return nil, err
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(cmd.Result, &res); err != nil {
		return nil, fmt.Errorf("node %s: agent command %s: the result is not an object", c.node, name)
	}
	out := &Steps{}
	if err := json.Unmarshal(res[kind+"_steps"], &out.ByManager); err != nil {
		return nil, fmt.Errorf("node %s: agent command %s: %s_steps is not a list per hardware manager", c.node, name, kind)
	}
	if v := res["hardware_manager_version"]; len(v) > 0 {
		_ = json.Unmarshal(v, &out.Versions) // informative; sent back as given
	}
	return out, nil
}

func (c *Client) executeStep(ctx context.Context, kind string, step Step, node map[string]any, ports []map[string]any, versions map[string]any) (*Command, error) {
	p := stepParams(node, ports)
	p["step"] = step
	p[kind+"_version"] = versions
	return c.Command(ctx, kind+".execute_"+kind+"_step", p, false)
}

// GetCleanSteps lists the agent's clean steps (clean.get_clean_steps).
func (c *Client) GetCleanSteps(ctx context.Context, node map[string]any, ports []map[string]any) (*Steps, error) {
	return c.getSteps(ctx, "clean", node, ports)
}

// ExecuteCleanStep starts a clean step; follow it with Wait or
// LastCommand("clean.execute_clean_step").
func (c *Client) ExecuteCleanStep(ctx context.Context, step Step, node map[string]any, ports []map[string]any, versions map[string]any) (*Command, error) {
	return c.executeStep(ctx, "clean", step, node, ports, versions)
}

// GetDeploySteps lists the agent's deploy steps.
func (c *Client) GetDeploySteps(ctx context.Context, node map[string]any, ports []map[string]any) (*Steps, error) {
	return c.getSteps(ctx, "deploy", node, ports)
}

// ExecuteDeployStep starts a deploy step (e.g. deploy.write_image with
// args image_info and configdrive, as Ironic's direct deploy does).
func (c *Client) ExecuteDeployStep(ctx context.Context, step Step, node map[string]any, ports []map[string]any, versions map[string]any) (*Command, error) {
	return c.executeStep(ctx, "deploy", step, node, ports, versions)
}

// GetServiceSteps lists the agent's service steps (agents from 2023.2).
func (c *Client) GetServiceSteps(ctx context.Context, node map[string]any, ports []map[string]any) (*Steps, error) {
	return c.getSteps(ctx, "service", node, ports)
}

// ExecuteServiceStep starts a service step.
func (c *Client) ExecuteServiceStep(ctx context.Context, step Step, node map[string]any, ports []map[string]any, versions map[string]any) (*Command, error) {
	return c.executeStep(ctx, "service", step, node, ports, versions)
}

// PrepareImage starts writing an image (standby.prepare_image).
// configdrive, when not nil, is the gzipped base64 string or URL the
// agent writes to a config-2 partition.
func (c *Client) PrepareImage(ctx context.Context, info ImageInfo, configdrive any) (*Command, error) {
	p := map[string]any{"image_info": info}
	if configdrive != nil {
		p["configdrive"] = configdrive
	}
	return c.Command(ctx, "standby.prepare_image", p, false)
}

// Bootloader is what image.install_bootloader needs to know of the
// written image.
type Bootloader struct {
	RootUUID          string `json:"root_uuid"`
	EFISystemPartUUID string `json:"efi_system_part_uuid,omitempty"`
	PrepBootPartUUID  string `json:"prep_boot_part_uuid,omitempty"`
	TargetBootMode    string `json:"target_boot_mode"` // uefi or bios
}

// InstallBootloader starts image.install_bootloader; Ironic polls it.
func (c *Client) InstallBootloader(ctx context.Context, b Bootloader) (*Command, error) {
	p := map[string]any{"root_uuid": b.RootUUID, "target_boot_mode": b.TargetBootMode,
		"efi_system_part_uuid": nilIfEmpty(b.EFISystemPartUUID), "prep_boot_part_uuid": nilIfEmpty(b.PrepBootPartUUID)}
	return c.Command(ctx, "image.install_bootloader", p, false)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// PowerOff asks the ramdisk to power the machine off (standby.power_off);
// the agent goes away, so the caller confirms through the BMC.
func (c *Client) PowerOff(ctx context.Context) (*Command, error) {
	return c.Command(ctx, "standby.power_off", nil, false)
}

// CollectSystemLogs returns the agent's logs as the gzipped tarball it
// builds (log.collect_system_logs), decoded from base64.
func (c *Client) CollectSystemLogs(ctx context.Context) ([]byte, error) {
	const name = "log.collect_system_logs"
	cmd, err := c.Command(ctx, name, nil, true)
	if err != nil {
		return nil, err
	}
	var res struct {
		Logs string `json:"system_logs"`
	}
	if err := json.Unmarshal(cmd.Result, &res); err != nil || res.Logs == "" {
		return nil, fmt.Errorf("node %s: agent command %s returned no system_logs", c.node, name)
	}
	tgz, err := base64.StdEncoding.DecodeString(res.Logs)
	if err != nil {
		return nil, fmt.Errorf("node %s: agent command %s: system_logs is not base64", c.node, name)
	}
	return tgz, nil
}

// FinalizeRescue hands the agent the hashed rescue password and lets it
// open the rescue environment (rescue.finalize_rescue).
func (c *Client) FinalizeRescue(ctx context.Context, hashedPassword string) (*Command, error) {
	p := map[string]any{"rescue_password": hashedPassword, "hashed": true}
	return c.Command(ctx, "rescue.finalize_rescue", p, false)
}
