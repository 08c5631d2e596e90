package bmctest

import (
	"bytes"
	"crypto/md5" //nolint:gosec // HTTP digest auth as Intel AMT speaks it is MD5
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// AMT is a loopback Intel AMT endpoint: WS-Management over plain HTTP
// behind HTTP digest auth, as bmclib's intelamt provider reaches it
// through github.com/jacobweinstock/iamt. It was written from the
// requests iamt makes and answers only those, each checked against
// what iamt sends (headers, parameters, the endpoint references it
// passes back); anything else is a SOAP fault with HTTP 400, so a change
// in bmclib's requests fails a test instead of passing unnoticed.
//
// The machine has a power state and the one-time boot configuration
// SetPXE writes (boot setting data, SetBootConfigRole, ChangeBootOrder);
// the next power-on boots from it and clears it, as AMT does.
type AMT struct {
	User, Password string

	realm string
	mu    sync.Mutex
	// nonces are the challenges handed out, each with the highest
	// nonce count a request has used with it: a count not above it is
	// a replay.
	nonces map[string]uint64
	// enums are the open enumerations, by context, with the resource
	// and mode they were opened for.
	enums     map[string]amtEnum
	power     string // "on" or "off"
	requested int    // the last RequestPowerStateChange, as AMT reports it back
	settings  map[string]string
	singleUse bool   // SetBootConfigRole made Boot Configuration 0 the next boot's, once
	source    string // the boot source ChangeBootOrder put first
	boots     []string
	refused   int
	actions   []string
	faults    []string
}

// AMTState is what an AMT fake has seen and holds.
type AMTState struct {
	Power string // "on" or "off"
	// PXENext: the next boot is from the network, with no BIOS pause or
	// setup screen in the way.
	PXENext bool
	Boots   []string // the device each power-on since the start booted: "pxe" or "disk"
	Refused int      // requests refused for their credentials
	Actions []string // requests answered, in order, e.g. "RequestPowerStateChange 8"
	Faults  []string // requests refused as unknown or malformed
}

type amtEnum struct {
	resource string
	epr      bool
}

// Namespaces and resources as AMT (and so iamt) names them.
const (
	nsSOAP     = "http://www.w3.org/2003/05/soap-envelope"
	nsAddr     = "http://schemas.xmlsoap.org/ws/2004/08/addressing"
	nsWSMan    = "http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd"
	nsEnum     = "http://schemas.xmlsoap.org/ws/2004/09/enumeration"
	nsTransfer = "http://schemas.xmlsoap.org/ws/2004/09/transfer"
	anonymous  = nsAddr + "/role/anonymous"

	cimSchema           = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/"
	amtPowerAssociation = cimSchema + "CIM_AssociatedPowerManagementService"
	amtPowerService     = cimSchema + "CIM_PowerManagementService"
	amtComputerSystem   = cimSchema + "CIM_ComputerSystem"
	amtBootService      = cimSchema + "CIM_BootService"
	amtBootConfig       = cimSchema + "CIM_BootConfigSetting"
	amtBootSource       = cimSchema + "CIM_BootSourceSetting"
	amtBootSettingData  = "http://intel.com/wbem/wscim/1/amt-schema/1/AMT_BootSettingData"

	amtBootConfig0 = "Intel(r) AMT: Boot Configuration 0"
	amtPXESource   = "Intel(r) AMT: Force PXE Boot"
)

// amtEPRs are the instances an EnumerateEPR lists, by resource: the
// selector that names each, and its values. AMT has more than the one
// iamt wants of each, so picking the wrong one shows.
var amtEPRs = map[string]struct {
	key    string
	values []string
}{
	amtComputerSystem: {"Name", []string{"Intel(r) AMT", "ManagedSystem"}},
	amtBootConfig:     {"InstanceID", []string{amtBootConfig0}},
	amtBootSource:     {"InstanceID", []string{"Intel(r) AMT: Force Hard-drive Boot", "Intel(r) AMT: Force CD/DVD Boot", amtPXESource}},
}

// amtBootSettings are AMT_BootSettingData's properties as a machine
// reports them after a plain boot; amtReadOnly those a Put must leave
// out (AMT refuses them; iamt drops them, after MeshCommander).
var (
	amtBootSettings = [][2]string{
		{"BIOSLastStatus", "2"}, {"BIOSPause", "false"}, {"BIOSSetup", "false"}, {"BootMediaIndex", "0"},
		{"BootguardStatus", "127"}, {"ConfigurationDataReset", "false"},
		{"ElementName", "Intel(r) AMT Boot Configuration Settings"}, {"EnforceSecureBoot", "false"},
		{"FirmwareVerbosity", "0"}, {"ForcedProgressEvents", "false"}, {"IDERBootDevice", "0"},
		{"InstanceID", "Intel(r) AMT:BootSettingData 0"}, {"LockKeyboard", "false"}, {"LockPowerButton", "false"},
		{"LockResetButton", "false"}, {"LockSleepButton", "false"}, {"OptionsCleared", "true"},
		{"OwningEntity", "Intel(r) AMT"}, {"ReflashBIOS", "false"}, {"SecureBootControlEnabled", "false"},
		{"SecureErase", "false"}, {"UEFIHTTPSBootEnabled", "false"}, {"UEFILocalPBABootEnabled", "false"},
		{"UseIDER", "false"}, {"UseSOL", "false"}, {"UseSafeMode", "false"}, {"UserPasswordBypass", "false"},
		{"WinREBootEnabled", "false"},
	}
	amtReadOnly = []string{"BIOSLastStatus", "BootguardStatus", "OptionsCleared", "SecureBootControlEnabled",
		"UEFIHTTPSBootEnabled", "UEFILocalPBABootEnabled", "WinREBootEnabled", "UefiBootParametersArray"}
	// amtFixed are the instance's names, which a Put must repeat unchanged.
	amtFixed = []string{"ElementName", "InstanceID", "OwningEntity"}
)

// CIM power states AMT uses (CIM_AssociatedPowerManagementService).
const (
	amtOn           = 2
	amtCycleSoft    = 5
	amtOffSoft      = 8
	amtMasterBusRst = 10
)

// NewAMT is an AMT endpoint taking user and password, its machine in
// power state power ("on" or "off").
func NewAMT(user, password, power string) *AMT {
	a := &AMT{User: user, Password: password, realm: "Digest:" + randomHex(16), nonces: map[string]uint64{},
		enums: map[string]amtEnum{}, power: power, settings: map[string]string{}}
	for _, kv := range amtBootSettings {
		a.settings[kv[0]] = kv[1]
	}
	return a
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// State is the machine's power and next boot, and what the endpoint saw.
func (a *AMT) State() AMTState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AMTState{Power: a.power, PXENext: a.pxeNext(), Boots: slices.Clone(a.boots), Refused: a.refused,
		Actions: slices.Clone(a.actions), Faults: slices.Clone(a.faults)}
}

func (a *AMT) pxeNext() bool {
	return a.singleUse && a.source == amtPXESource && a.settings["BIOSPause"] == "false" &&
		a.settings["BIOSSetup"] == "false" && a.settings["UseIDER"] == "false"
}

func (a *AMT) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.URL.Path != "/wsman" || r.Method != http.MethodPost {
		a.fault(w, http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
		return
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		// iamt's Open: an unauthenticated POST to fetch the challenge.
		a.challenge(w)
		return
	}
	if !a.authorized(auth, r) {
		a.refused++
		a.challenge(w)
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/soap+xml") {
		a.fault(w, http.StatusBadRequest, "content type %q is not SOAP 1.2", ct)
		return
	}
	env, err := parseXML(r.Body)
	if err != nil {
		a.fault(w, http.StatusBadRequest, "not XML: %v", err)
		return
	}
	req, err := readRequest(env, r.URL.Path)
	if err != nil {
		a.fault(w, http.StatusBadRequest, "%v", err)
		return
	}
	body, err := a.answer(req)
	if err != nil {
		a.fault(w, http.StatusBadRequest, "%s %s: %v", req.action, req.resource, err)
		return
	}
	w.Header().Set("Content-Type", "application/soap+xml;charset=UTF-8")
	_, _ = io.WriteString(w, amtEnvelope(req.action+"Response", req.messageID, body))
}

// challenge answers 401 with a fresh nonce, as AMT does both to the
// first request and to one whose credentials it refused.
func (a *AMT) challenge(w http.ResponseWriter) {
	nonce := randomHex(16)
	a.nonces[nonce] = 0
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Digest realm="%s", nonce="%s", stale="false", qop="auth"`, a.realm, nonce))
	w.WriteHeader(http.StatusUnauthorized)
}

// authorized checks an RFC 2617 digest (MD5, qop auth): the user, our
// realm and one of our nonces with a count it has not used, the URI
// requested, and the response the password makes.
func (a *AMT) authorized(header string, r *http.Request) bool {
	scheme, rest, _ := strings.Cut(header, " ")
	p, ok := digestParams(rest)
	if !ok || !strings.EqualFold(scheme, "Digest") || p["username"] != a.User || p["realm"] != a.realm ||
		p["uri"] != r.URL.RequestURI() || p["qop"] != "auth" || (p["algorithm"] != "" && p["algorithm"] != "MD5") {
		return false
	}
	last, known := a.nonces[p["nonce"]]
	nc, err := strconv.ParseUint(p["nc"], 16, 64)
	if !known || err != nil || nc <= last || p["cnonce"] == "" {
		return false
	}
	ha1 := md5Hex(a.User + ":" + a.realm + ":" + a.Password)
	ha2 := md5Hex(r.Method + ":" + p["uri"])
	want := md5Hex(strings.Join([]string{ha1, p["nonce"], p["nc"], p["cnonce"], p["qop"], ha2}, ":"))
	if subtle.ConstantTimeCompare([]byte(want), []byte(p["response"])) != 1 {
		return false
	}
	a.nonces[p["nonce"]] = nc
	return true
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s)) //nolint:gosec // digest auth is MD5
	return hex.EncodeToString(sum[:])
}

// digestParams reads a digest header's comma-separated name=value
// pairs, values bare or quoted (a quoted one may hold commas).
func digestParams(s string) (map[string]string, bool) {
	out := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), ",")) {
		name, rest, ok := strings.Cut(s, "=")
		if !ok {
			return nil, false
		}
		name = strings.TrimSpace(name)
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return nil, false
			}
			val, s = rest[1:end+1], rest[end+2:]
		} else {
			val, s, _ = strings.Cut(rest, ",")
		}
		out[name] = strings.TrimSpace(val)
	}
	return out, true
}

// amtRequest is one WS-Management request's addressing and body.
type amtRequest struct {
	action, resource, messageID string
	body                        *xnode // the Body's one element, nil for none
}

// readRequest checks the envelope iamt builds: SOAP 1.2, WS-Addressing
// headers addressed to this endpoint, a ResourceURI, at most one body
// element.
func readRequest(env *xnode, path string) (amtRequest, error) {
	var req amtRequest
	if env.name != (xml.Name{Space: nsSOAP, Local: "Envelope"}) {
		return req, fmt.Errorf("the root is %s, not a SOAP 1.2 Envelope", env.name.Local)
	}
	h, b := env.child(nsSOAP, "Header"), env.child(nsSOAP, "Body")
	if h == nil || b == nil {
		return req, fmt.Errorf("the envelope needs a Header and a Body")
	}
	req.action, req.resource, req.messageID = h.text(nsAddr, "Action"), h.text(nsWSMan, "ResourceURI"), h.text(nsAddr, "MessageID")
	to, err := url.Parse(h.text(nsAddr, "To"))
	switch {
	case req.action == "" || req.resource == "":
		return req, fmt.Errorf("no Action or ResourceURI header")
	case !strings.HasPrefix(req.messageID, "uuid:"):
		return req, fmt.Errorf("MessageID %q is not a uuid", req.messageID)
	case err != nil || to.Path != path:
		return req, fmt.Errorf("the To header %q is not this endpoint", h.text(nsAddr, "To"))
	case h.child(nsAddr, "ReplyTo").text(nsAddr, "Address") != anonymous:
		return req, fmt.Errorf("ReplyTo is not the anonymous role")
	case len(b.kids) > 1:
		return req, fmt.Errorf("more than one body element")
	}
	if len(b.kids) == 1 {
		req.body = b.kids[0]
	}
	return req, nil
}

// answer carries out req and returns the body of its response.
func (a *AMT) answer(req amtRequest) (string, error) {
	short := req.resource[strings.LastIndexByte(req.resource, '/')+1:]
	switch req.action {
	case nsEnum + "/Enumerate":
		return a.enumerate(req, short)
	case nsEnum + "/Pull":
		return a.pull(req, short)
	case nsTransfer + "/Get":
		if req.resource != amtBootSettingData || req.body != nil {
			return "", fmt.Errorf("only AMT_BootSettingData is got, with an empty body")
		}
		a.actions = append(a.actions, "Get "+short)
		return a.bootSettingData(), nil
	case nsTransfer + "/Put":
		if req.resource != amtBootSettingData {
			return "", fmt.Errorf("only AMT_BootSettingData is put")
		}
		if err := a.putBootSettings(req.body); err != nil {
			return "", err
		}
		a.actions = append(a.actions, "Put "+short)
		return a.bootSettingData(), nil
	case amtPowerService + "/RequestPowerStateChange":
		return a.requestPowerState(req)
	case amtBootService + "/SetBootConfigRole":
		return a.setBootConfigRole(req)
	case amtBootConfig + "/ChangeBootOrder":
		return a.changeBootOrder(req)
	}
	return "", fmt.Errorf("unknown action")
}

func (a *AMT) enumerate(req amtRequest, short string) (string, error) {
	if req.body == nil || req.body.name != (xml.Name{Space: nsEnum, Local: "Enumerate"}) {
		return "", fmt.Errorf("the body is not an Enumerate")
	}
	epr := req.body.text(nsWSMan, "EnumerationMode") == "EnumerateEPR"
	// iamt reads the power association's properties and the others'
	// references only.
	if _, listed := amtEPRs[req.resource]; !(listed && epr || req.resource == amtPowerAssociation && !epr) {
		return "", fmt.Errorf("not an enumeration iamt makes (EPR mode %v)", epr)
	}
	ctx := "uuid:" + randomHex(16)
	a.enums[ctx] = amtEnum{resource: req.resource, epr: epr}
	if epr {
		short = "EnumerateEPR " + short
	} else {
		short = "Enumerate " + short
	}
	a.actions = append(a.actions, short)
	return fmt.Sprintf(`<e:EnumerateResponse><e:EnumerationContext>%s</e:EnumerationContext></e:EnumerateResponse>`, esc(ctx)), nil
}

// pull answers every item at once and ends the enumeration, as AMT does
// for these few instances.
func (a *AMT) pull(req amtRequest, short string) (string, error) {
	if req.body == nil || req.body.name != (xml.Name{Space: nsEnum, Local: "Pull"}) {
		return "", fmt.Errorf("the body is not a Pull")
	}
	ctx := req.body.text(nsEnum, "EnumerationContext")
	e, ok := a.enums[ctx]
	if !ok || e.resource != req.resource {
		return "", fmt.Errorf("enumeration context %q is not open for this resource", ctx)
	}
	delete(a.enums, ctx)
	var items strings.Builder
	if e.epr {
		sel := amtEPRs[e.resource]
		for _, v := range sel.values {
			items.WriteString(amtEPR(e.resource, sel.key, v))
		}
	} else {
		items.WriteString(a.powerAssociation())
	}
	a.actions = append(a.actions, "Pull "+short)
	return fmt.Sprintf(`<e:PullResponse><e:Items>%s</e:Items><e:EndOfSequence/></e:PullResponse>`, items.String()), nil
}

// available is what AMT offers to request from a power state: from
// on, soft off, power cycle and reset; from off, on.
func (a *AMT) available() []int {
	if a.power == "on" {
		return []int{amtCycleSoft, amtOffSoft, amtMasterBusRst}
	}
	return []int{amtOn}
}

func (a *AMT) powerAssociation() string {
	state := amtOffSoft
	if a.power == "on" {
		state = amtOn
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<h:CIM_AssociatedPowerManagementService xmlns:h="%s">`, amtPowerAssociation)
	for _, s := range a.available() {
		fmt.Fprintf(&b, `<h:AvailableRequestedPowerStates>%d</h:AvailableRequestedPowerStates>`, s)
	}
	fmt.Fprintf(&b, `<h:PowerState>%d</h:PowerState><h:RequestedPowerState>%d</h:RequestedPowerState>`, state, a.requested)
	b.WriteString(`</h:CIM_AssociatedPowerManagementService>`)
	return b.String()
}

func (a *AMT) requestPowerState(req amtRequest) (string, error) {
	in := req.body
	if req.resource != amtPowerService || in == nil || in.name != (xml.Name{Space: amtPowerService, Local: "RequestPowerStateChange_INPUT"}) {
		return "", fmt.Errorf("the body is not RequestPowerStateChange_INPUT")
	}
	if !isEPR(in.child(amtPowerService, "ManagedElement"), amtComputerSystem, "Name", "ManagedSystem") {
		return "", fmt.Errorf("ManagedElement does not refer to the ManagedSystem computer system")
	}
	state, err := strconv.Atoi(in.text(amtPowerService, "PowerState"))
	if err != nil || !slices.Contains(a.available(), state) {
		return "", fmt.Errorf("power state %q is not available from %s", in.text(amtPowerService, "PowerState"), a.power)
	}
	a.requested = state
	switch state {
	case amtOffSoft:
		a.power = "off"
	default: // on, or a cycle or reset of a running machine: it boots
		a.power = "on"
		a.boot()
	}
	a.actions = append(a.actions, fmt.Sprintf("RequestPowerStateChange %d", state))
	return output(amtPowerService, "RequestPowerStateChange", 0), nil
}

// boot starts the machine from the one-time configuration if SetPXE
// left one, and uses it up.
func (a *AMT) boot() {
	dev := "disk"
	if a.pxeNext() {
		dev = "pxe"
	}
	a.boots = append(a.boots, dev)
	a.singleUse, a.source = false, ""
}

func (a *AMT) bootSettingData() string {
	var b strings.Builder
	fmt.Fprintf(&b, `<h:AMT_BootSettingData xmlns:h="%s">`, amtBootSettingData)
	for _, kv := range amtBootSettings {
		fmt.Fprintf(&b, `<h:%s>%s</h:%[1]s>`, kv[0], esc(a.settings[kv[0]]))
	}
	b.WriteString(`</h:AMT_BootSettingData>`)
	return b.String()
}

// putBootSettings takes a Put of the boot setting data: the writable
// properties only, each with a value of its kind, the instance's names
// unchanged.
func (a *AMT) putBootSettings(data *xnode) error {
	if data == nil || data.name != (xml.Name{Space: amtBootSettingData, Local: "AMT_BootSettingData"}) {
		return fmt.Errorf("the body is not an AMT_BootSettingData")
	}
	next := map[string]string{}
	for _, k := range data.kids {
		name, v := k.name.Local, k.content
		was, known := a.settings[name]
		switch {
		case k.name.Space != amtBootSettingData || !known:
			return fmt.Errorf("unknown property %s", name)
		case slices.Contains(amtReadOnly, name):
			return fmt.Errorf("%s is read-only", name)
		case slices.Contains(amtFixed, name) && v != was:
			return fmt.Errorf("%s %q is not this instance's", name, v)
		case was == "true" || was == "false":
			if v != "true" && v != "false" {
				return fmt.Errorf("%s %q is not a boolean", name, v)
			}
		case !slices.Contains(amtFixed, name):
			if _, err := strconv.ParseUint(v, 10, 16); err != nil {
				return fmt.Errorf("%s %q is not a number", name, v)
			}
		}
		next[name] = v
	}
	if next["InstanceID"] == "" {
		return fmt.Errorf("no InstanceID")
	}
	for k, v := range next {
		a.settings[k] = v
	}
	return nil
}

func (a *AMT) setBootConfigRole(req amtRequest) (string, error) {
	in := req.body
	if req.resource != amtBootService || in == nil || in.name != (xml.Name{Space: amtBootService, Local: "SetBootConfigRole_INPUT"}) {
		return "", fmt.Errorf("the body is not SetBootConfigRole_INPUT")
	}
	if !isEPR(in.child(amtBootService, "BootConfigSetting"), amtBootConfig, "InstanceID", amtBootConfig0) {
		return "", fmt.Errorf("BootConfigSetting does not refer to %s", amtBootConfig0)
	}
	role := in.text(amtBootService, "Role")
	ret := 0
	switch role {
	case "1": // IsNextSingleUse
		a.singleUse = true
	case "32768": // not the next boot's
		a.singleUse = false
	default:
		ret = 1 // AMT takes no other role: "not supported"
	}
	a.actions = append(a.actions, "SetBootConfigRole "+role)
	return output(amtBootService, "SetBootConfigRole", ret), nil
}

func (a *AMT) changeBootOrder(req amtRequest) (string, error) {
	in := req.body
	if in == nil || in.name != (xml.Name{Space: amtBootConfig, Local: "ChangeBootOrder_INPUT"}) {
		return "", fmt.Errorf("the body is not ChangeBootOrder_INPUT")
	}
	src := in.child(amtBootConfig, "Source")
	id := ""
	for _, v := range amtEPRs[amtBootSource].values {
		if isEPR(src, amtBootSource, "InstanceID", v) {
			id = v
		}
	}
	if id == "" {
		return "", fmt.Errorf("the Source parameter does not refer to a boot source")
	}
	a.source = id
	a.actions = append(a.actions, "ChangeBootOrder "+id)
	return output(amtBootConfig, "ChangeBootOrder", 0), nil
}

// amtEPR is an endpoint reference to the instance of resource whose
// selector key is value.
func amtEPR(resource, key, value string) string {
	return fmt.Sprintf(`<a:EndpointReference><a:Address>%s</a:Address><a:ReferenceParameters><w:ResourceURI>%s</w:ResourceURI>`+
		`<w:SelectorSet><w:Selector Name="%s">%s</w:Selector></w:SelectorSet></a:ReferenceParameters></a:EndpointReference>`,
		anonymous, esc(resource), esc(key), esc(value))
}

// isEPR reports whether a method parameter holds the reference amtEPR
// makes, as iamt copies it from an enumeration.
func isEPR(p *xnode, resource, key, value string) bool {
	ref := p.child(nsAddr, "ReferenceParameters")
	if p.text(nsAddr, "Address") != anonymous || ref.text(nsWSMan, "ResourceURI") != resource {
		return false
	}
	sels := ref.child(nsWSMan, "SelectorSet")
	if sels == nil || len(sels.kids) != 1 {
		return false
	}
	s := sels.kids[0]
	return s.name == xml.Name{Space: nsWSMan, Local: "Selector"} && s.attr("Name") == key && s.content == value
}

// output is a method's answer: its return value, the only property.
func output(resource, method string, ret int) string {
	return fmt.Sprintf(`<h:%s_OUTPUT xmlns:h="%s"><h:ReturnValue>%d</h:ReturnValue></h:%[1]s_OUTPUT>`, method, resource, ret)
}

// fault refuses a request with a SOAP fault, as AMT refuses what it
// cannot do, and remembers why.
func (a *AMT) fault(w http.ResponseWriter, status int, format string, args ...any) {
	why := fmt.Sprintf(format, args...)
	a.faults = append(a.faults, why)
	w.Header().Set("Content-Type", "application/soap+xml;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, amtEnvelope("http://schemas.dmtf.org/wbem/wsman/1/wsman/fault", "",
		`<s:Fault><s:Code><s:Value>s:Sender</s:Value></s:Code><s:Reason><s:Text xml:lang="en-US">`+esc(why)+`</s:Text></s:Reason></s:Fault>`))
}

// amtEnvelope wraps a response body, the protocol's namespaces declared
// at the root as AMT declares them.
func amtEnvelope(action, relatesTo, body string) string {
	rel := ""
	if relatesTo != "" {
		rel = "<a:RelatesTo>" + esc(relatesTo) + "</a:RelatesTo>"
	}
	return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><s:Envelope xmlns:s="%s" xmlns:a="%s" xmlns:w="%s" xmlns:e="%s">`+
		`<s:Header><a:To>%s</a:To>%s<a:Action s:mustUnderstand="true">%s</a:Action><a:MessageID>uuid:%s</a:MessageID></s:Header>`+
		`<s:Body>%s</s:Body></s:Envelope>`, nsSOAP, nsAddr, nsWSMan, nsEnum, anonymous, rel, esc(action), randomHex(16), body)
}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// xnode is a parsed XML element, namespaces resolved.
type xnode struct {
	name    xml.Name
	attrs   []xml.Attr
	content string // its own text, trimmed
	kids    []*xnode
}

func parseXML(r io.Reader) (*xnode, error) {
	d := xml.NewDecoder(r)
	var stack []*xnode
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return nil, fmt.Errorf("no document element")
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			n := &xnode{name: t.Name, attrs: t.Attr}
			if len(stack) > 0 {
				top := stack[len(stack)-1]
				top.kids = append(top.kids, n)
			}
			stack = append(stack, n)
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].content += strings.TrimSpace(string(t))
			}
		case xml.EndElement:
			n := stack[len(stack)-1]
			if stack = stack[:len(stack)-1]; len(stack) == 0 {
				return n, nil
			}
		}
	}
}

// child is n's first child named space:local; nil on a nil n.
func (n *xnode) child(space, local string) *xnode {
	if n == nil {
		return nil
	}
	for _, k := range n.kids {
		if k.name.Space == space && k.name.Local == local {
			return k
		}
	}
	return nil
}

// text is the content of n's child space:local, "" when there is none.
func (n *xnode) text(space, local string) string {
	if c := n.child(space, local); c != nil {
		return c.content
	}
	return ""
}

func (n *xnode) attr(local string) string {
	for _, a := range n.attrs {
		if a.Name.Space == "" && a.Name.Local == local {
			return a.Value
		}
	}
	return ""
}
