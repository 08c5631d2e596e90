package conductor

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/egress"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/imagecache"
)

// A download into the image cache that fails says only that it failed
// in last_error and history's message, or that --image-source-networks
// refused its kind of address; how the address failed is history's
// detail (system scope). So does a download of the agent's media. A
// checksum mismatch names the field.
func TestDownloadFailureHidesTheNetwork(t *testing.T) {
	err := fmt.Errorf("step: %w", &downloadError{errors.New("downloading image http://10.1.2.3:8080/x: dial tcp 10.1.2.3:8080: connect: connection refused")})
	var ev history.Event
	ev.Failed("Step deploy.write_image failed: ", err)
	if strings.Contains(ev.Message, "10.1.2.3") || strings.Contains(ev.Message, "refused") || !strings.Contains(ev.Message, "could not download") {
		t.Errorf("message %q", ev.Message)
	}
	if !strings.Contains(ev.Detail, "connection refused") {
		t.Errorf("detail %q lost the cause", ev.Detail)
	}
	// A refusal by --image-source-networks, decided before connecting,
	// says the kind of address, not the address.
	refused := &egress.RefusedError{Addr: netip.MustParseAddr("10.1.2.3"), Why: "in the networks of --bmc-networks"}
	ev.Failed("Step deploy.write_image failed: ", &downloadError{fmt.Errorf("downloading image: %w", refused)})
	if strings.Contains(ev.Message, "10.1.2.3") || !strings.Contains(ev.Message, "--bmc-networks") || !strings.Contains(ev.Message, egress.Flag) || !strings.Contains(ev.Detail, "10.1.2.3") {
		t.Errorf("refusal: message %q, detail %q", ev.Message, ev.Detail)
	}
	// The agent's media built into an ISO: the same for driver_info's
	// deploy_kernel, whose server's status stays in the detail.
	ev.Failed("Step deploy.deploy failed: ", fmt.Errorf("building the agent's ISO: %w", &mediaError{"driver_info.deploy_kernel", errors.New("downloading driver_info.deploy_kernel http://10.1.2.3/k: 401 Unauthorized")}))
	if strings.Contains(ev.Message, "10.1.2.3") || strings.Contains(ev.Message, "401") || !strings.Contains(ev.Message, "driver_info.deploy_kernel") || !strings.Contains(ev.Detail, "401") {
		t.Errorf("media: message %q, detail %q", ev.Message, ev.Detail)
	}
	mm := &imagecache.MismatchError{Source: "http://img/x", Sum: imagecache.Checksum{Field: "instance_info.image_os_hash_value", Algo: "sha256", Value: "ab"}, Computed: "cd"}
	if s := bmc.Summary(mm); !strings.Contains(s, "instance_info.image_os_hash_value") {
		t.Errorf("mismatch summary %q", s)
	}
}
