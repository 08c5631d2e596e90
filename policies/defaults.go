package policies

// Rule is one named policy rule with its default check string.
type Rule struct {
	Name        string
	Check       string
	Scopes      []string // "system", "project"; empty for base rules other rules refer to
	Description string
	Operations  []string // "METHOD /path" the rule guards, for the sample file
}

// Named building blocks, as Ironic defines them, so operators' override
// files can say rule:system_member exactly as they would for Ironic.
// Ironic folds rule:service_role (a service user of the elevated service
// project) into system member and reader, and system-scoped service users
// into system reader, because the service role implies no other.
const (
	systemAdmin  = "role:admin and system_scope:all"
	systemMember = "(role:member and system_scope:all) or rule:service_role"
	systemReader = "(role:reader and system_scope:all) or (role:service and system_scope:all) or rule:service_role"
)

var (
	sys      = []string{"system"}
	sysProj  = []string{"system", "project"}
	baseRule = []string(nil)
)

// Defaults returns the default rule table. Where Anvil's defaults differ
// from Ironic's they follow the specifications in ../shared/specs and say
// so in the description.
func Defaults() []Rule {
	return []Rule{
		// Base rules.
		{"system_admin", systemAdmin, baseRule, "System-scoped admin.", nil},
		{"system_member", systemMember, baseRule, "System-scoped member (or stronger).", nil},
		{"system_reader", systemReader, baseRule, "System-scoped reader (or stronger).", nil},
		{"service_role", "role:service and project_name:%(config.service_project_name)s", baseRule, "A service user of the elevated service project (--service-project).", nil},
		{"system_service", "role:service and system_scope:all", baseRule, "A system-scoped service user.", nil},
		{"project_service", "role:service and project_id:%(node.owner)s", baseRule, "A service user of the node's owner project.", nil},
		{"is_node_owner", "project_id:%(node.owner)s", baseRule, "The caller's project owns the node.", nil},
		{"is_node_lessee", "project_id:%(node.lessee)s", baseRule, "The caller's project leases the node.", nil},
		{"project_reader", "role:reader and (rule:is_node_owner or rule:is_node_lessee)", baseRule, "Reader of the owner or lessee project.", nil},
		{"owner_reader", "role:reader and rule:is_node_owner", baseRule, "Reader of the owner project.", nil},
		{"owner_member", "role:member and rule:is_node_owner", baseRule, "Member of the owner project.", nil},
		{"owner_manager", "role:manager and rule:is_node_owner", baseRule, "Manager of the owner project.", nil},
		{"owner_admin", "role:admin and rule:is_node_owner", baseRule, "Admin of the owner project.", nil},
		{"lessee_member", "role:member and rule:is_node_lessee", baseRule, "Member of the lessee project.", nil},
		{"lessee_manager", "role:manager and rule:is_node_lessee", baseRule, "Manager of the lessee project.", nil},
		{"lessee_admin", "role:admin and rule:is_node_lessee", baseRule, "Admin of the lessee project.", nil},
		{"system_or_project_reader", "rule:system_reader or rule:project_reader or rule:project_service", baseRule, "Anyone who may see the node (Ironic's SYSTEM_OR_PROJECT_READER).", nil},
		{"system_or_owner_reader", "rule:system_reader or rule:system_service or rule:owner_reader or rule:project_service", baseRule, "System readers and the owner's readers (SYSTEM_OR_OWNER_READER).", nil},
		{"system_member_or_owner_admin", "rule:system_member or rule:system_service or rule:owner_admin or rule:owner_manager or rule:project_service", baseRule, "System members and the owner's admins and managers (SYSTEM_MEMBER_OR_OWNER_ADMIN).", nil},
		{"system_member_or_owner_member", "rule:system_member or rule:system_service or rule:owner_member or rule:project_service", baseRule, "System members and the owner's members (SYSTEM_MEMBER_OR_OWNER_MEMBER).", nil},
		{"system_or_owner_member_and_lessee_admin", "rule:system_member or rule:system_service or rule:owner_member or rule:lessee_admin or rule:lessee_manager or rule:project_service", baseRule, "System members, owner members and lessee admins and managers (SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN).", nil},
		{"system_or_owner_or_lessee_member", "rule:system_member or rule:owner_member or rule:lessee_member or rule:system_service", baseRule, "System members and members of the owner or lessee project (SYSTEM_OR_PROJECT_MEMBER).", nil},

		// Nodes.
		{"baremetal:node:create", "rule:system_admin or rule:system_service", sysProj, "Create a node.", []string{"POST /v1/nodes"}},
		{"baremetal:node:create:self_owned_node", "role:admin or role:service", sysProj, "Create a node owned by the caller's own project (the node's owner is always the caller's project).", []string{"POST /v1/nodes"}},
		{"baremetal:node:list", "role:reader or role:service", sysProj, "List the nodes the caller's project owns or leases.", []string{"GET /v1/nodes", "GET /v1/nodes/detail"}},
		{"baremetal:node:list_all", "rule:system_reader", sysProj, "List every node.", []string{"GET /v1/nodes", "GET /v1/nodes/detail"}},
		{"baremetal:node:get", "rule:system_or_project_reader", sysProj, "Show a node.", []string{"GET /v1/nodes/{node}"}},
		{"baremetal:node:get:driver_info", "rule:system_or_owner_reader", sysProj, "See driver_info (secrets are always masked).", []string{"GET /v1/nodes/{node}"}},
		{"baremetal:node:get:driver_internal_info", "rule:system_or_owner_reader", sysProj, "See driver_internal_info.", []string{"GET /v1/nodes/{node}"}},
		{"baremetal:node:get:reservation", "rule:system_or_owner_reader", sysProj, "See which conductor holds the node's lock.", []string{"GET /v1/nodes/{node}"}},
		{"baremetal:node:get:last_error", "rule:system_or_project_reader", sysProj, "See last_error. Ironic limits this to owners (rule:system_or_owner_reader); lessees need it to act on failed runbooks, and read it with BMC addresses scrubbed.", []string{"GET /v1/nodes/{node}"}},
		{"baremetal:node:update", "rule:system_or_owner_or_lessee_member", sysProj, "Update node fields not covered by a narrower rule.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:driver_info", "rule:system_member_or_owner_member", sysProj, "Update driver or driver_info.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:properties", "rule:system_member_or_owner_member", sysProj, "Update properties.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:name", "rule:system_member_or_owner_member", sysProj, "Rename a node.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:owner", "rule:system_member", sysProj, "Change a node's owner.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:conductor_group", "rule:system_member", sysProj, "Move a node to another conductor group.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:lessee", "rule:system_member_or_owner_member", sysProj, "Change a node's lessee. A lessee can never re-lease the node.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:driver_interfaces", "rule:system_member_or_owner_admin", sysProj, "Change the driver or a *_interface field.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update_extra", "rule:system_or_owner_or_lessee_member", sysProj, "Update extra.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update_instance_info", "rule:system_or_owner_member_and_lessee_admin", sysProj, "Update instance_info.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:instance_uuid", "rule:system_member_or_owner_member", sysProj, "Set or clear instance_uuid.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update_owner_provisioned", "rule:system_admin", sys, "Change the owner of a provisioned (active) node.", []string{"PATCH /v1/nodes/{node}"}},
		// Per-field node update rules, with Ironic's defaults.
		{"baremetal:node:update:network_data", "rule:system_member_or_owner_member", sysProj, "Update network_data.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:retired", "rule:system_member_or_owner_member", sysProj, "Set or clear retired and retired_reason.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:shard", "rule:system_admin", sysProj, "Move a node to another shard.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:parent_node", "rule:system_member", sysProj, "Set or clear a node's parent node.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:update:disable_power_off", "rule:system_admin", sysProj, "Set or clear disable_power_off.", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:disable_cleaning", "rule:system_admin", sysProj, "Turn automated cleaning off (automated_clean false).", []string{"PATCH /v1/nodes/{node}"}},
		{"baremetal:node:set_raid_state", "rule:system_member_or_owner_member", sysProj, "Set the target RAID configuration.", []string{"PUT /v1/nodes/{node}/states/raid"}},
		{"baremetal:node:delete", "rule:system_admin", sysProj, "Delete a node.", []string{"DELETE /v1/nodes/{node}"}},
		{"baremetal:node:delete:self_owned_node", "role:admin and project_id:%(node.owner)s", sysProj, "Delete a node the caller's project owns.", []string{"DELETE /v1/nodes/{node}"}},
		{"baremetal:node:set_maintenance", "rule:system_or_owner_member_and_lessee_admin", sysProj, "Put a node in maintenance.", []string{"PUT /v1/nodes/{node}/maintenance"}},
		{"baremetal:node:clear_maintenance", "rule:system_or_owner_member_and_lessee_admin", sysProj, "Take a node out of maintenance.", []string{"DELETE /v1/nodes/{node}/maintenance"}},
		{"baremetal:node:traits:list", "rule:system_or_project_reader", sysProj, "List a node's traits.", []string{"GET /v1/nodes/{node}/traits"}},
		{"baremetal:node:traits:set", "rule:system_member_or_owner_admin", sysProj, "Add or replace a node's traits.", []string{"PUT /v1/nodes/{node}/traits", "PUT /v1/nodes/{node}/traits/{trait}"}},
		{"baremetal:node:traits:delete", "rule:system_member_or_owner_admin", sysProj, "Remove a node's traits.", []string{"DELETE /v1/nodes/{node}/traits", "DELETE /v1/nodes/{node}/traits/{trait}"}},
		{"baremetal:node:history:get", "rule:system_or_project_reader", sysProj, "Read a node's event history. Ironic limits this to owners (rule:system_or_owner_reader); lessees see what happened to nodes they lease, with BMC addresses scrubbed.", []string{"GET /v1/nodes/{node}/history"}},

		// Hardware and the state machine.
		{"baremetal:node:get_states", "rule:system_or_project_reader", sysProj, "Read a node's power and provision states.", []string{"GET /v1/nodes/{node}/states"}},
		{"baremetal:node:set_power_state", "rule:system_or_owner_or_lessee_member", sysProj, "Power a node on, off or reboot it: system members, and members of the owner or lessee project.", []string{"PUT /v1/nodes/{node}/states/power"}},
		{"baremetal:node:get_boot_device", "rule:system_member_or_owner_admin", sysProj, "Read the next boot device.", []string{"GET /v1/nodes/{node}/management/boot_device"}},
		{"baremetal:node:set_boot_device", "rule:system_member_or_owner_admin", sysProj, "Set the next boot device.", []string{"PUT /v1/nodes/{node}/management/boot_device"}},
		// Boot mode, indicators and NMI (API 1.76, 1.63, 1.29), as Ironic.
		{"baremetal:node:set_boot_mode", "rule:system_or_owner_or_lessee_member", sysProj, "Change a node's boot mode.", []string{"PUT /v1/nodes/{node}/states/boot_mode"}},
		{"baremetal:node:set_secure_boot", "rule:system_or_owner_or_lessee_member", sysProj, "Turn a node's UEFI secure boot on or off.", []string{"PUT /v1/nodes/{node}/states/secure_boot"}},
		{"baremetal:node:get_indicator_state", "rule:system_or_project_reader", sysProj, "Read a node's indicators and their states.", []string{"GET /v1/nodes/{node}/management/indicators", "GET /v1/nodes/{node}/management/indicators/{indicator}"}},
		{"baremetal:node:set_indicator_state", "rule:system_member_or_owner_member", sysProj, "Change a node's indicator state.", []string{"PUT /v1/nodes/{node}/management/indicators/{indicator}"}},
		// Console (API 1.1), as Ironic.
		{"baremetal:node:get_console", "rule:system_member_or_owner_member", sysProj, "Get Node console connection information, open the portal's console, and see the console screenshot management.screenshot took.", []string{"GET /v1/nodes/{node}/states/console", "GET /v1/nodes/{node}/screenshot"}},
		{"baremetal:node:set_console_state", "rule:system_member_or_owner_member", sysProj, "Change Node console status.", []string{"PUT /v1/nodes/{node}/states/console"}},
		{"baremetal:node:inject_nmi", "rule:system_member_or_owner_admin", sysProj, "Inject an NMI into a node.", []string{"PUT /v1/nodes/{node}/management/inject_nmi"}},
		{"baremetal:node:inventory:get", "rule:system_or_owner_reader", sysProj, "Read the hardware inventory the last inspection found.", []string{"GET /v1/nodes/{node}/inventory"}},
		{"baremetal:node:bios:get", "rule:system_or_project_reader", sysProj, "Read a node's cached BIOS settings.", []string{"GET /v1/nodes/{node}/bios", "GET /v1/nodes/{node}/bios/{setting}"}},
		// Firmware and virtual media (API 1.86, 1.89, 1.93), as Ironic.
		{"baremetal:node:firmware:get", "rule:system_or_project_reader", sysProj, "Read a node's firmware components.", []string{"GET /v1/nodes/{node}/firmware"}},
		{"baremetal:node:vmedia:attach", "rule:system_or_owner_or_lessee_member", sysProj, "Attach a virtual media device to a node.", []string{"POST /v1/nodes/{node}/vmedia"}},
		{"baremetal:node:vmedia:detach", "rule:system_or_owner_or_lessee_member", sysProj, "Detach a virtual media device from a node.", []string{"DELETE /v1/nodes/{node}/vmedia"}},
		{"baremetal:node:vmedia:get", "rule:system_or_project_reader", sysProj, "Read a node's virtual media devices from its BMC.", []string{"GET /v1/nodes/{node}/vmedia"}},
		{"baremetal:node:validate", "rule:system_or_owner_member_and_lessee_admin", sysProj, "Check a node's driver settings per interface, without contacting its BMC.", []string{"GET /v1/nodes/{node}/validate"}},
		{"baremetal:node:set_provision_state", "rule:system_or_owner_member_and_lessee_admin", sysProj, "Change a node's provision state (manage, provide, adopt, clean, service, abort, unhold, active/deploy, rebuild, deleted/undeploy).", []string{"PUT /v1/nodes/{node}/states/provision"}},
		{"baremetal:node:set_provision_state:clean_steps", "rule:system_member", sysProj, "Clean with arbitrary, explicit steps. Ironic allows owner members and lessee admins; the runbook spec forbids projects explicit steps: they use runbooks.", []string{"PUT /v1/nodes/{node}/states/provision"}},
		{"baremetal:node:set_provision_state:service_steps", "rule:system_member", sysProj, "Service with arbitrary, explicit steps. Ironic allows owner members and lessee admins; the runbook spec forbids projects explicit steps: they use runbooks.", []string{"PUT /v1/nodes/{node}/states/provision"}},
		{"baremetal:node:set_provision_state:deploy_steps", "rule:system_member", sysProj, "Deploy or rebuild with explicit deploy_steps. Anvil's own (Ironic checks deploy_steps under set_provision_state alone): a deploy step runs any step of the catalogue, firmware and BIOS included, so it is held to the clean and service steps' rule; projects deploy without extra steps, or run steps through runbooks.", []string{"PUT /v1/nodes/{node}/states/provision"}},
		{"baremetal:conductor:get", "rule:system_reader", sys, "List conductors.", []string{"GET /v1/conductors"}},
		{"baremetal:driver:ipa_lookup", "", sysProj, "The ramdisk agent's node lookup, which needs no authentication; anyone, as Ironic (only a node in a state that expects an agent answers).", []string{"GET /v1/lookup"}},
		{"baremetal:node:ipa_heartbeat", "", sysProj, "The ramdisk agent's heartbeat, which needs no authentication; anyone, as Ironic (the node's agent token is required).", []string{"POST /v1/heartbeat/{node_ident}"}},
		{"baremetal:driver:ipa_continue_inspection", "", sysProj, "The inspection ramdisk's callback, which needs no authentication; anyone, as Ironic.", []string{"POST /v1/continue_inspection"}},
		{"baremetal:shards:get", "rule:system_reader", sysProj, "List shards with their node counts.", []string{"GET /v1/shards"}},

		{"baremetal:node:set_provision_state:runbook", "rule:system_or_owner_or_lessee_member", sysProj, "Clean or service a node with a runbook. Owner and lessee members may, as the self-service runbook spec's persona table says.", []string{"PUT /v1/nodes/{node}/states/provision"}},

		// Runbooks.
		{"is_runbook_owner", "project_id:%(runbook.owner)s", baseRule, "The caller's project owns the runbook.", nil},
		{"is_runbook_public", "'True':%(runbook.public)s", baseRule, "The runbook is public.", nil},
		{"baremetal:runbook:get", "rule:system_reader or (role:reader and (rule:is_runbook_owner or rule:is_runbook_public)) or role:service", sysProj, "Show a runbook: system readers, service users, and project readers for public and own-project runbooks (Ironic shows project readers their own only; the runbook spec lets them see public ones).", []string{"GET /v1/runbooks/{runbook}"}},
		{"baremetal:runbook:list", "role:reader or role:service", sysProj, "List runbooks (a project sees public and its own).", []string{"GET /v1/runbooks"}},
		{"baremetal:runbook:list_all", "rule:system_reader", sysProj, "List every runbook.", []string{"GET /v1/runbooks"}},
		{"baremetal:runbook:create", "rule:system_member or (role:manager and rule:is_runbook_owner) or role:service", sysProj, "Create a runbook: system members, and project managers for their project.", []string{"POST /v1/runbooks"}},
		{"baremetal:runbook:update", "rule:system_member or (role:manager and rule:is_runbook_owner) or role:service", sysProj, "Update a runbook.", []string{"PATCH /v1/runbooks/{runbook}"}},
		{"baremetal:runbook:delete", "rule:system_member or (role:manager and rule:is_runbook_owner) or role:service", sysProj, "Delete a runbook.", []string{"DELETE /v1/runbooks/{runbook}"}},
		{"baremetal:runbook:update:public", "rule:system_member", sysProj, "Publish or unpublish a runbook.", []string{"POST /v1/runbooks", "PATCH /v1/runbooks/{runbook}"}},
		{"baremetal:runbook:update:owner", "rule:system_member", sysProj, "Choose a runbook's owner.", []string{"POST /v1/runbooks", "PATCH /v1/runbooks/{runbook}"}},
		{"baremetal:runbook:use", "rule:system_member or (role:member and (rule:is_runbook_owner or rule:is_runbook_public)) or role:service", sysProj, "Run a runbook. Ironic asks for a manager of the owner project; the runbook spec lets members run public and own-project runbooks.", []string{"PUT /v1/nodes/{node}/states/provision"}},

		// Allocations.
		// Wipe records (an Anvil extension, issue #40): what automated
		// cleaning did to a node's disks between tenants. The record keeps
		// the node's owner and lessee and the released allocation's owner
		// as they were at the wipe (checked as node.owner, node.lessee and
		// allocation.owner), so a lessee reads it after its lease ended and
		// it no longer sees the node.
		{"baremetal:wipe_record:get", "rule:system_reader or (role:reader and (rule:is_node_owner or rule:is_node_lessee or project_id:%(allocation.owner)s))", sysProj, "Show and list wipe records: system readers all, readers of the node's owner or lessee at the wipe, and of the project whose allocation the wipe followed. Anvil's own; Ironic keeps no wipe records.", []string{"GET /v1/wipe_records", "GET /v1/wipe_records/{record}"}},
		// Leasing (issue 43): ESI-Leap's rule names, its roles mapped onto
		// Anvil's personas: system scope is ESI-Leap's admin, a node
		// owner's members offer and lease it, a lessee's members claim and
		// sub-lease within their lease, readers read. Which offers, leases
		// and events a project sees is filtered in SQL besides.
		{"is_offer_owner", "project_id:%(offer.project_id)s", baseRule, "The caller's project made the offer.", nil},
		{"is_lease_owner", "project_id:%(lease.owner_id)s", baseRule, "The caller's project let the lease (its owner_id).", nil},
		{"is_lease_lessee", "project_id:%(lease.project_id)s", baseRule, "The caller's project holds the lease (its project_id).", nil},
		{"esi_leap:offer:offer_admin", "rule:system_reader", sysProj, "See every offer and event, not only those made, addressed or open to the caller's project.", []string{"GET /leasing/v1/offers", "GET /leasing/v1/events"}},
		{"esi_leap:offer:create", "rule:system_member or (role:member and rule:is_node_owner) or (role:member and rule:is_node_lessee)", sysProj, "Offer a node: system members any, the owner's members theirs, a lessee's members within their active lease (a sub-lease offer).", []string{"POST /leasing/v1/offers"}},
		{"esi_leap:offer:get", "rule:system_reader or role:reader", sysProj, "Show and list offers: a project sees those it made, those addressed to it and those open to every project.", []string{"GET /leasing/v1/offers", "GET /leasing/v1/offers/{offer}"}},
		{"esi_leap:offer:delete", "rule:system_member or (role:member and rule:is_offer_owner)", sysProj, "Withdraw an offer, cancelling its leases.", []string{"DELETE /leasing/v1/offers/{offer}"}},
		{"esi_leap:offer:claim", "rule:system_member or role:member", sysProj, "Claim an offer the caller's project sees, for part or all of its window.", []string{"POST /leasing/v1/offers/{offer}/claim"}},
		{"esi_leap:lease:lease_admin", "rule:system_reader", sysProj, "List every lease (view=all) and other projects' leases by project_id or owner_id.", []string{"GET /leasing/v1/leases"}},
		{"esi_leap:lease:create", "rule:system_member or (role:member and rule:is_node_owner) or (role:member and rule:is_node_lessee)", sysProj, "Lease a node to a project directly, without an offer: the owner's members, or a lessee's members within their active lease (a sub-lease).", []string{"POST /leasing/v1/leases"}},
		{"esi_leap:lease:get", "rule:system_reader or (role:reader and (rule:is_lease_owner or rule:is_lease_lessee))", sysProj, "Show and list leases: the lessee's and the owner's readers.", []string{"GET /leasing/v1/leases", "GET /leasing/v1/leases/{lease}"}},
		{"esi_leap:lease:update", "rule:system_member or (role:member and (rule:is_lease_owner or rule:is_lease_lessee))", sysProj, "Move a lease's end (extend within its offer or parent lease, or shorten). ESI-Leap lets only its admin; Anvil lets the lessee extend what the offer allows.", []string{"PATCH /leasing/v1/leases/{lease}"}},
		{"esi_leap:lease:delete", "rule:system_member or (role:member and (rule:is_lease_owner or rule:is_lease_lessee))", sysProj, "Cancel a lease: the lessee returns the node or the owner takes it back; the node is torn down and wiped.", []string{"DELETE /leasing/v1/leases/{lease}"}},
		{"esi_leap:node:get_all", "rule:system_reader or role:reader", sysProj, "List nodes with their offers and leases: the nodes the caller's project owns or leases.", []string{"GET /leasing/v1/nodes"}},
		{"esi_leap:event:get_all", "rule:system_reader or role:reader", sysProj, "List lease and offer events naming the caller's project as lessee or owner.", []string{"GET /leasing/v1/events"}},

		// The inbox and "Ask the owner" threads (portal only; no API).
		{"anvil:inbox:get", "rule:system_reader or role:reader", sysProj, "Read the inbox of the caller's scope: its project's notices (leases starting and ending, nodes wiped after their tenant, claims on its offers, requests to look at its nodes), or the operators' for system scope, and mark them read. Anvil's own; e-mail of them goes to the addresses a project manager (or a system admin, for the operators') sets with anvil:inbox:mail.", nil},
		{"anvil:inbox:mail", "rule:system_admin or role:manager", sysProj, "Set the e-mail addresses the caller's scope's notices are mailed to (through the operator's SMTP relay, when one is configured).", nil},
		{"anvil:thread:get", "rule:system_reader or (role:reader and (project_id:%(thread.owner)s or project_id:%(thread.asker)s))", sysProj, "Read a request to look at a node: the asking project's and the asked (owner) project's readers, and system readers.", nil},
		{"anvil:thread:reply", "rule:system_member or (role:member and (project_id:%(thread.owner)s or project_id:%(thread.asker)s))", sysProj, "Answer a request to look at a node: members of the asking and the asked project, and system members.", nil},
		{"anvil:thread:close", "rule:system_member or (role:member and project_id:%(thread.owner)s)", sysProj, "Close a request to look at a node: the asked (owner) project's members, and system members, as the one who was asked decides when it is handled.", nil},

		// Campaigns (an Anvil extension, issue #29): a runbook rolled over
		// many nodes. The rules mirror runbooks': creating and steering one
		// is running the runbook (runbook:use's members), deleting and
		// approving are a manager's, as runbook:update and delete are.
		{"is_campaign_owner", "project_id:%(campaign.owner)s", baseRule, "The caller's project created the campaign.", nil},
		{"baremetal:campaign:get", "rule:system_reader or (role:reader and rule:is_campaign_owner) or (role:service and rule:is_campaign_owner) or (role:reader and rule:is_node_owner)", sysProj, "Show and list campaigns: system readers all, project readers their project's, and a node owner's readers the campaigns that asked for its approval (checked with that owner as node.owner). Anvil's own; Ironic has no campaigns.", []string{"GET /v1/campaigns", "GET /v1/campaigns/{campaign}", "GET /v1/campaigns/{campaign}/nodes"}},
		{"baremetal:campaign:create", "rule:system_member or (role:member and rule:is_campaign_owner) or (role:service and rule:is_campaign_owner)", sysProj, "Roll a runbook over many nodes: those who may run runbooks (each node is checked against the node and runbook rules too).", []string{"POST /v1/campaigns"}},
		{"baremetal:campaign:update", "rule:system_member or (role:member and rule:is_campaign_owner) or (role:service and rule:is_campaign_owner)", sysProj, "Pause, resume or cancel a campaign.", []string{"PUT /v1/campaigns/{campaign}/state"}},
		{"baremetal:campaign:approve", "rule:system_member or (role:manager and rule:is_campaign_owner) or (role:manager and rule:is_node_owner)", sysProj, "Approve a campaign that requires approval: system members, and the creating project's managers; for the approval a node owner's policy asked of a lessee's campaign (checked with that owner as node.owner), the owner's managers.", []string{"POST /v1/campaigns/{campaign}/approve"}},
		{"baremetal:campaign:approve:own", "!", sysProj, "Approve a campaign one created oneself, besides passing baremetal:campaign:approve. Nobody by default: approval is a second pair of eyes. A single-operator site sets it to \"@\" (or a rule naming who may).", []string{"POST /v1/campaigns/{campaign}/approve"}},
		{"baremetal:campaign:owner_approval", "!", sysProj, "Checked as a campaign's creator with each node it names as target, when the creator's project does not own the node: passing, the node's owner must approve the campaign before it starts. Nobody by default; for example \"'own':%(node.owner)s\" makes project own approve its lessees' campaigns.", []string{"POST /v1/campaigns"}},
		{"baremetal:campaign:delete", "rule:system_member or (role:manager and rule:is_campaign_owner) or (role:service and rule:is_campaign_owner)", sysProj, "Delete a finished campaign's record.", []string{"DELETE /v1/campaigns/{campaign}"}},
		{"is_allocation_owner", "project_id:%(allocation.owner)s", baseRule, "The caller's project owns the allocation.", nil},
		{"baremetal:allocation:get", "rule:system_reader or (role:reader and rule:is_allocation_owner)", sysProj, "Show an allocation.", []string{"GET /v1/allocations/{allocation}", "GET /v1/nodes/{node}/allocation"}},
		{"baremetal:allocation:list", "role:reader or role:service", sysProj, "List allocations (a project sees its own).", []string{"GET /v1/allocations"}},
		{"baremetal:allocation:list_all", "rule:system_reader", sysProj, "List every allocation.", []string{"GET /v1/allocations"}},
		{"baremetal:allocation:create", "rule:system_member", sysProj, "Allocate a node for any owner, or none. Ironic master lets any member pass this and restricts the owner with create_restricted; Anvil keeps the node owner spec's meaning of the two rules.", []string{"POST /v1/allocations"}},
		{"baremetal:allocation:create_restricted", "role:member and rule:is_allocation_owner", sysProj, "Allocate, for the caller's own project, a node it owns or leases.", []string{"POST /v1/allocations"}},
		{"baremetal:allocation:delete", "rule:system_member or (role:member and rule:is_allocation_owner)", sysProj, "Release an allocation.", []string{"DELETE /v1/allocations/{allocation}"}},
		{"baremetal:allocation:update", "rule:system_member or (role:member and rule:is_allocation_owner)", sysProj, "Change name and extra fields of an allocation.", []string{"PATCH /v1/allocations/{allocation}"}},

		// Ports, portgroups and VIFs: a port has no owner of its own, so
		// each rule is checked against its node's owner and lessee.
		{"system_admin_or_owner_admin", "rule:system_admin or rule:system_service or rule:owner_admin or rule:owner_manager or rule:project_service", baseRule, "System admins and the owner's admins and managers (SYSTEM_ADMIN_OR_OWNER_ADMIN).", nil},
		{"baremetal:port:get", "rule:system_or_project_reader", sysProj, "Show a port.", []string{"GET /v1/ports/{port_id}", "GET /v1/nodes/{node}/ports", "GET /v1/portgroups/{portgroup}/ports"}},
		{"baremetal:port:list", "role:reader or role:service", sysProj, "List ports on nodes the caller's project owns or leases.", []string{"GET /v1/ports", "GET /v1/ports/detail"}},
		{"baremetal:port:list_all", "rule:system_reader", sysProj, "List every port.", []string{"GET /v1/ports", "GET /v1/ports/detail"}},
		{"baremetal:port:create", "rule:system_admin_or_owner_admin", sysProj, "Create a port.", []string{"POST /v1/ports"}},
		{"baremetal:port:update", "rule:system_member_or_owner_admin", sysProj, "Update a port.", []string{"PATCH /v1/ports/{port_id}"}},
		{"baremetal:port:delete", "rule:system_admin_or_owner_admin", sysProj, "Delete a port.", []string{"DELETE /v1/ports/{port_id}"}},
		{"baremetal:portgroup:get", "rule:system_or_project_reader", sysProj, "Show a portgroup.", []string{"GET /v1/portgroups/{portgroup}", "GET /v1/nodes/{node}/portgroups"}},
		{"baremetal:portgroup:list", "role:reader or role:service", sysProj, "List portgroups on nodes the caller's project owns or leases.", []string{"GET /v1/portgroups", "GET /v1/portgroups/detail"}},
		{"baremetal:portgroup:list_all", "rule:system_reader", sysProj, "List every portgroup.", []string{"GET /v1/portgroups", "GET /v1/portgroups/detail"}},
		{"baremetal:portgroup:create", "rule:system_admin_or_owner_admin", sysProj, "Create a portgroup.", []string{"POST /v1/portgroups"}},
		{"baremetal:portgroup:update", "rule:system_member_or_owner_admin", sysProj, "Update a portgroup.", []string{"PATCH /v1/portgroups/{portgroup}"}},
		{"baremetal:portgroup:delete", "rule:system_admin_or_owner_admin", sysProj, "Delete a portgroup.", []string{"DELETE /v1/portgroups/{portgroup}"}},
		{"baremetal:node:vif:list", "rule:system_or_project_reader", sysProj, "List VIFs attached to a node.", []string{"GET /v1/nodes/{node}/vifs"}},
		{"baremetal:node:vif:attach", "rule:system_or_owner_member_and_lessee_admin", sysProj, "Attach a VIF to a node.", []string{"POST /v1/nodes/{node}/vifs"}},
		{"baremetal:node:vif:detach", "rule:system_or_owner_member_and_lessee_admin", sysProj, "Detach a VIF from a node.", []string{"DELETE /v1/nodes/{node}/vifs/{vif}"}},

		// Drivers.
		{"baremetal:driver:get", "rule:system_reader", sys, "View list of available drivers.", []string{"GET /v1/drivers", "GET /v1/drivers/{driver_name}"}},
		{"baremetal:driver:get_properties", "rule:system_reader", sys, "View driver-specific properties.", []string{"GET /v1/drivers/{driver_name}/properties"}},
		{"baremetal:driver:get_raid_logical_disk_properties", "rule:system_reader", sys, "View driver-specific RAID metadata.", []string{"GET /v1/drivers/{driver_name}/raid/logical_disk_properties"}},

		// Chassis: system rules only, as Ironic's.
		{"baremetal:chassis:get", "rule:system_reader", sys, "Retrieve chassis records.", []string{"GET /v1/chassis", "GET /v1/chassis/detail", "GET /v1/chassis/{chassis_id}"}},
		{"baremetal:chassis:create", "rule:system_admin", sys, "Create chassis records.", []string{"POST /v1/chassis"}},
		{"baremetal:chassis:delete", "rule:system_admin", sys, "Delete chassis records.", []string{"DELETE /v1/chassis/{chassis_id}"}},
		{"baremetal:chassis:update", "rule:system_member", sys, "Update chassis records.", []string{"PATCH /v1/chassis/{chassis_id}"}},
		{"baremetal:node:update:chassis_uuid", "rule:system_admin", sysProj, "Set or change a node's chassis_uuid.", []string{"PATCH /v1/nodes/{node}"}},

		// Volume connectors and targets: their node's owner and lessee, as
		// Ironic's rules.
		{"system_member_or_owner_lessee_admin", "rule:system_member or rule:system_service or rule:owner_admin or rule:owner_manager or rule:lessee_admin or rule:lessee_manager or rule:project_service", baseRule, "System members and the admins and managers of the owner or lessee project (SYSTEM_MEMBER_OR_OWNER_LESSEE_ADMIN).", nil},
		{"baremetal:volume:list_all", "rule:system_reader", sysProj, "List every volume connector and target.", []string{"GET /v1/volume/connectors", "GET /v1/volume/targets", "GET /v1/nodes/{node}/volume/connectors", "GET /v1/nodes/{node}/volume/targets"}},
		{"baremetal:volume:list", "role:reader or role:service", sysProj, "List the volume connectors and targets of nodes the caller's project owns or leases.", []string{"GET /v1/volume/connectors", "GET /v1/volume/targets", "GET /v1/nodes/{node}/volume/connectors", "GET /v1/nodes/{node}/volume/targets"}},
		{"baremetal:volume:get", "rule:system_or_project_reader", sysProj, "Show volume connectors and targets.", []string{"GET /v1/volume", "GET /v1/volume/connectors/{connector}", "GET /v1/volume/targets/{target}", "GET /v1/nodes/{node}/volume"}},
		{"baremetal:volume:create", "rule:system_member_or_owner_lessee_admin", sysProj, "Create volume connectors and targets.", []string{"POST /v1/volume/connectors", "POST /v1/volume/targets"}},
		{"baremetal:volume:delete", "rule:system_member_or_owner_lessee_admin", sysProj, "Delete volume connectors and targets.", []string{"DELETE /v1/volume/connectors/{connector}", "DELETE /v1/volume/targets/{target}"}},
		{"baremetal:volume:update", "rule:system_or_owner_member_and_lessee_admin", sysProj, "Update volume connectors and targets.", []string{"PATCH /v1/volume/connectors/{connector}", "PATCH /v1/volume/targets/{target}"}},
		{"baremetal:volume:view_target_properties", "rule:system_reader or role:admin", sysProj, "See volume targets' properties, which may hold connection details.", []string{"GET /v1/volume/targets/{target}"}},

		// Deploy templates: system rules, as Ironic's.
		{"baremetal:deploy_template:get", "rule:system_reader", sysProj, "Retrieve deploy template records.", []string{"GET /v1/deploy_templates", "GET /v1/deploy_templates/{deploy_template}"}},
		{"baremetal:deploy_template:create", "rule:system_admin", sysProj, "Create deploy template records.", []string{"POST /v1/deploy_templates"}},
		{"baremetal:deploy_template:delete", "rule:system_admin", sysProj, "Delete deploy template records.", []string{"DELETE /v1/deploy_templates/{deploy_template}"}},
		{"baremetal:deploy_template:update", "rule:system_admin", sysProj, "Update deploy template records.", []string{"PATCH /v1/deploy_templates/{deploy_template}"}},

		// Inspection rules: system rules, as Ironic's.
		{"baremetal:inspection_rule:get", "rule:system_reader", sysProj, "Get inspection rule(s).", []string{"GET /v1/inspection_rules", "GET /v1/inspection_rules/{rule_id}"}},
		{"baremetal:inspection_rule:create", "rule:system_admin", sysProj, "Create inspection rule.", []string{"POST /v1/inspection_rules"}},
		{"baremetal:inspection_rule:update", "rule:system_admin", sysProj, "Update an inspection rule.", []string{"PATCH /v1/inspection_rules/{rule_id}"}},
		{"baremetal:inspection_rule:delete", "rule:system_admin", sysProj, "Delete an inspection rule.", []string{"DELETE /v1/inspection_rules/{rule_id}"}},

		// Vendor passthru: no driver of Anvil's has vendor methods.
		{"baremetal:node:vendor_passthru", "rule:system_admin", sysProj, "Access vendor-specific node functions.", []string{"GET /v1/nodes/{node}/vendor_passthru/methods", "POST /v1/nodes/{node}/vendor_passthru"}},
		{"baremetal:driver:vendor_passthru", "rule:system_admin", sys, "Access vendor-specific driver functions.", []string{"GET /v1/drivers/{driver}/vendor_passthru/methods", "POST /v1/drivers/{driver}/vendor_passthru"}},

		// Anvil's own administration.
		{"anvil:audit:list", "role:reader and system_scope:all", sys, "Read the audit log. Not service users: Anvil's administration is for people.", []string{"GET /v1/events"}},
		{"anvil:policy:get", "role:reader and system_scope:all", sys, "Read the effective policy and its override status. Not service users: Anvil's administration is for people.", nil},
		{"anvil:policy:update", "rule:system_admin", sys, "Upload a policy override.", nil},
		{"anvil:user:manage", "rule:system_admin", sys, "Create, delete and grant roles to local users.", nil},
		{"anvil:token:create", "role:reader or role:service", sysProj, "Mint an API token carrying some of one's own roles.", nil},
		{"anvil:token:revoke", "role:reader or role:service", sysProj, "Revoke one of one's own API tokens.", nil},
		{"anvil:user:list", "role:reader and system_scope:all", sys, "List users and their roles. Not service users: Anvil's administration is for people.", nil},
		{"anvil:firmware_image:list", "rule:system_reader", sys, "List the uploaded firmware images and their download URLs.", []string{"GET /v1/anvil/firmware-images"}},
		{"anvil:firmware_image:create", "rule:system_admin", sys, "Upload a firmware image, which BMCs then download without credentials from its URL.", []string{"POST /v1/anvil/firmware-images"}},
		{"anvil:firmware_image:delete", "rule:system_admin", sys, "Delete an uploaded firmware image.", []string{"DELETE /v1/anvil/firmware-images/{sha256}"}},
		{"anvil:node:agent_logs:get", "rule:system_reader", sys, "List and read the ramdisk agent's logs that failed runs on the node left (an Anvil extension; Ironic keeps them on the conductor's disk only). System readers only: the agent's journal shows the whole machine, its disks and networks, beyond what the node's projects are shown.", []string{"GET /v1/nodes/{node}/agent_logs", "GET /v1/nodes/{node}/agent_logs/{name}"}},
		{"anvil:node:recover", "rule:system_or_owner_or_lessee_member", sysProj, "Recover a node from a failed runbook run: retry the runbook or return the node (clean failed to manageable, service failed to active) when the runbook is retryable (its publisher did not opt out with extra anvil_retryable false), or ask the owner to look. Those who may run runbooks on the node may, as the portal spec's failure recovery says; Ironic has no such rule.", []string{"POST /v1/nodes/{node}/recover"}},
	}
}

// Protected names the rules overrides may never change: with them a system
// admin can always repair the policy and the accounts, whatever an upload
// says. The base rules they rely on are protected for the same reason.
var Protected = []string{"anvil:policy:get", "anvil:policy:update", "anvil:user:manage", "anvil:user:list", "system_admin", "system_reader"}

// IsBaseRule reports whether name is a building block other rules refer
// to: a default without scopes, or a name Ironic's defaults use for one
// (an operator's Ironic file may carry it). Overriding one silently
// changes every rule built on it ("system_member": "@" makes everyone a
// system member), so overrides may not; they change the rules that use
// it instead.
func IsBaseRule(name string) bool {
	switch name {
	case "project_member", "project_admin", "service_role":
		return true
	}
	for _, r := range Defaults() {
		if r.Name == name {
			return len(r.Scopes) == 0
		}
	}
	return false
}
