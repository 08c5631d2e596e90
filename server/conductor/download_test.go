package conductor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/imagecache"
)

// A download into the image cache that fails says only that it failed
// in last_error and history's message; how the address failed is
// history's detail (system scope). A checksum mismatch names the field.
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
	mm := &imagecache.MismatchError{Source: "http://img/x", Sum: imagecache.Checksum{Field: "instance_info.image_os_hash_value", Algo: "sha256", Value: "ab"}, Computed: "cd"}
	if s := bmc.Summary(mm); !strings.Contains(s, "instance_info.image_os_hash_value") {
		t.Errorf("mismatch summary %q", s)
	}
}
