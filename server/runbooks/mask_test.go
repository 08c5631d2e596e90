package runbooks

import "testing"

// No step in today's catalogue takes a secret, so the API cannot store
// one yet; the masking that will guard them is tested on its own.
func TestMaskSteps(t *testing.T) {
	in := []Step{{Interface: "bios", Step: "apply", Args: map[string]any{"admin_password": "x", "api_token": "y", "ssh_key": "z", "level": 3}}}
	out := MaskSteps(in)
	for _, k := range []string{"admin_password", "api_token", "ssh_key"} {
		if out[0].Args[k] != Masked {
			t.Errorf("%s not masked: %v", k, out[0].Args[k])
		}
	}
	if out[0].Args["level"] != 3 || in[0].Args["admin_password"] != "x" {
		t.Error("masking changed what it should not")
	}
}
