package api_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// personas, in the column order of the matrix below. The service role
// implies no other: a system-scoped service user, a service user of the
// owner project and of the lessee project, and one of the elevated
// service project ("service", the default --service-project).
var personas = []struct {
	name  string
	scope identity.Scope
	role  string
}{
	{"anonymous", identity.Scope{}, ""},
	{"system-admin", identity.Scope{System: true}, "admin"},
	{"system-member", identity.Scope{System: true}, "member"},
	{"system-reader", identity.Scope{System: true}, "reader"},
	{"system-service", identity.Scope{System: true}, "service"},
	{"owner-admin", identity.Scope{Project: "own"}, "admin"},
	{"owner-manager", identity.Scope{Project: "own"}, "manager"},
	{"owner-member", identity.Scope{Project: "own"}, "member"},
	{"owner-reader", identity.Scope{Project: "own"}, "reader"},
	{"owner-service", identity.Scope{Project: "own"}, "service"},
	{"lessee-admin", identity.Scope{Project: "les"}, "admin"},
	{"lessee-manager", identity.Scope{Project: "les"}, "manager"},
	{"lessee-member", identity.Scope{Project: "les"}, "member"},
	{"lessee-reader", identity.Scope{Project: "les"}, "reader"},
	{"lessee-service", identity.Scope{Project: "les"}, "service"},
	{"other-admin", identity.Scope{Project: "oth"}, "admin"},
	{"other-manager", identity.Scope{Project: "oth"}, "manager"},
	{"other-member", identity.Scope{Project: "oth"}, "member"},
	{"other-reader", identity.Scope{Project: "oth"}, "reader"},
	{"service-project-service", identity.Scope{Project: "service"}, "service"},
}

// matrix is the expected status of every node endpoint for every persona,
// columns as in personas: anonymous | system admin, member, reader,
// service | owner admin, manager, member, reader, service | lessee … |
// other project admin … reader | elevated service. Every request acts on a
// fresh node owned by "own" and leased to "les" that carries trait
// CUSTOM_A, so one row's mutation cannot affect another. The expectations
// are Ironic master's default check strings (ironic/common/policy.py)
// except where the README's "Rules that differ from Ironic's defaults"
// says otherwise: history, last_error, explicit steps, runbooks.
var matrix = []struct {
	method, path, body string
	want               string
}{
	// anvil:node:agent_logs:get is system readers only (Anvil's): the
	// node's projects see the node, so 403; others 404.
	{"GET", "/v1/nodes/{n}/agent_logs", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	// node:list is API_READER: any reader or service user, filtered.
	{"GET", "/v1/nodes", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},
	{"GET", "/v1/nodes/detail", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},
	// node:get is SYSTEM_OR_PROJECT_READER: PROJECT_SERVICE names the owner only.
	{"GET", "/v1/nodes/{n}", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/nodes/{name}", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	// node:create is SYSTEM_ADMIN or SYSTEM_SERVICE; create:self_owned_node
	// is role:admin or role:service, the owner pinned to the caller's project.
	{"POST", "/v1/nodes", `{"driver":"fake"}`, "401 | 201 403 403 201 | 201 403 403 403 201 | 201 403 403 403 201 | 201 403 403 403 | 201"},
	{"POST", "/v1/nodes", `{"driver":"fake","owner":"les"}`, "401 | 201 403 403 201 | 403 403 403 403 403 | 201 403 403 403 201 | 403 403 403 403 | 403"},
	// update_extra is SYSTEM_OR_PROJECT_MEMBER (no PROJECT_SERVICE).
	{"PATCH", "/v1/nodes/{n}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 200 200 403 200 | 200 200 200 403 403 | 200 200 200 403 404 | 404 404 404 404 | 200"},
	// update_instance_info is SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN.
	{"PATCH", "/v1/nodes/{n}", `[{"op":"add","path":"/instance_info/k","value":"v"}]`, "401 | 200 200 403 200 | 200 200 200 403 200 | 200 200 403 403 404 | 404 404 404 404 | 200"},
	// update:name, lessee, driver_info, properties are SYSTEM_MEMBER_OR_OWNER_MEMBER.
	{"PATCH", "/v1/nodes/{n}", `[{"op":"replace","path":"/name","value":"renamed-{i}"}]`, "401 | 200 200 403 200 | 200 200 200 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	// node:update (description) is SYSTEM_OR_PROJECT_MEMBER.
	{"PATCH", "/v1/nodes/{n}", `[{"op":"replace","path":"/description","value":"d"}]`, "401 | 200 200 403 200 | 200 200 200 403 403 | 200 200 200 403 404 | 404 404 404 404 | 200"},
	{"PATCH", "/v1/nodes/{n}", `[{"op":"replace","path":"/lessee","value":"oth"}]`, "401 | 200 200 403 200 | 200 200 200 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	// update:owner is SYSTEM_MEMBER: the elevated service project passes it
	// through rule:service_role, a system-scoped service user does not.
	{"PATCH", "/v1/nodes/{n}", `[{"op":"replace","path":"/owner","value":"oth"}]`, "401 | 200 200 403 403 | 403 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"PATCH", "/v1/nodes/{n}", `[{"op":"add","path":"/driver_info/ipmi_port","value":624}]`, "401 | 200 200 403 200 | 200 200 200 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"PATCH", "/v1/nodes/{n}", `[{"op":"add","path":"/properties/cpus","value":4}]`, "401 | 200 200 403 200 | 200 200 200 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	// node:delete is SYSTEM_ADMIN; delete:self_owned_node is PROJECT_ADMIN.
	{"DELETE", "/v1/nodes/{n}", "", "401 | 204 403 403 403 | 204 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 403"},
	{"GET", "/v1/nodes/{n}/traits", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	// traits:set and traits:delete are SYSTEM_MEMBER_OR_OWNER_ADMIN.
	{"PUT", "/v1/nodes/{n}/traits", `{"traits":["CUSTOM_B"]}`, "401 | 204 204 403 204 | 204 204 403 403 204 | 403 403 403 403 404 | 404 404 404 404 | 204"},
	{"PUT", "/v1/nodes/{n}/traits/CUSTOM_B", "", "401 | 204 204 403 204 | 204 204 403 403 204 | 403 403 403 403 404 | 404 404 404 404 | 204"},
	{"DELETE", "/v1/nodes/{n}/traits/CUSTOM_A", "", "401 | 204 204 403 204 | 204 204 403 403 204 | 403 403 403 403 404 | 404 404 404 404 | 204"},
	{"DELETE", "/v1/nodes/{n}/traits", "", "401 | 204 204 403 204 | 204 204 403 403 204 | 403 403 403 403 404 | 404 404 404 404 | 204"},
	// set and clear_maintenance are SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN.
	{"PUT", "/v1/nodes/{n}/maintenance", `{"reason":"r"}`, "401 | 202 202 403 202 | 202 202 202 403 202 | 202 202 403 403 404 | 404 404 404 404 | 202"},
	{"DELETE", "/v1/nodes/{n}/maintenance", "", "401 | 202 202 403 202 | 202 202 202 403 202 | 202 202 403 403 404 | 404 404 404 404 | 202"},
	{"GET", "/v1/nodes/{n}/history", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/nodes/{n}/states", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	// set_power_state is SYSTEM_OR_PROJECT_MEMBER (no PROJECT_SERVICE).
	{"PUT", "/v1/nodes/{n}/states/power", `{"target":"power on"}`, "401 | 202 202 403 202 | 202 202 202 403 403 | 202 202 202 403 404 | 404 404 404 404 | 202"},
	// validate is SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN.
	{"GET", "/v1/nodes/{n}/validate", "", "401 | 200 200 403 200 | 200 200 200 403 200 | 200 200 403 403 404 | 404 404 404 404 | 200"},
	// get_ and set_boot_device are SYSTEM_MEMBER_OR_OWNER_ADMIN: no lessee.
	{"GET", "/v1/nodes/{n}/management/boot_device", "", "401 | 200 200 403 200 | 200 200 403 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"PUT", "/v1/nodes/{n}/management/boot_device", `{"boot_device":"pxe"}`, "401 | 204 204 403 204 | 204 204 403 403 204 | 403 403 403 403 404 | 404 404 404 404 | 204"},
	// set_provision_state is SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN.
	{"PUT", "/v1/nodes/{n}/states/provision", `{"target":"manage"}`, "401 | 202 202 403 202 | 202 202 202 403 202 | 202 202 403 403 404 | 404 404 404 404 | 202"},
	// Arbitrary steps: the rules pass for system members only (the runbook
	// spec), and then the enroll state refuses the transition.
	{"PUT", "/v1/nodes/{n}/states/provision", `{"target":"clean","clean_steps":[{"interface":"power","step":"power_on"}]}`, "401 | 409 409 403 403 | 403 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 409"},
	// deploy_steps are held to the same rule (Anvil's own), whatever the
	// target: a rebuild's firmware step is not a tenant's to run.
	{"PUT", "/v1/nodes/{n}/states/provision", `{"target":"active","deploy_steps":[{"interface":"power","step":"power_on","priority":150}]}`, "401 | 409 409 403 403 | 403 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 409"},
	// anvil:node:recover is the runbook rule's SYSTEM_OR_PROJECT_MEMBER;
	// the fresh node has no failed run, so who may gets the 409.
	{"POST", "/v1/nodes/{n}/recover", `{"action":"notify"}`, "401 | 409 409 403 409 | 409 409 409 403 403 | 409 409 409 403 404 | 404 404 404 404 | 409"},
	{"GET", "/v1/nodes/{n}/steps", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	// bios:get is SYSTEM_OR_PROJECT_READER, as in Ironic; the node has no
	// cached settings, so one setting is a 404 for whoever may see it.
	{"GET", "/v1/nodes/{n}/bios", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/nodes/{n}/bios/BootMode", "", "401 | 404 404 404 404 | 404 404 404 404 404 | 404 404 404 404 404 | 404 404 404 404 | 404"},
	// firmware:get and vmedia:get are SYSTEM_OR_PROJECT_READER, vmedia
	// attach and detach SYSTEM_OR_PROJECT_MEMBER, as in Ironic.
	{"GET", "/v1/nodes/{n}/firmware", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/nodes/{n}/vmedia", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"POST", "/v1/nodes/{n}/vmedia", `{"device_type":"cdrom","image_url":"http://images.example/boot.iso"}`, "401 | 204 204 403 204 | 204 204 204 403 403 | 204 204 204 403 404 | 404 404 404 404 | 204"},
	{"DELETE", "/v1/nodes/{n}/vmedia", "", "401 | 204 204 403 204 | 204 204 204 403 403 | 204 204 204 403 404 | 404 404 404 404 | 204"},
	// set_boot_mode and set_secure_boot are SYSTEM_OR_PROJECT_MEMBER,
	// get_indicator_state SYSTEM_OR_PROJECT_READER, set_indicator_state
	// SYSTEM_MEMBER_OR_OWNER_MEMBER, inject_nmi SYSTEM_MEMBER_OR_OWNER_ADMIN,
	// as in Ironic. The fake machine's settable LED is led@system, as Ironic's fake names it.
	{"PUT", "/v1/nodes/{n}/states/boot_mode", `{"target":"bios"}`, "401 | 202 202 403 202 | 202 202 202 403 403 | 202 202 202 403 404 | 404 404 404 404 | 202"},
	{"PUT", "/v1/nodes/{n}/states/secure_boot", `{"target":true}`, "401 | 202 202 403 202 | 202 202 202 403 403 | 202 202 202 403 404 | 404 404 404 404 | 202"},
	{"GET", "/v1/nodes/{n}/management/indicators", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/nodes/{n}/management/indicators/led@system", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"PUT", "/v1/nodes/{n}/management/indicators/led@system", `{"state":"blinking"}`, "401 | 204 204 403 204 | 204 204 204 403 204 | 403 403 403 403 404 | 404 404 404 404 | 204"},
	{"PUT", "/v1/nodes/{n}/management/inject_nmi", `{}`, "401 | 204 204 403 204 | 204 204 403 403 204 | 403 403 403 403 404 | 404 404 404 404 | 204"},
	// get_console and set_console_state are SYSTEM_MEMBER_OR_OWNER_MEMBER:
	// no lessee, as in Ironic.
	{"GET", "/v1/nodes/{n}/states/console", "", "401 | 200 200 403 200 | 200 200 200 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/nodes/states/console/{n}", "", "401 | 200 200 403 200 | 200 200 200 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	// No screenshot was taken: who may see the console is told so (404),
	// who may see only the node is refused (403).
	{"GET", "/v1/nodes/{n}/screenshot", "", "401 | 404 404 403 404 | 404 404 404 403 404 | 403 403 403 403 404 | 404 404 404 404 | 404"},
	{"PUT", "/v1/nodes/{n}/states/console", `{"enabled":true}`, "401 | 202 202 403 202 | 202 202 202 403 202 | 403 403 403 403 404 | 404 404 404 404 | 202"},
	// conductor:get is SYSTEM_READER, which includes service users.
	{"GET", "/v1/conductors", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	// supported boot devices follow get_boot_device.
	{"GET", "/v1/nodes/{n}/management/boot_device/supported", "", "401 | 200 200 403 200 | 200 200 403 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	// driver:get and its siblings are SYSTEM_READER, service users included.
	{"GET", "/v1/drivers", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	{"GET", "/v1/drivers/ipmi", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	{"GET", "/v1/drivers/ipmi/properties", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	{"GET", "/v1/drivers/ipmi/raid/logical_disk_properties", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	// Per-field node update rules (Ironic's): network_data and retired are
	// SYSTEM_MEMBER_OR_OWNER_MEMBER, *_interface SYSTEM_MEMBER_OR_OWNER_ADMIN,
	// automated_clean false needs disable_cleaning (SYSTEM_ADMIN) too;
	// protected is the generic update, and enroll then refuses it (409).
	{"PATCH", "/v1/nodes/{n}", `[{"op":"add","path":"/network_data","value":{"links":[]}}]`, "401 | 200 200 403 200 | 200 200 200 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"PATCH", "/v1/nodes/{n}", `[{"op":"replace","path":"/retired","value":true}]`, "401 | 200 200 403 200 | 200 200 200 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"PATCH", "/v1/nodes/{n}", `[{"op":"replace","path":"/boot_interface","value":"fake"}]`, "401 | 200 200 403 200 | 200 200 403 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"PATCH", "/v1/nodes/{n}", `[{"op":"replace","path":"/automated_clean","value":false}]`, "401 | 200 403 403 403 | 403 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 403"},
	{"PATCH", "/v1/nodes/{n}", `[{"op":"replace","path":"/protected","value":true}]`, "401 | 409 409 403 409 | 409 409 409 403 403 | 409 409 409 403 404 | 404 404 404 404 | 409"},
	// set_raid_state is SYSTEM_MEMBER_OR_OWNER_MEMBER.
	{"PUT", "/v1/nodes/{n}/states/raid", `{}`, "401 | 204 204 403 204 | 204 204 204 403 204 | 403 403 403 403 404 | 404 404 404 404 | 204"},
	// Anvil's audit log is for people: no service user reads it.
	{"GET", "/v1/events", "", "401 | 200 200 200 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	// Ports, portgroups and VIFs are checked against the node's owner and
	// lessee; {p} is a port on the node, {pg} a portgroup, {vif} a VIF on
	// {p}. get and vif:list are SYSTEM_OR_PROJECT_READER, list API_READER,
	// create and delete SYSTEM_ADMIN_OR_OWNER_ADMIN, update
	// SYSTEM_MEMBER_OR_OWNER_ADMIN, vif attach and detach
	// SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN. A POST checks the create
	// rule on the node it names whoever may see it, as Ironic's does, so a
	// node the caller cannot see is a 403, as a missing one is to a caller
	// the rule refuses (TestPortsHidden).
	{"GET", "/v1/ports", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},
	{"GET", "/v1/ports/{p}", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/nodes/{n}/ports", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"POST", "/v1/ports", `{"node_uuid":"{n}","address":"{mac}"}`, "401 | 201 403 403 201 | 201 201 403 403 201 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	{"PATCH", "/v1/ports/{p}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 200 200 403 200 | 200 200 403 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"DELETE", "/v1/ports/{p}", "", "401 | 204 403 403 204 | 204 204 403 403 204 | 403 403 403 403 404 | 404 404 404 404 | 403"},
	{"GET", "/v1/portgroups", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},
	{"GET", "/v1/portgroups/{pg}", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"POST", "/v1/portgroups", `{"node_uuid":"{n}"}`, "401 | 201 403 403 201 | 201 201 403 403 201 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	{"PATCH", "/v1/portgroups/{pg}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 200 200 403 200 | 200 200 403 403 200 | 403 403 403 403 404 | 404 404 404 404 | 200"},
	{"DELETE", "/v1/portgroups/{pg}", "", "401 | 204 403 403 204 | 204 204 403 403 204 | 403 403 403 403 404 | 404 404 404 404 | 403"},
	{"GET", "/v1/nodes/{n}/vifs", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"POST", "/v1/nodes/{n}/vifs", `{"id":"vif-{i}","port_uuid":"{p}"}`, "401 | 204 204 403 204 | 204 204 204 403 204 | 204 204 403 403 404 | 404 404 404 404 | 204"},
	{"DELETE", "/v1/nodes/{n}/vifs/{vif}", "", "401 | 204 204 403 204 | 204 204 204 403 204 | 204 204 403 403 404 | 404 404 404 404 | 204"},
	{"GET", "/v1", "", "200 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},

	// Chassis and deploy templates are system records: SYSTEM_READER to
	// read, SYSTEM_ADMIN to create or delete, SYSTEM_MEMBER to update a
	// chassis, SYSTEM_ADMIN a template.
	{"GET", "/v1/chassis", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	{"GET", "/v1/chassis/{ch}", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	{"POST", "/v1/chassis", `{"description":"c"}`, "401 | 201 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	{"PATCH", "/v1/chassis/{ch}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 200 200 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	{"DELETE", "/v1/chassis/{ch}", "", "401 | 204 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	// update:chassis_uuid is SYSTEM_ADMIN.
	{"PATCH", "/v1/nodes/{n}", `[{"op":"add","path":"/chassis_uuid","value":"{ch}"}]`, "401 | 200 403 403 403 | 403 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 403"},
	{"GET", "/v1/deploy_templates", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	{"POST", "/v1/deploy_templates", `{"name":"CUSTOM_T{i}","steps":[{"interface":"power","step":"reboot","args":{},"priority":1}]}`, "401 | 201 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	{"PATCH", "/v1/deploy_templates/{dt}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 200 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	{"DELETE", "/v1/deploy_templates/{dt}", "", "401 | 204 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	// Inspection rules are system records as in Ironic: SYSTEM_READER to
	// read, SYSTEM_ADMIN to change. Below 1.96 the version gate answers
	// first: a read 404, a write 405.
	{"GET", "/v1/inspection_rules", "", ifServed(api.VerInspectionRules, "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200", "404")},
	{"GET", "/v1/inspection_rules/{ir}", "", ifServed(api.VerInspectionRules, "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200", "404")},
	{"POST", "/v1/inspection_rules", `{"actions":[{"op":"add-trait","args":{"name":"CUSTOM_R"}}]}`, ifServed(api.VerInspectionRules, "401 | 201 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403", "405")},
	{"PATCH", "/v1/inspection_rules/{ir}", `[{"op":"replace","path":"/priority","value":5}]`, ifServed(api.VerInspectionRules, "401 | 200 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403", "405")},
	{"DELETE", "/v1/inspection_rules/{ir}", "", ifServed(api.VerInspectionRules, "401 | 204 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403", "405")},
	// Volume records follow their node. volume:list is API_READER,
	// filtered to the caller's project; volume:get is SYSTEM_OR_PROJECT_READER.
	{"GET", "/v1/volume/connectors", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},
	{"GET", "/v1/nodes/{n}/volume/targets", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/volume/connectors/{vc}", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	{"GET", "/v1/volume/targets/{vt}", "", "401 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 404 | 404 404 404 404 | 200"},
	// /v1/volume checks volume:get against no node: system readers only.
	{"GET", "/v1/volume", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	// volume:create is SYSTEM_MEMBER_OR_OWNER_LESSEE_ADMIN; a node the
	// caller cannot see is checked as no node at all, so 403, not 404.
	{"POST", "/v1/volume/connectors", `{"node_uuid":"{n}","type":"iqn","connector_id":"iqn.{i}"}`, "401 | 201 201 403 201 | 201 201 403 403 201 | 201 201 403 403 403 | 403 403 403 403 | 201"},
	{"POST", "/v1/volume/targets", `{"node_uuid":"{n}","volume_type":"iscsi","volume_id":"v{i}","boot_index":0}`, "401 | 201 201 403 201 | 201 201 403 403 201 | 201 201 403 403 403 | 403 403 403 403 | 201"},
	// volume:update is SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN; the fresh
	// node's power state is unknown, so an allowed change then meets
	// Ironic's powered-off rule (400).
	{"PATCH", "/v1/volume/connectors/{vc}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 400 400 403 400 | 400 400 400 403 400 | 400 400 403 403 404 | 404 404 404 404 | 400"},
	{"PATCH", "/v1/volume/targets/{vt}", `[{"op":"add","path":"/extra/k","value":"v"}]`, "401 | 400 400 403 400 | 400 400 400 403 400 | 400 400 403 403 404 | 404 404 404 404 | 400"},
	// volume:delete is SYSTEM_MEMBER_OR_OWNER_LESSEE_ADMIN; enroll allows it.
	{"DELETE", "/v1/volume/connectors/{vc}", "", "401 | 204 204 403 204 | 204 204 403 403 204 | 204 204 403 403 404 | 404 404 404 404 | 204"},
	{"DELETE", "/v1/volume/targets/{vt}", "", "401 | 204 204 403 204 | 204 204 403 403 204 | 204 204 403 403 404 | 404 404 404 404 | 204"},
	// vendor_passthru is SYSTEM_ADMIN; no driver has a vendor method.
	{"GET", "/v1/nodes/{n}/vendor_passthru/methods", "", "401 | 200 403 403 403 | 403 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 403"},
	{"POST", "/v1/nodes/{n}/vendor_passthru?method=x", `{}`, "401 | 400 403 403 403 | 403 403 403 403 403 | 403 403 403 403 404 | 404 404 404 404 | 403"},
	{"GET", "/v1/drivers/ipmi/vendor_passthru/methods", "", "401 | 200 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	// Firmware images are Anvil's system records: system readers list
	// them, system admins upload and delete; {fw} is an uploaded image.
	// Downloads need no credentials: BMCs fetch them.
	{"GET", "/v1/anvil/firmware-images", "", "401 | 200 200 200 200 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 200"},
	{"POST", "/v1/anvil/firmware-images?name=rbac-{i}.bin", "image {i}", "401 | 201 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	{"DELETE", "/v1/anvil/firmware-images/{fw}", "", "401 | 204 403 403 403 | 403 403 403 403 403 | 403 403 403 403 403 | 403 403 403 403 | 403"},
	{"GET", "/firmware/{fw}/f.bin", "", "200 | 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 200 | 200 200 200 200 | 200"},
}

// fixtures make, per matrix cell, the records a row's path or body names
// besides the node: {ch} a chassis, {dt} a deploy template, {ir} an
// inspection rule, {vc} and {vt}
// a volume connector and target on the cell's node, {fw} a firmware image.
var fixtures = map[string]func(t *testing.T, admin *servertest.Client, node string, i int) string{
	"{ch}": func(t *testing.T, admin *servertest.Client, _ string, _ int) string {
		return created(t, admin, "/v1/chassis", map[string]any{})
	},
	"{dt}": func(t *testing.T, admin *servertest.Client, _ string, i int) string {
		return created(t, admin, "/v1/deploy_templates", map[string]any{"name": fmt.Sprintf("CUSTOM_F%d", i),
			"steps": []any{map[string]any{"interface": "power", "step": "reboot", "args": map[string]any{}, "priority": 1}}})
	},
	"{ir}": func(t *testing.T, admin *servertest.Client, _ string, i int) string {
		if api.VerMax < api.VerInspectionRules {
			return fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		}
		return created(t, admin, "/v1/inspection_rules", map[string]any{"actions": []any{map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_R"}}}})
	},
	"{vc}": func(t *testing.T, admin *servertest.Client, node string, i int) string {
		return created(t, admin, "/v1/volume/connectors", map[string]any{"node_uuid": node, "type": "wwpn", "connector_id": fmt.Sprintf("f%d", i)})
	},
	"{vt}": func(t *testing.T, admin *servertest.Client, node string, _ int) string {
		return created(t, admin, "/v1/volume/targets", map[string]any{"node_uuid": node, "volume_type": "iscsi", "volume_id": "v", "boot_index": 7})
	},
	"{fw}": func(t *testing.T, admin *servertest.Client, _ string, i int) string {
		r := admin.Do(t, "POST", "/v1/anvil/firmware-images?name=f.bin", fmt.Sprintf("fixture image %d", i))
		mustStatus(t, r, 201)
		return r.JSON(t)["sha256"].(string)
	},
}

// ifServed is want while the advertised maximum reaches need, else the
// version gate's answer, refused (404 for a read, 405 for a write), to
// everyone authenticated.
func ifServed(need api.Version, want, refused string) string {
	if api.VerMax >= need {
		return want
	}
	return "401" + strings.Repeat(" "+refused, len(personas)-1)
}

func created(t *testing.T, admin *servertest.Client, path string, body map[string]any) string {
	t.Helper()
	r := admin.Do(t, "POST", path, body)
	mustStatus(t, r, 201)
	return r.JSON(t)["uuid"].(string)
}

// rbacPortFixtures creates what a port row names on node id: a port for
// {p} or {vif} (the VIF attached to it), a portgroup for {pg}; it returns
// their replacements.
func rbacPortFixtures(t *testing.T, admin *servertest.Client, text, id string, i int) []string {
	t.Helper()
	var rep []string
	if strings.Contains(text, "{p}") || strings.Contains(text, "{vif}") {
		r := admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": fmt.Sprintf("52:54:01:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255)})
		mustStatus(t, r, 201)
		rep = append(rep, "{p}", r.JSON(t)["uuid"].(string))
	}
	if strings.Contains(text, "{vif}") {
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes/"+id+"/vifs", map[string]any{"id": fmt.Sprintf("vif-%d", i)}), 204)
		rep = append(rep, "{vif}", fmt.Sprintf("vif-%d", i))
	}
	if strings.Contains(text, "{pg}") {
		r := admin.Do(t, "POST", "/v1/portgroups", map[string]any{"node_uuid": id})
		mustStatus(t, r, 201)
		rep = append(rep, "{pg}", r.JSON(t)["uuid"].(string))
	}
	return rep
}

// startLocal serves with authentication on and mints one token per
// persona; it returns clients keyed by persona name.
func startLocal(t *testing.T, setting string, opts ...server.Options) (*servertest.Server, map[string]*servertest.Client) {
	t.Helper()
	o := server.Options{}
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Database = setting
	srv := servertest.Start(t, o)
	ctx := context.Background()
	clients := map[string]*servertest.Client{}
	for _, p := range personas {
		c := srv.Client()
		clients[p.name] = c
		if p.role == "" {
			continue
		}
		if err := srv.IDs.CreateUser(ctx, p.name, "password-"+p.name); err != nil {
			t.Fatal(err)
		}
		if err := srv.IDs.Grant(ctx, p.name, identity.Assignment{Scope: p.scope, Role: p.role}); err != nil {
			t.Fatal(err)
		}
		secret, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: p.name, Scope: p.scope, Roles: []string{p.role}})
		if err != nil {
			t.Fatal(err)
		}
		c.Header.Set("X-Auth-Token", secret)
	}
	return srv, clients
}

func TestRBACMatrix(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		i := 0
		for _, row := range matrix {
			want := strings.Fields(strings.ReplaceAll(row.want, "|", ""))
			if len(want) != len(personas) {
				t.Fatalf("%s %s: %d expectations for %d personas", row.method, row.path, len(want), len(personas))
			}
			for col, p := range personas {
				i++
				name := fmt.Sprintf("rbac-%d", i)
				r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "fake", "owner": "own", "lessee": "les"})
				mustStatus(t, r, 201)
				id := r.JSON(t)["uuid"].(string)
				mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_A", nil), 204)
				subst := []string{"{n}", id, "{name}", name, "{i}", strconv.Itoa(i), "{mac}", fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255)}
				subst = append(subst, rbacPortFixtures(t, admin, row.path+row.body, id, i)...)
				for ph, fixture := range fixtures {
					if strings.Contains(row.path+row.body, ph) {
						subst = append(subst, ph, fixture(t, admin, id, i))
					}
				}
				rep := strings.NewReplacer(subst...)
				path := rep.Replace(row.path)
				var body any
				if row.body != "" {
					body = rep.Replace(row.body)
				}
				got := clients[p.name].Do(t, row.method, path, body)
				if strconv.Itoa(got.Status) != want[col] {
					t.Errorf("%s %s as %s: status %d, want %s: %s", row.method, row.path, p.name, got.Status, want[col], got.Body)
				}
			}
		}
	})
}

// TestTenantViews checks what each project sees, not only whether it may
// look: lists hold exactly the owned and leased nodes, and secrets and
// owner-only fields stay hidden from lessees.
func TestTenantViews(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		for _, n := range []map[string]any{
			{"name": "owned", "driver": "ipmi", "owner": "own", "driver_info": map[string]any{"ipmi_address": "192.0.2.1", "ipmi_password": "pw"}},
			{"name": "leased", "driver": "fake", "owner": "x", "lessee": "own"},
			{"name": "both", "driver": "ipmi", "owner": "own", "lessee": "les", "driver_info": map[string]any{"ipmi_address": "192.0.2.2", "ipmi_password": "pw"}},
			{"name": "foreign", "driver": "fake", "owner": "oth"},
		} {
			mustStatus(t, admin.Do(t, "POST", "/v1/nodes", n), 201)
		}
		listNames := func(c *servertest.Client, query string) string {
			r := c.Do(t, "GET", "/v1/nodes"+query, nil)
			mustStatus(t, r, 200)
			var names []string
			for _, n := range r.JSON(t)["nodes"].([]any) {
				names = append(names, n.(map[string]any)["name"].(string))
			}
			return strings.Join(names, ",")
		}
		for persona, want := range map[string]string{
			"system-reader": "owned,leased,both,foreign",
			"owner-reader":  "owned,leased,both",
			"lessee-member": "both",
			"other-admin":   "foreign",
		} {
			if got := listNames(clients[persona], "?sort_key=created_at"); got != want {
				t.Errorf("%s lists %q, want %q", persona, got, want)
			}
		}
		if got := listNames(clients["owner-reader"], "?owner=own&sort_key=created_at"); got != "owned,both" {
			t.Errorf("owner filter lists %q", got)
		}
		mustStatus(t, clients["owner-reader"].Do(t, "GET", "/v1/nodes?owner=oth", nil), 403)

		owner := clients["owner-reader"].Do(t, "GET", "/v1/nodes/both", nil).JSON(t)
		if di := owner["driver_info"].(map[string]any); di["ipmi_password"] != "******" || di["ipmi_address"] != "192.0.2.2" {
			t.Errorf("owner sees driver_info %v", di)
		}
		if owner["reservation"] != nil || owner["driver_internal_info"] == nil || owner["driver_internal_info"].(map[string]any)["content"] != nil {
			t.Errorf("owner reader sees reservation %v, driver_internal_info %v", owner["reservation"], owner["driver_internal_info"])
		}
		// A lessee's admin sees what Ironic shows a caller without the
		// baremetal:node:get:* rules: the sentences node_sanitize writes in
		// place of the values, dict fields as a dict with one "content" key.
		lessee := clients["lessee-admin"].Do(t, "GET", "/v1/nodes/both", nil).JSON(t)
		for field, want := range map[string]any{
			"driver_info":          map[string]any{"content": "** Redacted - requires baremetal:node:get:driver_info permission. **"},
			"driver_internal_info": map[string]any{"content": "** Redacted - Requires baremetal:node:get:driver_internal_info permission. **"},
			"reservation":          "** Redacted - requires baremetal:node:get:reservation permission. **",
			"last_error":           nil, // the lessee spec grants last_error to lessees
		} {
			if got := lessee[field]; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("lessee admin sees %s = %#v, want %#v", field, got, want)
			}
		}
	})
}

func TestAuthentication(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, clients := startLocal(t, setting)
		ctx := context.Background()
		basic := func(user, pw string) *servertest.Client {
			c := srv.Client()
			c.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pw)))
			return c
		}
		mustStatus(t, basic("owner-member", "password-owner-member").Do(t, "GET", "/v1/nodes", nil), 200)
		r := basic("owner-member", "wrong-password").Do(t, "GET", "/v1/nodes", nil)
		mustStatus(t, r, 401)
		if f := r.Fault(t); !strings.Contains(f, "invalid username or password") {
			t.Errorf("bad password fault %q", f)
		}
		if r.Header.Get("WWW-Authenticate") == "" {
			t.Error("401 without WWW-Authenticate")
		}
		if f := basic("nobody", "wrong-password").Do(t, "GET", "/v1/nodes", nil).Fault(t); f != r.Fault(t) {
			t.Errorf("unknown user and wrong password answer differently: %q vs %q", f, r.Fault(t))
		}
		for _, h := range []string{"anvil_forged", "Bearer anvil_forged", "Bearer e30.e30.sig", "Digest x"} {
			c := srv.Client()
			if strings.HasPrefix(h, "anvil_") {
				c.Header.Set("X-Auth-Token", h)
			} else {
				c.Header.Set("Authorization", h)
			}
			mustStatus(t, c.Do(t, "GET", "/v1/nodes", nil), 401)
		}

		// A token works as Bearer too, and stops working once revoked or
		// once its user loses the role it carries.
		secret, info, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "owner-manager", Scope: identity.Scope{Project: "own"}, Roles: []string{"member"}})
		if err != nil {
			t.Fatal(err)
		}
		bearer := srv.Client()
		bearer.Header.Set("Authorization", "Bearer "+secret)
		mustStatus(t, bearer.Do(t, "GET", "/v1/nodes", nil), 200)
		if err := srv.IDs.RevokeToken(ctx, info.UUID, ""); err != nil {
			t.Fatal(err)
		}
		mustStatus(t, bearer.Do(t, "GET", "/v1/nodes", nil), 401)
		if err := srv.IDs.Revoke(ctx, "owner-reader", identity.Assignment{Scope: identity.Scope{Project: "own"}, Role: "reader"}); err != nil {
			t.Fatal(err)
		}
		mustStatus(t, clients["owner-reader"].Do(t, "GET", "/v1/nodes", nil), 401)

		// A token cannot carry a role its user does not hold.
		if _, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "owner-member", Scope: identity.Scope{Project: "own"}, Roles: []string{"admin"}}); err == nil {
			t.Error("minted a token with a role the user does not hold")
		}

		// Throttling: after five failures the right password is refused too.
		for range 5 {
			basic("lessee-reader", "wrong-password").Do(t, "GET", "/v1/nodes", nil)
		}
		mustStatus(t, basic("lessee-reader", "password-lessee-reader").Do(t, "GET", "/v1/nodes", nil), 429)

		// Audit rows exist for denials and mutations, with who did them.
		mustStatus(t, clients["system-admin"].Do(t, "POST", "/v1/nodes", map[string]any{"name": "audited", "driver": "fake", "owner": "own"}), 201)
		mustStatus(t, clients["other-admin"].Do(t, "GET", "/v1/nodes/audited", nil), 404)
		for query, wantUser := range map[string]string{
			"?result=denied&user=other-admin":            "other-admin",
			"?rule=baremetal:node:create&result=allowed": "system-admin",
			"?rule=anvil:token:revoke":                   "",
		} {
			r = clients["system-reader"].Do(t, "GET", "/v1/events"+query, nil)
			mustStatus(t, r, 200)
			evs := r.JSON(t)["events"].([]any)
			if len(evs) == 0 {
				t.Errorf("no audit events for %s", query)
				continue
			}
			if u := evs[0].(map[string]any)["user"]; wantUser != "" && u != wantUser {
				t.Errorf("audit %s: user %v, want %s", query, u, wantUser)
			}
		}
	})
}

// TestServiceProjectSetting: --service-project reaches the policy. With it
// set to "automation", that project's service users act as system readers
// and members (rule:service_role), and the default project's no longer do.
func TestServiceProjectSetting(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, clients := startLocal(t, setting, server.Options{ServiceProject: "automation"})
		ctx := context.Background()
		if err := srv.IDs.CreateUser(ctx, "metal3", "password-metal3"); err != nil {
			t.Fatal(err)
		}
		auto := identity.Scope{Project: "automation"}
		if err := srv.IDs.Grant(ctx, "metal3", identity.Assignment{Scope: auto, Role: "service"}); err != nil {
			t.Fatal(err)
		}
		secret, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "metal3", Scope: auto, Roles: []string{"service"}})
		if err != nil {
			t.Fatal(err)
		}
		metal3 := srv.Client()
		metal3.Header.Set("X-Auth-Token", secret)

		mustStatus(t, clients["system-admin"].Do(t, "POST", "/v1/nodes", map[string]any{"name": "foreign", "driver": "fake", "owner": "oth"}), 201)
		mustStatus(t, metal3.Do(t, "GET", "/v1/nodes/foreign", nil), 200)
		mustStatus(t, metal3.Do(t, "PATCH", "/v1/nodes/foreign", []map[string]any{{"op": "replace", "path": "/owner", "value": "own"}}), 200)
		mustStatus(t, metal3.Do(t, "GET", "/v1/conductors", nil), 200)
		mustStatus(t, clients["service-project-service"].Do(t, "GET", "/v1/nodes/foreign", nil), 404)
		mustStatus(t, clients["service-project-service"].Do(t, "GET", "/v1/conductors", nil), 403)
	})
}
