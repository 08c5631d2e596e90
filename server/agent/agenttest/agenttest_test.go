package agenttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/reference"
)

// TestStartWaitsForASlowAgent: start.sh gives the agent 10 s to reach
// lookup, which a loaded machine can exceed; Start then waits on for the
// same sign. A copy of the reference whose agent starts 12 s late
// proves it: start.sh gives up, Start does not, the agent looks up.
func TestStartWaitsForASlowAgent(t *testing.T) {
	Need(t)
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-a", reference.Path("ipa")+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copying the agent reference: %v\n%s", err, out)
	}
	sh := filepath.Join(dir, "start.sh")
	b, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	late := strings.Replace(string(b), "exec unshare --pid", "sleep 12; exec unshare --pid", 1)
	if late == string(b) {
		t.Fatal("start.sh no longer execs the agent as this test expects")
	}
	if err := os.WriteFile(sh, []byte(late), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ANVIL_IPA_DIR", dir)
	began := time.Now()
	m := Start(t, LoopDisk(t), "52:54:48:0c:0b:01", "http://127.0.0.1:9")
	if took := time.Since(began); took < 12*time.Second {
		t.Errorf("Start returned after %s, before the late agent could start", took)
	}
	if !m.lookingUp() {
		t.Errorf("the agent's log shows no lookup:\n%s", m.LogTail(4000))
	}
}
