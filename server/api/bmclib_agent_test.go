package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// followingMachine is a machine whose power and boot device a BMC fake
// keeps: system id of rack. read says what the fake holds: the power
// ("on" or "off") and the device the machine comes up from when turned
// on ("pxe" for the network). When the fake turns it on from pxe, it
// does what the machine's iPXE firmware would after DHCP: it asks Anvil
// for its MAC's script (GET /ipxe/<mac>) and boots the real agent only
// when that script boots the deploy kernel, its disk otherwise; when the
// fake turns it off, the agent stops. It boots one power change at a
// time, in order, away from the fake's answer, as redfish-sim runs its
// power hook. It follows changes of power only: a reset of a running
// machine is none (Anvil's bmclib reboot is off, then on), and would show
// as a boot the fake made that the machine did not.
type followingMachine struct {
	fake         http.Handler
	read         func() (power, boot string)
	rack         *agenttest.Rack
	id, mac, api string
	changes      chan [2]string
	done         chan struct{}
	mu           sync.Mutex
	booted       []string // "agent" or "disk" per power on, in order
	failed       []string // what the machine could not do
	pending      int      // power changes taken by the fake, not yet followed
}

func newFollowingMachine(t *testing.T, fake http.Handler, read func() (power, boot string), rack *agenttest.Rack, id, mac, apiURL string) *followingMachine {
	m := &followingMachine{fake: fake, read: read, rack: rack, id: id, mac: mac, api: apiURL, changes: make(chan [2]string, 64), done: make(chan struct{})}
	go m.run()
	// Registered after the rack's machine, so it runs before the agent
	// and its disk go.
	t.Cleanup(func() {
		close(m.changes)
		<-m.done
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, f := range m.failed {
			t.Errorf("machine %s: %s", id, f)
		}
	})
	return m
}

// ServeHTTP is the fake, with the machine following its power.
func (m *followingMachine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	before, _ := m.read()
	m.fake.ServeHTTP(w, r)
	if after, boot := m.read(); after != before {
		m.mu.Lock()
		m.pending++
		m.mu.Unlock()
		m.changes <- [2]string{after, boot}
	}
}

func (m *followingMachine) run() {
	defer close(m.done)
	for c := range m.changes {
		power, boot := c[0], c[1]
		var err error
		switch {
		case power == "off":
			err = m.rack.Power(m.id, "Off", "", m.mac)
		case boot == "pxe" && m.netbootsAgent():
			m.note("agent")
			err = m.rack.Power(m.id, "On", "Pxe", m.mac)
		default:
			m.note("disk")
			err = m.rack.Power(m.id, "On", "Hdd", m.mac)
		}
		if err != nil {
			m.fail(err.Error())
		}
		m.mu.Lock()
		m.pending--
		m.mu.Unlock()
	}
}

// netbootsAgent fetches the machine's iPXE script from Anvil and says
// whether it boots a kernel (the agent) rather than exiting to the disk.
func (m *followingMachine) netbootsAgent() bool {
	r, err := http.Get(m.api + "/ipxe/" + strings.ReplaceAll(m.mac, ":", "-"))
	if err != nil {
		m.fail("iPXE script: " + err.Error())
		return false
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || !bytes.HasPrefix(b, []byte("#!ipxe")) {
		m.fail("iPXE script: " + r.Status + ": " + string(b))
		return false
	}
	return bytes.Contains(b, []byte("\nkernel ")) && bytes.Contains(b, []byte("\nboot\n"))
}

func (m *followingMachine) note(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.booted = append(m.booted, what)
}

func (m *followingMachine) fail(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed = append(m.failed, what)
}

// boots is what the machine booted at each power on, once it has
// followed every power change the fake took: it follows them in its
// own goroutine, which can lag the conductor (stopping an agent takes
// seconds), so a node may be active before its machine is on.
func (m *followingMachine) boots(t *testing.T) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		m.mu.Lock()
		pending, booted := m.pending, append([]string(nil), m.booted...)
		m.mu.Unlock()
		if pending == 0 {
			return booted
		}
		if time.Now().After(deadline) {
			t.Fatalf("the machine has not followed %d power changes after a minute", pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agentMAC is the NIC of a lifecycleNode's machine.
const agentMAC = "52:54:00:b1:00:01"

// lifecycleNode is a bmclib node whose machine follows its BMC fake into
// the real agent on a loop disk, taken through the agent lifecycle a
// step at a time; each step checks what every provider must do, and a
// test checks its fake between them.
type lifecycleNode struct {
	admin    *servertest.Client
	rack     *agenttest.Rack
	im       *agenttest.Image
	m        *followingMachine
	id, disk string
}

// newLifecycleNode starts Anvil and a machine that follows fake (read as
// followingMachine reads it), serves the two as the node's BMC, and
// enrols, manages and validates a bmclib node name whose driver_info is
// info(that server).
func newLifecycleNode(t *testing.T, setting, name string, fake http.Handler, read func() (power, boot string), info func(*httptest.Server) map[string]any) *lifecycleNode {
	t.Helper()
	l := &lifecycleNode{im: agenttest.ServeImage(t, "ANVIL-IMAGE-MARKER")}
	o := bmcOpts
	// Metadata only, as newRigWith: TestWipePolicies covers the deep wipes.
	o.Conductor.Agent = conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second, LogDir: t.TempDir(), Poll: 500 * time.Millisecond, Wipe: conductor.WipeMetadata}
	srv, clients := startLocal(t, setting, o)
	l.admin = atVer(clients["system-admin"], api.VerMax)
	l.rack = agenttest.NewRack(t, srv.URL)
	l.disk = l.rack.Machine(t, "1")
	l.m = newFollowingMachine(t, fake, read, l.rack, "1", agentMAC, srv.URL)
	ts := httptest.NewServer(l.m)
	t.Cleanup(ts.Close)

	di := info(ts)
	// What the machine's iPXE script boots; the simulated machine starts
	// the agent itself rather than download them.
	di["deploy_kernel"], di["deploy_ramdisk"] = l.im.URL+"ipa.kernel", l.im.URL+"ipa.initramfs"
	r := l.admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "bmclib", "driver_info": di})
	mustStatus(t, r, 201)
	n := r.JSON(t)
	l.id = n["uuid"].(string)
	if n["boot_interface"] != "pxe" || n["deploy_interface"] != "direct" {
		t.Fatalf("bmclib node interfaces: boot %v, deploy %v", n["boot_interface"], n["deploy_interface"])
	}
	mustStatus(t, l.admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": l.id, "address": agentMAC}), 201)
	provision(t, l.admin, l.id, map[string]any{"target": "manage"}, 202)
	waitState(t, l.admin, l.id, "manageable")
	v := l.admin.Do(t, "GET", "/v1/nodes/"+l.id+"/validate", nil).JSON(t)
	for _, iface := range []string{"boot", "power", "management"} {
		if res, _ := v[iface].(map[string]any); res["result"] != true {
			t.Errorf("validate %s: %v", iface, res)
		}
	}
	return l
}

// provide: automated cleaning boots the agent from the network, which
// wipes the disk's partition table; the machine ends off.
func (l *lifecycleNode) provide(t *testing.T) {
	t.Helper()
	run(t, "sgdisk", "-o", "-n", "1:2048:+16M", l.disk)
	if len(partitions(t, l.disk)) != 1 {
		t.Fatal("could not partition the loop disk")
	}
	provision(t, l.admin, l.id, map[string]any{"target": "provide"}, 202)
	n := waitFor(t, l.admin, l.id, "available", l.rack)
	if p := partitions(t, l.disk); len(p) != 0 {
		t.Errorf("after automated cleaning the disk still has partitions %v", p)
	}
	if n["power_state"] != bmc.PowerOff || n["maintenance"] != false {
		t.Errorf("after cleaning: power %v maintenance %v", n["power_state"], n["maintenance"])
	}
	if b := l.m.boots(t); len(b) != 1 || b[0] != "agent" {
		t.Fatalf("cleaning: the machine booted %v, want the agent once", b)
	}
	if !l.rack.Stopped("1", 20*time.Second) {
		t.Error("the agent still runs after cleaning")
	}
}

// deploy: active, the raw image and a config drive on the disk, the
// agent booted once more to write them and the machine on from its disk.
func (l *lifecycleNode) deploy(t *testing.T) {
	t.Helper()
	mustStatus(t, l.admin.Do(t, "PATCH", "/v1/nodes/"+l.id, []map[string]any{
		{"op": "add", "path": "/instance_info", "value": map[string]any{"image_source": l.im.URL + l.im.Raw,
			"image_os_hash_algo": "sha256", "image_os_hash_value": l.im.RawSum}}}), 200)
	provision(t, l.admin, l.id, map[string]any{"target": "active",
		"configdrive": map[string]any{"meta_data": map[string]any{"hostname": "bl-tenant"}}}, 202)
	n := waitFor(t, l.admin, l.id, "active", l.rack)
	const part = 2048 * 512
	if got := readAt(t, l.disk, part, 8<<20); !bytes.Equal(got, l.im.RawData[part:part+8<<20]) {
		t.Errorf("the disk does not hold the image's bytes")
	}
	if !hasConfigDrive(t, l.disk) {
		t.Errorf("no config-2 partition on the disk: %v", partitions(t, l.disk))
	}
	if n["power_state"] != bmc.PowerOn {
		t.Errorf("deployed: node power %v", n["power_state"])
	}
	if b := l.m.boots(t); strings.Join(b, ",") != "agent,agent,disk" {
		t.Errorf("deploy: the machine booted %v, want the agent then its disk", b)
	}
	if !l.rack.Stopped("1", 20*time.Second) {
		t.Error("the agent still runs on the deployed machine")
	}
}

// undeploy: deleted, the tear down's cleaning boots the agent, which
// wipes the disk again; the machine ends off.
func (l *lifecycleNode) undeploy(t *testing.T) {
	t.Helper()
	provision(t, l.admin, l.id, map[string]any{"target": "deleted"}, 202)
	n := waitFor(t, l.admin, l.id, "available", l.rack)
	if p := partitions(t, l.disk); len(p) != 0 {
		t.Errorf("after deleted the disk still has partitions %v", p)
	}
	if n["power_state"] != bmc.PowerOff {
		t.Errorf("after deleted: power %v", n["power_state"])
	}
	if b := l.m.boots(t); strings.Join(b, ",") != "agent,agent,disk,agent" {
		t.Errorf("undeploy: the machine booted %v, want the agent for its cleaning", b)
	}
	if !l.rack.Stopped("1", 20*time.Second) {
		t.Error("the agent still runs after undeploy's cleaning")
	}
}

// TestBmclibAgentDeploy is a whole agent lifecycle on a bmclib node
// whose power and boot device are an rpc webhook (signatures checked):
// the conductor sets boot device pxe through bmclib and powers the
// machine on, the machine netboots by Anvil's iPXE script into the real
// agent on a loop disk, and the node goes enroll → manageable →
// available (cleaning wipes the disk) → active (the image and a config
// drive written, the machine booted from its disk) → available again
// (undeploy's cleaning wipes it), the agent stopped at each power off.
func TestBmclibAgentDeploy(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		hook := bmctest.NewRPCWebhook("rpc-agent-s3cret", "off")
		// The webhook keeps the boot device until it is set again.
		read := func() (string, string) {
			power, boot, _, _ := hook.State()
			return power, boot
		}
		l := newLifecycleNode(t, setting, "bl-agent", hook, read, func(ts *httptest.Server) map[string]any {
			return map[string]any{"bmclib_provider": "rpc", "bmclib_address": "rack1-node1", "bmclib_rpc_url": ts.URL + "/bmc", "bmclib_rpc_secret": hook.Secret}
		})
		l.provide(t)
		l.deploy(t)
		if power, boot, _, _ := hook.State(); power != "on" || boot != "disk" {
			t.Errorf("deployed: webhook power %s boot %s", power, boot)
		}
		l.undeploy(t)
		if _, _, bad, _ := hook.State(); bad != 0 {
			t.Errorf("the webhook refused %d signatures", bad)
		}
	})
}

// TestBmclibIntelAMTAgentDeploy is TestBmclibAgentDeploy's lifecycle on
// an intelamt node, its BMC the Intel AMT fake. AMT sets only a one-time
// PXE boot: each agent boot is the conductor's pxe override used up by
// the power on after it, and the deployed machine comes up from its disk
// though nothing is sent for the conductor's boot device disk. The AMT
// refuses no credentials, faults no request, and is never asked for a
// boot source but PXE nor for a persistent one.
func TestBmclibIntelAMTAgentDeploy(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		amt := bmctest.NewAMT("admin", "amt-agent-P4ssw0rd", "off")
		// The device the latest power on booted, as the AMT chose it: its
		// one-time PXE when set, else "disk", the fake modelling firmware
		// whose boot order puts the disk first. A machine with the
		// network first would netboot at every power on, into the agent
		// only when Anvil's script boots it; checked below for the
		// deployed node, whose script must exit to the disk.
		read := func() (string, string) {
			st := amt.State()
			boot := ""
			if len(st.Boots) > 0 {
				boot = st.Boots[len(st.Boots)-1]
			}
			return st.Power, boot
		}
		l := newLifecycleNode(t, setting, "amt-agent", amt, read, func(ts *httptest.Server) map[string]any {
			return map[string]any{"bmclib_provider": "intelamt", "bmclib_address": "127.0.0.1",
				"bmclib_port": float64(ts.Listener.Addr().(*net.TCPAddr).Port), "bmclib_username": amt.User, "bmclib_password": amt.Password}
		})
		l.provide(t)
		if st := amt.State(); !slices.Equal(st.Boots, []string{"pxe"}) || st.PXENext || st.Power != "off" {
			t.Errorf("cleaning at the AMT: boots %v, PXE still next %v, power %s", st.Boots, st.PXENext, st.Power)
		}
		l.deploy(t)
		if st := amt.State(); !slices.Equal(st.Boots, []string{"pxe", "pxe", "disk"}) || st.PXENext || st.Power != "on" {
			t.Errorf("deployed at the AMT: boots %v, PXE still next %v, power %s", st.Boots, st.PXENext, st.Power)
		}
		if l.m.netbootsAgent() {
			t.Error("Anvil's iPXE script for the deployed node boots the agent: a machine with the network first in its boot order would not come up from its disk")
		}
		l.undeploy(t)
		st := amt.State()
		if !slices.Equal(st.Boots, []string{"pxe", "pxe", "disk", "pxe"}) || st.PXENext || st.Power != "off" {
			t.Errorf("undeployed at the AMT: boots %v, PXE still next %v, power %s", st.Boots, st.PXENext, st.Power)
		}
		if st.Refused != 0 || len(st.Faults) != 0 {
			t.Errorf("the AMT refused %d requests' credentials and faulted %v", st.Refused, st.Faults)
		}
		for _, a := range st.Actions {
			if src, ok := strings.CutPrefix(a, "ChangeBootOrder "); ok && src != "Intel(r) AMT: Force PXE Boot" {
				t.Errorf("boot source %q asked of the AMT", src)
			}
			if role, ok := strings.CutPrefix(a, "SetBootConfigRole "); ok && role != "1" {
				t.Errorf("boot configuration role %s (not the next boot only) asked of the AMT", role)
			}
		}
	})
}

// TestBmclibAgentBootRefused: a bmclib provider that cannot set the boot
// device (homeassistant) cannot network-boot the agent, so validate's
// boot verdict says so, its step list has no agent step, and a deploy is
// refused naming driver_info/bmclib_provider before anything is done; an
// rpc node with the same deploy settings validates and lists the agent's
// steps.
func TestBmclibAgentBootRefused(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		deploy := map[string]any{"deploy_kernel": "http://192.0.2.1/ipa.kernel", "deploy_ramdisk": "http://192.0.2.1/ipa.initramfs"}
		node := func(name string, info map[string]any) string {
			t.Helper()
			for k, v := range deploy {
				info[k] = v
			}
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "bmclib", "driver_info": info,
				"instance_info": map[string]any{"image_source": "http://192.0.2.1/img.raw", "image_os_hash_algo": "sha256", "image_os_hash_value": strings.Repeat("ab", 32)}})
			mustStatus(t, r, 201)
			return r.JSON(t)["uuid"].(string)
		}
		ha := node("bl-ha", map[string]any{"bmclib_provider": "homeassistant", "bmclib_address": "127.0.0.1", "bmclib_homeassistant_switch": "switch.node1", "bmclib_password": "token"})
		rpc := node("bl-rpc", map[string]any{"bmclib_provider": "rpc", "bmclib_rpc_url": "http://127.0.0.1:9/bmc", "bmclib_rpc_secret": "s"})

		boot := func(id string) map[string]any {
			return admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)["boot"].(map[string]any)
		}
		if b := boot(ha); b["result"] != false || !strings.Contains(fmt.Sprint(b["reason"]), "bmclib provider homeassistant cannot set the boot device") {
			t.Errorf("homeassistant validate boot: %v", b)
		}
		if b := boot(rpc); b["result"] != true {
			t.Errorf("rpc validate boot: %v", b)
		}
		steps := func(id string) string {
			r := admin.Do(t, "GET", "/v1/nodes/"+id+"/steps", nil)
			mustStatus(t, r, 200)
			return string(r.Body)
		}
		if s := steps(ha); strings.Contains(s, `"erase_devices_metadata"`) || strings.Contains(s, `"write_image"`) {
			t.Errorf("homeassistant step list offers the agent's steps: %s", s)
		}
		if s := steps(rpc); !strings.Contains(s, `"erase_devices_metadata"`) || !strings.Contains(s, `"write_image"`) {
			t.Errorf("rpc step list lacks the agent's steps: %s", s)
		}
		r := provision(t, admin, ha, map[string]any{"target": "active"}, 400)
		mustFaultNaming(t, "deploy homeassistant", r, "bmclib provider homeassistant cannot set the boot device")
		if n := admin.Do(t, "GET", "/v1/nodes/"+ha, nil).JSON(t); n["provision_state"] != "enroll" || n["last_error"] != nil {
			t.Errorf("a refused deploy changed the node: %v %v", n["provision_state"], n["last_error"])
		}
	})
}
