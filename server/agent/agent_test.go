package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/agent/agenttest"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// heartbeat is what the agent announced.
type heartbeat struct {
	CallbackURL   string `json:"callback_url"`
	AgentToken    string `json:"agent_token"`
	AgentVerifyCA string `json:"agent_verify_ca"`
}

// standIn answers the agent's lookup and heartbeat as Ironic 1.68 would:
// the agent in this branch has no standalone mode (its entry point always
// looks up), so a test plays the API to hand it its token and learn its
// callback URL and certificate.
func standIn(t *testing.T, node, token, disk string) (*httptest.Server, <-chan heartbeat) {
	beats := make(chan heartbeat, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		// ≥ 1.68: the agent turns on TLS and sends agent_verify_ca.
		_ = json.NewEncoder(w).Encode(map[string]any{"default_version": map[string]any{"version": "1.68"}})
	})
	nodeDoc := map[string]any{"uuid": node, "properties": map[string]any{"root_device": map[string]any{"name": disk}},
		"instance_info": map[string]any{}, "driver_internal_info": map[string]any{}}
	mux.HandleFunc("GET /v1/lookup", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"node": nodeDoc, "config": map[string]any{
			"heartbeat_timeout": 300, "agent_token": token, "agent_token_required": true}})
	})
	mux.HandleFunc("POST /v1/heartbeat/{node}", func(w http.ResponseWriter, r *http.Request) {
		var hb heartbeat
		if r.PathValue("node") != node || json.NewDecoder(r.Body).Decode(&hb) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		select {
		case beats <- hb:
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, beats
}

// startAgent boots the real agent on disk and returns a client for it,
// built from its first heartbeat, as the conductor will.
func startAgent(t *testing.T, disk string) (*Client, heartbeat) {
	node, token := "8f0a4a5e-5a43-4c1e-9f5e-2d1c0a7b9e01", randomHex(24) // 48 chars: the agent wants ≥ 32
	api, beats := standIn(t, node, token, disk)
	m := agenttest.Start(t, disk, "52:54:48:0c:aa:01", api.URL,
		// oslo.config reads OS_<group>__<option>: a 404 image fails after
		// one retry instead of the agent's ten, 10 s apart.
		"OS_DEFAULT__IMAGE_DOWNLOAD_CONNECTION_RETRIES=1", "OS_DEFAULT__IMAGE_DOWNLOAD_CONNECTION_RETRY_INTERVAL=1")
	var hb heartbeat
	select {
	case hb = <-beats:
	case <-time.After(5 * time.Minute):
		t.Fatalf("the agent never heartbeated; ipa.log:\n%s", m.LogTail(4000))
	}
	if hb.AgentToken != token {
		t.Fatalf("heartbeat carries another token than lookup gave")
	}
	c, err := New(node, hb.CallbackURL, token, []byte(hb.AgentVerifyCA), Options{Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c, hb
}

func readDisk(t *testing.T, dev string, off int64, n int) []byte {
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAgentClient drives one real agent through the commands the
// conductor uses; the subtests share it (one agent at a time).
func TestAgentClient(t *testing.T) {
	agenttest.Need(t)
	disk := agenttest.LoopDisk(t)
	c, hb := startAgent(t, disk)
	node := map[string]any{"uuid": c.Node(), "properties": map[string]any{"root_device": map[string]any{"name": disk}},
		"instance_info": map[string]any{}, "driver_internal_info": map[string]any{}}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	t.Run("TLSPinned", func(t *testing.T) {
		if !strings.HasPrefix(hb.CallbackURL, "https://") || hb.AgentVerifyCA == "" {
			t.Fatalf("the agent did not turn on TLS: callback %q, agent_verify_ca %d bytes", hb.CallbackURL, len(hb.AgentVerifyCA))
		}
		// Another certificate than the agent's: the client must refuse.
		other := httptest.NewTLSServer(http.NotFoundHandler())
		defer other.Close()
		otherPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Certificate().Raw})
		wrong, err := New(c.Node(), hb.CallbackURL, c.token, otherPEM, Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		_, err = wrong.GetCommandsStatus(ctx)
		var ce *ConnectionError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("a client pinned to another certificate reached the agent: %v", err)
		}
	})

	var steps *Steps
	t.Run("GetCleanSteps", func(t *testing.T) {
		var err error
		steps, err = c.GetCleanSteps(ctx, node, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, ok := steps.Find("deploy", "erase_devices_metadata")
		// 99 is what the agent's GenericHardwareManager declares.
		if !ok || st.Priority != 99 {
			t.Fatalf("erase_devices_metadata: %+v %v in %+v", st, ok, steps.All())
		}
		if len(steps.Versions) == 0 {
			t.Fatalf("no hardware_manager_version")
		}
	})

	t.Run("EraseDevicesMetadata", func(t *testing.T) {
		if steps == nil {
			t.Skip("no steps")
		}
		if out, err := exec.Command("sgdisk", "-o", "-n", "1:2048:+100M", disk).CombinedOutput(); err != nil {
			t.Fatalf("sgdisk: %v %s", err, out)
		}
		if got := readDisk(t, disk, 512, 8); string(got) != "EFI PART" {
			t.Fatalf("no GPT written before the step: %q", got)
		}
		st, _ := steps.Find("deploy", "erase_devices_metadata")
		if _, err := c.ExecuteCleanStep(ctx, st, node, nil, steps.Versions); err != nil {
			t.Fatal(err)
		}
		cmd, err := c.Wait(ctx, "clean.execute_clean_step", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Status != Succeeded {
			t.Fatalf("status %s", cmd.Status)
		}
		if got := readDisk(t, disk, 512, 8); string(got) == "EFI PART" {
			t.Fatalf("the GPT header is still on the disk")
		}
		// sgdisk says it creates a new GPT when it finds none to read.
		if out, _ := exec.Command("sgdisk", "-p", disk).CombinedOutput(); !bytes.Contains(out, []byte("Creating new GPT entries")) {
			t.Fatalf("sgdisk still reads a partition table: %s", out)
		}
	})

	// An image server that has no images.
	imgSrv := httptest.NewServer(http.NotFoundHandler())
	defer imgSrv.Close()

	write := func(t *testing.T, info ImageInfo) error {
		if _, err := c.PrepareImage(ctx, info, nil); err != nil {
			return err
		}
		_, err := c.Wait(ctx, "standby.prepare_image", time.Second)
		return err
	}

	for _, format := range []string{"raw", "qcow2"} {
		t.Run("PrepareImage_"+format, func(t *testing.T) {
			im := agenttest.ServeImage(t, "ANVIL-"+format+"-"+randomHex(8))
			file, sum := im.Raw, im.RawSum
			if format == "qcow2" {
				file, sum = im.QCOW2, im.QCOW2Sum
			}
			err := write(t, ImageInfo{ID: "img-" + format, URLs: []string{im.URL + file}, DiskFormat: format, ContainerFormat: "bare",
				ImageType: "whole-disk", OSHashAlgo: "sha256", OSHashValue: sum, StreamRawImages: true, NodeUUID: c.Node()})
			if err != nil {
				t.Fatal(err)
			}
			want := im.RawData
			// The image's partition area, byte for byte: the agent then
			// moves the backup GPT to the disk's end, which rewrites the
			// headers (first and last MiB).
			if got := readDisk(t, disk, 1<<20, len(want)-2<<20); !bytes.Equal(got, want[1<<20:len(want)-1<<20]) {
				t.Fatalf("the disk does not hold the %s image", format)
			}
			if got := readDisk(t, disk, 512, 8); string(got) != "EFI PART" {
				t.Fatalf("the image's GPT is not on the disk: %q", got)
			}
			if got := readDisk(t, disk, agenttest.MarkerOffset, len(im.Marker)); string(got) != im.Marker {
				t.Fatalf("marker %q not on the disk: %q", im.Marker, got)
			}
		})
	}

	t.Run("PrepareImageWrongChecksum", func(t *testing.T) {
		im := agenttest.ServeImage(t, "ANVIL-bad-"+randomHex(8))
		err := write(t, ImageInfo{ID: "img-bad", URLs: []string{im.URL + im.Raw}, DiskFormat: "raw", ContainerFormat: "bare",
			ImageType: "whole-disk", OSHashAlgo: "sha256", OSHashValue: strings.Repeat("ab", 32), StreamRawImages: true, NodeUUID: c.Node()})
		var ce *CommandError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "standby.prepare_image") ||
			!strings.Contains(strings.ToLower(err.Error()), "checksum") || !strings.Contains(err.Error(), c.Node()) {
			t.Fatalf("want a checksum failure naming standby.prepare_image and the node, got %v", err)
		}
	})

	t.Run("PrepareImage404", func(t *testing.T) {
		err := write(t, ImageInfo{ID: "img-missing", URLs: []string{imgSrv.URL + "/missing"}, DiskFormat: "raw", ContainerFormat: "bare",
			ImageType: "whole-disk", OSHashAlgo: "sha256", OSHashValue: strings.Repeat("cd", 32), StreamRawImages: true, NodeUUID: c.Node()})
		var ce *CommandError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "standby.prepare_image") || !strings.Contains(err.Error(), "404") {
			t.Fatalf("want a download failure naming standby.prepare_image, got %v", err)
		}
	})

	t.Run("CollectSystemLogs", func(t *testing.T) {
		tgz, err := c.CollectSystemLogs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(tgz))
		if err != nil {
			t.Fatalf("not gzip: %v", err)
		}
		tr := tar.NewReader(zr)
		files := 0
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("not a tar: %v", err)
			}
			if h.Typeflag == tar.TypeReg {
				files++
			}
		}
		if files == 0 {
			t.Fatalf("the log tarball holds no file")
		}
	})

	t.Run("WrongTokenRefused", func(t *testing.T) {
		bad := randomHex(24)
		w, err := New(c.Node(), hb.CallbackURL, bad, []byte(hb.AgentVerifyCA), Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.GetCleanSteps(ctx, node, nil)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Fatalf("want 401 for a wrong token, got %v", err)
		}
		if strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), c.token) {
			t.Fatalf("the error quotes a token: %v", err)
		}
		if !strings.Contains(err.Error(), "clean.get_clean_steps") || !strings.Contains(err.Error(), c.Node()) {
			t.Fatalf("the error does not name the command and node: %v", err)
		}
	})

	t.Run("UnreachableErrorHasNoToken", func(t *testing.T) {
		w, err := New(c.Node(), fmt.Sprintf("http://127.0.0.1:%d", testport.TCP(t)), c.token, nil, Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.PowerOff(ctx)
		var ce *ConnectionError
		if !errors.As(err, &ce) || !errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), c.token) {
			t.Fatalf("want a connection error without the token, got %v", err)
		}
	})
}
